// tessel launch: which exits it restarts, how many times, the attempt number each attempt sees, and a
// signal to the launcher passed to the run and ending it without a restart.
#include <gtest/gtest.h>

#include <string>

#include "cli_support.h"

using tessel::testing::run_tessel;
using tessel::testing::TempDir;

namespace {

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(Launch, RestartsAFailureUpToMaxRestartsWithTheAttemptNumber) {
  TempDir d;
  const auto r = run_tessel(
      "launch --max-restarts 2 --restart-delay 0 -- sh -c 'echo attempt=$TESSEL_LAUNCH_ATTEMPT; exit 3'", d.path(), 60);
  EXPECT_EQ(r.exit_code, 3) << r.output;
  for (const char* a : {"attempt=0", "attempt=1", "attempt=2"}) EXPECT_NE(r.output.find(a), std::string::npos) << r.output;
  EXPECT_EQ(count(r.output, "attempt="), 3);
  EXPECT_NE(r.output.find("giving up after 2 restarts"), std::string::npos) << r.output;
}

TEST(Launch, AFinishedOrDivergedOrUnrunnableCommandIsNotRestarted) {
  TempDir d;
  for (const auto& [command, status] : std::vector<std::pair<std::string, int>>{
           {"sh -c 'echo ran; exit 0'", 0}, {"sh -c 'echo ran; exit 65'", 65}, {"sh -c 'echo ran; exit 2'", 2}}) {
    const auto r = run_tessel("launch --restart-delay 0 -- " + command, d.path(), 60);
    EXPECT_EQ(r.exit_code, status) << r.output;
    EXPECT_EQ(count(r.output, "ran\n"), 1) << r.output;
  }
  const auto missing = run_tessel("launch --restart-delay 0 -- /nonexistent/tessel-nothing", d.path(), 60);
  EXPECT_EQ(missing.exit_code, 127) << missing.output;
  EXPECT_NE(missing.output.find("cannot run '/nonexistent/tessel-nothing'"), std::string::npos) << missing.output;
  EXPECT_EQ(count(missing.output, "ended after"), 1) << missing.output;
}

TEST(Launch, ARestartableStatusFromADeadRankIsRestartedUntilItFinishes) {
  TempDir d;
  // Fails (as a rank killed by SIGKILL makes mpirun exit 137) until the second attempt.
  const auto r = run_tessel(
      "launch --restart-delay 0 -- sh -c '[ \"$TESSEL_LAUNCH_ATTEMPT\" -ge 1 ] && exit 0; kill -9 $$'", d.path(), 60);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("attempt 1 ended after"), std::string::npos);
  EXPECT_NE(r.output.find("killed by signal 9"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("attempt 2 ended after"), std::string::npos);
}

TEST(Launch, SigtermToTheLauncherEndsTheRunWithoutARestart) {
  TempDir d;
  // The launcher in the background, SIGTERM to it once the child runs: the child (sleep) dies of it,
  // and the launcher exits at once with 75 (stopped: requeue), not restarting it.
  const std::string out = d.path() + "/launch.out";
  const std::string cmd = "cd '" + d.path() + "' && { '" + std::string(TESSEL_BIN) +
                          "' launch --restart-delay 0 -- sh -c 'echo child-running; exec sleep 30' > '" + out +
                          "' 2>&1 & pid=$!; sleep 1; kill -TERM $pid; wait $pid; }";
  const int rc = std::system(cmd.c_str());
  std::ifstream in(out);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, 75) << text.str();
  EXPECT_NE(text.str().find("passing it to the run, which will not be restarted"), std::string::npos) << text.str();
  EXPECT_EQ(count(text.str(), "child-running"), 1) << text.str();
}

}  // namespace
