#include "fuzz_support.h"

#include <unistd.h>

#include <fstream>
#include <vector>

namespace tessel::fuzz {

namespace {

// Where scratch files go: $TMPDIR if set, else /dev/shm (memory: every input is written to a file,
// and on a disk-backed /tmp the kernel's write path took 45% of each execution, measured with perf
// on the safetensors harness), else /tmp.
std::string scratch_parent() {
  const char* tmp = std::getenv("TMPDIR");
  if (tmp && *tmp) return tmp;
  std::error_code ec;
  if (std::filesystem::is_directory("/dev/shm", ec) && ::access("/dev/shm", W_OK | X_OK) == 0) return "/dev/shm";
  return "/tmp";
}

std::filesystem::path make_scratch_dir() {
  std::string templ = scratch_parent() + "/tessel-fuzz-XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (!::mkdtemp(buf.data())) {
    std::perror("tessel fuzz: mkdtemp");
    std::abort();
  }
  return buf.data();
}

void remove_scratch_dir() {
  std::error_code ec;
  std::filesystem::remove_all(scratch_dir(), ec);
}

}  // namespace

const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    auto d = make_scratch_dir();
    std::atexit(remove_scratch_dir);
    return d;
  }();
  return dir;
}

void write_file(const std::filesystem::path& p, std::string_view bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  if (!out.good()) {
    std::fprintf(stderr, "tessel fuzz: cannot write %s\n", p.c_str());
    std::abort();
  }
}

}  // namespace tessel::fuzz
