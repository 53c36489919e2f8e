// tessel: train transformer language models. `tessel --help` lists the subcommands.
#include <cstdio>
#include <map>

#include "commands.h"
#include "tessel/comm/communicator.h"
#include "tessel/core/check.h"

int main(int argc, char** argv) {
  CLI::App app{"tessel: train transformer language models (C++20, CPU now; see README.md)"};
  app.require_subcommand(1);
  std::map<CLI::App*, tessel::app::Action> actions;
  for (auto add : {tessel::app::add_train_command, tessel::app::add_bench_command,
                   tessel::app::add_preprocess_command, tessel::app::add_train_tokenizer_command,
                   tessel::app::add_eval_command, tessel::app::add_generate_command,
                   tessel::app::add_export_hf_command, tessel::app::add_import_hf_command,
                   tessel::app::add_schedule_command}) {
    const size_t before = app.get_subcommands({}).size();
    auto action = add(app);
    actions[app.get_subcommands({}).at(before)] = action;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    for (auto& [cmd, action] : actions)
      if (cmd->parsed()) return action();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tessel: error: %s\n", e.what());
    std::fflush(stderr);
    tessel::comm::abort_distributed(2);
    return 2;
  }
  return 0;
}
