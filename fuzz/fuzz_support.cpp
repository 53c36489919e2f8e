#include "fuzz_support.h"

#include <unistd.h>

#include <fstream>
#include <vector>

namespace tessel::fuzz {

namespace {

std::filesystem::path make_scratch_dir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/tessel-fuzz-XXXXXX";
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
