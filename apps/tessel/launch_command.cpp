// tessel launch [--max-restarts N] [--restart-delay S] -- COMMAND...: runs COMMAND (typically
// `mpirun -np 4 tessel train CONFIG`) and restarts it when it fails, so a dead rank, a hung collective
// (the watchdog's exit 76) or a preemption (exit 75) costs the steps since the newest valid
// checkpoint and no person. `tessel train` resumes from checkpoint.dir by itself; the launcher only
// decides whether to run it again:
//   exit 0                      finished: done
//   exit 65 (resilience)        rewinding did not help: the data or settings are at fault, not restarted
//   exit 2 (usage)              a command-line error: not restarted
//   exit 126, 127               the command cannot be run: not restarted
//   anything else, or a signal  restarted, up to --max-restarts times
// The child runs in its own process group; SIGINT and SIGTERM to the launcher are passed to that
// group, and the launcher then exits without restarting it: 0 if the run still finished, else 75
// (stopped: requeue), whatever status mpirun gives when signalled itself. Each attempt
// sees TESSEL_LAUNCH_ATTEMPT (0, 1, ...): injected faults (resilience/faults.h) fire in attempt 0 only.
// Multi-node mpirun passes it on with `-x TESSEL_LAUNCH_ATTEMPT`.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "commands.h"
#include "option_checks.h"
#include "tessel/comm/watchdog.h"
#include "tessel/resilience/rewind.h"
#include "tessel/train/trainer.h"

namespace tessel::app {
namespace {

struct LaunchOptions {
  int max_restarts = 3;
  double restart_delay_s = 1.0;
  std::vector<std::string> command;
};

constexpr int kExitUsage = 2;  // main.cpp's, for a command line CLI11 refused

std::string describe_status(int status) {
  if (WIFSIGNALED(status)) return fmt::format("killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  const int code = WEXITSTATUS(status);
  const char* why = code == 0                                  ? "finished"
                    : code == train::kExitCodeStopped          ? "stopped by a signal after saving"
                    : code == resilience::kExitCodeDiverged    ? "diverged: rewinding did not help"
                    : code == comm::kExitCodeCollectiveTimeout ? "a collective timed out"
                    : code == kExitUsage                       ? "a usage error"
                    : code > 128                               ? "a process died of a signal"
                                                               : "an error";
  return fmt::format("exit status {} ({})", code, why);
}

// Whether a run that ended with `status` is worth running again.
bool restartable(int status) {
  if (WIFSIGNALED(status)) return true;
  const int code = WEXITSTATUS(status);
  // 126, 127: the command cannot be run (the shell's codes, and this launcher's after exec fails).
  return code != 0 && code != resilience::kExitCodeDiverged && code != kExitUsage && code != 126 && code != 127;
}

int exit_code_of(int status) { return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status); }

// Runs one attempt; returns its wait status. *stopped: the launcher was asked to stop meanwhile.
int run_attempt(const std::vector<std::string>& command, int attempt, bool* stopped) {
  sigset_t watched, before;
  sigemptyset(&watched);
  for (int s : {SIGINT, SIGTERM, SIGCHLD}) sigaddset(&watched, s);
  sigprocmask(SIG_BLOCK, &watched, &before);
  const pid_t child = ::fork();
  TESSEL_CHECK(child >= 0, "tessel launch: fork failed: {}", std::strerror(errno));
  if (child == 0) {
    ::setpgid(0, 0);                    // its own group: the launcher signals the whole job at once
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);  // a launcher that dies takes the run down, not unsupervised
    sigprocmask(SIG_SETMASK, &before, nullptr);
    ::setenv("TESSEL_LAUNCH_ATTEMPT", std::to_string(attempt).c_str(), 1);
    std::vector<char*> argv;
    for (const auto& a : command) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    const int why = errno;
    std::fprintf(stderr, "tessel launch: cannot run '%s': %s\n", argv[0], std::strerror(why));
    std::_Exit(why == ENOENT ? 127 : 126);  // as a shell: not found, or found but not executable
  }
  ::setpgid(child, child);  // also here: no signal may reach the group before it exists
  int status = 0;
  for (;;) {
    const pid_t done = ::waitpid(child, &status, WNOHANG);
    if (done == child) break;
    siginfo_t info;
    const timespec tick{0, 200'000'000};
    const int sig = ::sigtimedwait(&watched, &info, &tick);
    if (sig == SIGINT || sig == SIGTERM) {
      *stopped = true;
      std::fprintf(stderr, "tessel launch: received signal %d: passing it to the run, which will not be restarted\n", sig);
      ::kill(-child, sig);
    }
  }
  // What the command left in its group (ranks of an mpirun that was itself killed) would hold the
  // checkpoint directory's lock against the next attempt.
  ::kill(-child, SIGKILL);
  sigprocmask(SIG_SETMASK, &before, nullptr);
  return status;
}

int run_launch(const LaunchOptions& o) {
  TESSEL_CHECK(!o.command.empty(), "tessel launch: no command given (usage: tessel launch [OPTIONS] -- COMMAND ...)");
  for (int attempt = 0;; ++attempt) {
    bool stopped = false;
    const auto began = std::chrono::steady_clock::now();
    const int status = run_attempt(o.command, attempt, &stopped);
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    std::fprintf(stderr, "tessel launch: attempt %d ended after %.1f s: %s\n", attempt + 1, took,
                 describe_status(status).c_str());
    if (stopped && exit_code_of(status) != 0) {
      // The launcher itself was asked to stop (a preemption): whatever status the run's own launcher
      // reports for it (mpirun exits 1 when it is signalled, though its ranks saved and exited 75),
      // this is a stop to requeue, as `tessel train` would say.
      std::fprintf(stderr, "tessel launch: the run was stopped by the signal passed to it; exiting with %d (requeue)\n",
                   train::kExitCodeStopped);
      return train::kExitCodeStopped;
    }
    if (stopped || !restartable(status)) return exit_code_of(status);
    if (attempt >= o.max_restarts) {
      std::fprintf(stderr, "tessel launch: giving up after %d restarts (--max-restarts)\n", o.max_restarts);
      return exit_code_of(status);
    }
    std::fprintf(stderr, "tessel launch: restarting (%d of %d) in %.1f s; the run resumes from its newest valid "
                 "checkpoint\n", attempt + 1, o.max_restarts, o.restart_delay_s);
    std::fflush(stderr);
    std::this_thread::sleep_for(std::chrono::duration<double>(o.restart_delay_s));
  }
}

}  // namespace

Action add_launch_command(CLI::App& app) {
  auto o = std::make_shared<LaunchOptions>();
  auto* cmd = app.add_subcommand(
      "launch", "Run a training command and restart it after a failure (a dead rank, a hang, a preemption)");
  cmd->add_option("--max-restarts", o->max_restarts, "restarts before giving up")
      ->check(integer_in(0, 1000000));  // an int; CLI11's own range message printed 300 digits
  cmd->add_option("--restart-delay", o->restart_delay_s, "seconds between a failure and the restart (at most a day)")
      ->check(finite_in(0, 86400));
  cmd->add_option("command", o->command, "the command, after --: e.g. -- mpirun -np 4 tessel train CONFIG")
      ->required();
  cmd->footer("Restarted: any failure but exit 65 (rewinding did not help), 2 (usage), 126 and 127 (no such command). Not restarted: exit 0, "
              "or after the launcher itself got SIGINT/SIGTERM (passed on to the run; then exit 75 unless it finished). Exit status: the last attempt's.");
  return [o] { return run_launch(*o); };
}

}  // namespace tessel::app
