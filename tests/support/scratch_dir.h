#pragma once
// A fresh directory under /tmp for one test, removed with everything in it at scope exit.
#include <cstdlib>
#include <filesystem>
#include <string>

namespace tessel::testing {

class ScratchDir {
 public:
  explicit ScratchDir(const std::string& tag = "tessel") {
    std::string tmpl = "/tmp/" + tag + "-XXXXXX";
    dir = mkdtemp(tmpl.data());
  }
  ~ScratchDir() { std::filesystem::remove_all(dir); }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  std::string operator/(const std::string& rel) const { return dir + "/" + rel; }
  std::string dir;
};

}  // namespace tessel::testing
