// tessel: train transformer language models. `tessel --help` lists the subcommands.
// Exit status (README "Exit status"): 0 done, 1 an error in the input or during the run,
// 2 a command-line usage error (unknown option, missing or malformed argument, missing file).
#include <cstdio>
#include <cstdlib>
#include <map>
#include <new>
#include <string>

#include "commands.h"
#include "tessel/core/device.h"
#include "tessel/comm/communicator.h"
#include "tessel/core/check.h"

namespace {

constexpr int kExitError = 1;
constexpr int kExitUsage = 2;

#ifdef NDEBUG
constexpr bool kDebugBuild = false;
#else
constexpr bool kDebugBuild = true;
#endif

bool verbose_requested_by_environment() {
  const char* v = std::getenv("TESSEL_VERBOSE");
  return v != nullptr && *v != '\0' && std::string(v) != "0";
}

// What the user reads for an exception escaping a command; the source location of a tessel::Error
// only when verbose.
std::string describe(const std::exception& e, bool verbose) {
  if (const auto* te = dynamic_cast<const tessel::Error*>(&e))
    return verbose && !te->where().empty() ? te->where() + ": " + te->what() : te->what();
  if (dynamic_cast<const std::bad_alloc*>(&e))
    return "out of memory (std::bad_alloc): a buffer larger than this machine can provide was requested; "
           "reduce the model sizes, train.micro_batch_size or model.seq_length";
  return e.what();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tessel: train transformer language models (C++20, CPU now; see README.md)"};
  app.require_subcommand(1);
  app.fallthrough();  // --verbose is accepted after the subcommand too (set before adding them: inherited)
  bool verbose = false;
  app.add_flag("--verbose", verbose, "print the source location of an error (also TESSEL_VERBOSE=1)");
  std::map<CLI::App*, tessel::app::Action> actions;
  for (auto add : {tessel::app::add_train_command, tessel::app::add_bench_command,
                   tessel::app::add_preprocess_command, tessel::app::add_train_tokenizer_command,
                   tessel::app::add_eval_command, tessel::app::add_generate_command,
                   tessel::app::add_export_hf_command, tessel::app::add_import_hf_command,
                   tessel::app::add_schedule_command, tessel::app::add_dry_run_command,
                   tessel::app::add_ckpt_command, tessel::app::add_plan_command,
                   tessel::app::add_launch_command}) {
    const size_t before = app.get_subcommands({}).size();
    auto action = add(app);
    actions[app.get_subcommands({}).at(before)] = action;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints the message (or the help text, whose code is 0)
    return code == 0 ? 0 : kExitUsage;
  }
  verbose = verbose || verbose_requested_by_environment() || kDebugBuild;
  try {
    tessel::strict_cpu();  // a TESSEL_DEVICE that names no mode fails before any command starts
    for (auto& [cmd, action] : actions)
      if (cmd->parsed()) return action();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tessel: error: %s\n", describe(e, verbose).c_str());
    std::fflush(stderr);
    tessel::comm::abort_distributed(kExitError);
    return kExitError;
  }
  return 0;
}
