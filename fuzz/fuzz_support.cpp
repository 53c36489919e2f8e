#include "fuzz_support.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
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

constexpr std::string_view kScratchPrefix = "tessel-fuzz-";  // then the owner's pid, '-' and six random characters

// Removes the scratch directories of fuzzing processes that are gone: a finding, a timeout or a
// crash ends the process without its atexit handler, and so does libFuzzer's own exit after -runs
// (seen: the directory stayed); under /dev/shm what they leave is memory.
void remove_scratch_of_dead_processes(const std::filesystem::path& parent) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(parent, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(kScratchPrefix, 0) != 0) continue;
    const std::string rest = name.substr(kScratchPrefix.size());
    const size_t dash = rest.find('-');
    if (dash == 0 || dash == std::string::npos || rest.find_first_not_of("0123456789") != dash) continue;
    const long pid = std::strtol(rest.substr(0, dash).c_str(), nullptr, 10);
    if (pid <= 0 || ::kill(pid_t(pid), 0) == 0 || errno != ESRCH) continue;  // alive, or not ours to judge
    std::filesystem::remove_all(e.path(), ec);
  }
}

std::filesystem::path make_scratch_dir() {
  const std::string parent = scratch_parent();
  remove_scratch_of_dead_processes(parent);
  std::string templ = parent + "/" + std::string(kScratchPrefix) + std::to_string(::getpid()) + "-XXXXXX";
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
