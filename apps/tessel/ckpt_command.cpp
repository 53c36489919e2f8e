// tessel ckpt consolidate: a checkpoint of either format (typically a distributed one, every rank's
// pieces) written as whole tensors (tessel-checkpoint-1) in a new checkpoint.dir, for tools that
// want one file per kind. Training, eval, generate and export-hf read either format directly.
#include <cstdio>
#include <filesystem>
#include <memory>

#include "commands.h"
#include "model_loading.h"
#include "tessel/ckpt/checkpoint.h"
#include "tessel/ckpt/distributed_checkpoint.h"
#include "tessel/core/check.h"
#include "tessel/core/paths.h"

namespace tessel::app {
namespace {

struct ConsolidateOptions {
  std::string ckpt, out;
};

int run_consolidate(const ConsolidateOptions& o) {
  std::error_code ec;
  TESSEL_CHECK(!o.out.empty(), "ckpt consolidate: --out is empty; give the checkpoint directory to create");
  TESSEL_CHECK(!std::filesystem::exists(o.out, ec) || std::filesystem::is_directory(o.out, ec),
               "ckpt consolidate: --out '{}' exists and is not a directory", o.out);
  TESSEL_CHECK(ckpt::list_checkpoints(o.out).empty(),
               "ckpt consolidate: '{}' already holds checkpoints; choose an empty --out so nothing is overwritten", o.out);
  // Inside the checkpoint read, the new step directory and `latest` would land among its files.
  TESSEL_CHECK(!path_is_or_is_under(o.out, o.ckpt),
               "ckpt consolidate: --out '{}' is inside --ckpt '{}'; choose a directory outside the checkpoint read",
               o.out, o.ckpt);
  load_first_valid_checkpoint(o.ckpt, [&](const std::string& d) {
    const std::string where = ckpt::consolidate_checkpoint(d, o.out);
    std::printf("consolidated %s into %s (whole tensors: model.safetensors, optimizer.safetensors)\n", d.c_str(),
                where.c_str());
  });
  return 0;
}

}  // namespace

Action add_ckpt_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("ckpt", "Checkpoint tools (consolidate)");
  cmd->require_subcommand(1);
  auto o = std::make_shared<ConsolidateOptions>();
  auto* consolidate = cmd->add_subcommand(
      "consolidate", "Write a checkpoint (a distributed one: every rank's pieces) as whole tensors in a new directory");
  consolidate->add_option("--ckpt", o->ckpt, "checkpoint.dir (its newest valid checkpoint) or one step_* directory")
      ->required();
  consolidate->add_option("--out", o->out, "checkpoint directory to create (holds step_N and latest)")->required();
  return [o] { return run_consolidate(*o); };
}

}  // namespace tessel::app
