#pragma once
// Runs the tessel binary for CLI tests in a fresh temporary directory.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/scratch_dir.h"

namespace tessel::testing {

struct RunResult {
  int exit_code;
  std::string output;  // stdout and stderr
};

// A scratch directory removed at scope exit.
class TempDir : public ScratchDir {
 public:
  TempDir() : ScratchDir("tessel-test") {}
  const std::string& path() const { return dir; }
};

// Runs the tessel binary in `cwd` with `args`; `env` assignments (e.g. "TESSEL_VERBOSE=1") go before
// the command, and with `seconds` > 0 it runs under `timeout`, so a command that hangs fails with
// status 124 instead of stalling the suite.
inline RunResult run_tessel(const std::string& args, const std::string& cwd, int seconds = 0,
                            const std::string& env = "") {
  const std::string out_file = cwd + "/.tessel-output";
  const std::string limit = seconds > 0 ? "timeout " + std::to_string(seconds) + " " : "";
  const std::string cmd = "cd '" + cwd + "' && OMP_NUM_THREADS=2 OMP_WAIT_POLICY=passive " + env + " " + limit + "'" +
                          std::string(TESSEL_BIN) + "' " + args + " > '" + out_file + "' 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream in(out_file);
  std::stringstream ss;
  ss << in.rdbuf();
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, ss.str()};
}

inline std::vector<double> metric_values(const std::string& metrics_path, const std::string& key) {
  std::vector<double> out;
  std::ifstream in(metrics_path);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) {
      const auto j = nlohmann::json::parse(line);
      if (j.contains(key)) out.push_back(j.at(key).get<double>());  // eval records lack "loss"
    }
  return out;
}

inline std::string config(const std::string& name) { return std::string(TESSEL_CONFIG_DIR) + "/" + name; }

// The last non-empty line of a command's output (the JSON summary of dry-run, plan, bench).
inline std::string last_line(const std::string& out) {
  const size_t end = out.find_last_not_of('\n');
  const size_t start = out.rfind('\n', end);
  return out.substr(start == std::string::npos ? 0 : start + 1, end - (start == std::string::npos ? 0 : start + 1) + 1);
}

}  // namespace tessel::testing
