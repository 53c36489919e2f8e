// checkpoint.dir as one run's resource: the exclusive lock and the cleanup of interrupted saves.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "support/scratch_dir.h"
#include "tessel/ckpt/checkpoint_dir.h"
#include "tessel/core/check.h"

using namespace tessel;
namespace fs = std::filesystem;

namespace {

struct Scratch : tessel::testing::ScratchDir {
  Scratch() : ScratchDir("tessel-ckpt-dir") {}
};

// The PID of a process that has exited (and been reaped).
pid_t dead_pid() {
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  waitpid(pid, nullptr, 0);
  return pid;
}

TEST(CheckpointDirLock, ASecondHolderIsRefusedNamingTheDirAndThePid) {
  Scratch s;
  const std::string dir = s.dir + "/ck";
  {
    ckpt::CheckpointDirLock first(dir);
    try {
      ckpt::CheckpointDirLock second(dir);
      FAIL() << "expected an error";
    } catch (const Error& e) {
      const std::string want =
          fmt::format("checkpoint.dir '{}' is in use by another run (PID {}, holding {}/.lock)", dir, getpid(), dir);
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
  EXPECT_NO_THROW(ckpt::CheckpointDirLock again(dir));  // released with its holder
}

TEST(CheckpointDirLock, ReleasedWhenTheHolderIsKilled) {
  Scratch s;
  const std::string dir = s.dir + "/ck";
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    try {
      ckpt::CheckpointDirLock held(dir);
      const char c = 'x';
      if (write(ready[1], &c, 1) != 1) _exit(1);
      pause();  // until killed: the destructor never runs
    } catch (...) {
    }
    _exit(2);
  }
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  EXPECT_THROW(ckpt::CheckpointDirLock busy(dir), Error);
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  EXPECT_NO_THROW(ckpt::CheckpointDirLock after(dir));
  close(ready[0]);
  close(ready[1]);
}

TEST(StaleSaves, OnlyThoseOfProcessesNoLongerRunningAreRemoved) {
  Scratch s;
  const pid_t dead = dead_pid();
  const fs::path d(s.dir);
  const auto make_dir = [&](const std::string& name) {
    fs::create_directories(d / name);
    std::ofstream(d / name / "model.safetensors") << "partial";
  };
  const std::string dead_tmp = fmt::format("step_00000005.tmp-{}", dead);
  const std::string dead_old = fmt::format("step_00000004.old-{}", dead);
  const std::string dead_latest = fmt::format("latest.tmp-{}", dead);
  make_dir(dead_tmp);
  make_dir(dead_old);
  std::ofstream(d / dead_latest) << "step_00000005\n";
  make_dir(fmt::format("step_00000006.tmp-{}", getpid()));   // this process's save in progress
  make_dir(fmt::format("step_00000007.tmp-{}", getppid()));  // a running process's
  make_dir("step_00000003");                                 // a checkpoint
  make_dir(fmt::format("notes.tmp-{}", dead));               // not a save's
  auto removed = ckpt::remove_stale_saves(s.dir);
  std::sort(removed.begin(), removed.end());
  std::vector<std::string> expected{(d / dead_latest).string(), (d / dead_old).string(), (d / dead_tmp).string()};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(removed, expected);
  for (const auto& p : expected) EXPECT_FALSE(fs::exists(p)) << p;
  EXPECT_TRUE(fs::exists(d / fmt::format("step_00000006.tmp-{}", getpid())));
  EXPECT_TRUE(fs::exists(d / fmt::format("step_00000007.tmp-{}", getppid())));
  EXPECT_TRUE(fs::exists(d / "step_00000003/model.safetensors"));
  EXPECT_TRUE(fs::exists(d / fmt::format("notes.tmp-{}", dead)));
  EXPECT_TRUE(ckpt::remove_stale_saves(s.dir + "/absent").empty());
}

}  // namespace

// A killed save whose process is a zombie (dead, not yet reaped by its parent: under mpirun a rank
// of a killed job can linger so) is stale too.
TEST(StaleSaves, ThoseOfAnUnreapedDeadProcessAreRemoved) {
  Scratch s;
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  // Wait (without reaping) until the child has exited.
  siginfo_t info{};
  ASSERT_EQ(waitid(P_PID, id_t(child), &info, WEXITED | WNOWAIT), 0);
  const fs::path tmp = fs::path(s.dir) / fmt::format("step_00000002.tmp-{}", child);
  fs::create_directories(tmp);
  EXPECT_EQ(ckpt::remove_stale_saves(s.dir), std::vector<std::string>{tmp.string()});
  waitpid(child, nullptr, 0);
}
