#pragma once
// Subcommands of the tessel CLI. Each registers its options on the app and returns the action to run.
#include <CLI/CLI.hpp>

#include <functional>

namespace tessel::app {

using Action = std::function<int()>;
Action add_bench_command(CLI::App& app);
Action add_train_command(CLI::App& app);
Action add_train_tokenizer_command(CLI::App& app);
Action add_preprocess_command(CLI::App& app);
Action add_eval_command(CLI::App& app);
Action add_generate_command(CLI::App& app);
Action add_export_hf_command(CLI::App& app);
Action add_import_hf_command(CLI::App& app);
Action add_schedule_command(CLI::App& app);
Action add_dry_run_command(CLI::App& app);
Action add_ckpt_command(CLI::App& app);
Action add_plan_command(CLI::App& app);
Action add_launch_command(CLI::App& app);

}  // namespace tessel::app
