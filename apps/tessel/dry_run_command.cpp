// tessel dry-run CONFIG --world N [--set k=v ...] [--memory-gib M]: builds the layout of N ranks on
// the meta device and sets the real Trainer up for each distinct role (pipeline stage): per role,
// the model-state memory by category, exact and allocation-free. The last line printed is JSON.
// The training step on meta (activations and the peak inside the step) is not supported yet, and
// the output says so.
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "option_checks.h"
#include "tessel/core/check.h"
#include "tessel/train/dry_run.h"

namespace tessel::app {
namespace {

struct DryRunOptions {
  std::string config;
  std::vector<std::string> sets;
  int world = 1;
  double memory_gib = 0;  // 0: no limit
};

constexpr const char* kStepNotSupported =
    "the training step on the meta device is not supported yet (only the GEMM kernels dispatch by device): "
    "activations, workspaces and the peak inside the step are not counted";

double gib(int64_t bytes) { return double(bytes) / double(int64_t(1) << 30); }

int run_dry_run(const DryRunOptions& o) {
  const train::Config cfg = train::Config::load(o.config, o.sets);
  const train::DryRunResult r = train::dry_run_model_state(cfg, o.world);
  std::printf("tessel dry-run: %s on %d ranks (meta device): %s\n", o.config.c_str(), r.world, r.layout.c_str());
  std::printf("parameters: %.3fB total, %.3fB active per token\n", double(r.parameters_total) / 1e9,
              double(r.parameters_active_per_token) / 1e9);
  nlohmann::json roles = nlohmann::json::array();
  std::vector<std::string> too_big;
  for (const auto& role : r.roles) {
    nlohmann::json by_category = nlohmann::json::object(), requested = nlohmann::json::object();
    std::string text;
    for (int c = 0; c < kMemoryCategories; ++c) {
      const std::string name(memory_category_name(MemoryCategory(c)));
      by_category[name] = role.model_state[size_t(c)];
      requested[name] = role.model_state_requested[size_t(c)];
      const int64_t b = role.model_state_requested[size_t(c)];
      if (b > 0) text += fmt::format("{}{} {:.2f}", text.empty() ? "" : ", ", name, gib(b));
    }
    std::printf("%s (%zu ranks, evaluated on rank %d): %.3fB parameters, model state %.2f GiB (%s GiB; %.2f GiB "
                "in the cpu pool's blocks)\n",
                role.role.c_str(), role.ranks.size(), role.evaluated_rank, double(role.local_parameters) / 1e9,
                gib(role.model_state_requested_bytes), text.c_str(), gib(role.model_state_bytes));
    if (o.memory_gib > 0 && gib(role.model_state_requested_bytes) > o.memory_gib)
      too_big.push_back(fmt::format("{}: model state {:.2f} GiB exceeds --memory-gib {:g} ({} GiB)", role.role,
                                    gib(role.model_state_requested_bytes), o.memory_gib, text));
    roles.push_back({{"role", role.role},
                     {"ranks", role.ranks},
                     {"evaluated_rank", role.evaluated_rank},
                     {"local_parameters", role.local_parameters},
                     {"model_state_bytes", role.model_state_bytes},
                     {"model_state_bytes_by_category", by_category},
                     {"model_state_requested_bytes", role.model_state_requested_bytes},
                     {"model_state_requested_bytes_by_category", requested},
                     {"peak_bytes", nullptr}});
  }
  std::printf("not counted: %s\n", kStepNotSupported);
  for (const auto& line : too_big) std::fprintf(stderr, "does not fit: %s\n", line.c_str());
  std::printf("%.2f s\n", r.seconds);
  std::printf("%s\n", nlohmann::json{{"world", r.world},
                                     {"roles", roles},
                                     {"parameters_total", r.parameters_total},
                                     {"parameters_active_per_token", r.parameters_active_per_token},
                                     {"step", kStepNotSupported},
                                     {"fits", too_big.empty()},
                                     {"seconds", r.seconds}}
                          .dump()
                          .c_str());
  return too_big.empty() ? 0 : 1;
}

}  // namespace

Action add_dry_run_command(CLI::App& app) {
  auto o = std::make_shared<DryRunOptions>();
  auto* cmd = app.add_subcommand(
      "dry-run", "Set the run up for N ranks on the meta device (nothing allocated) and report each role's memory");
  cmd->add_option("config", o->config, "training config (YAML)")->required();
  cmd->add_option("--world", o->world, "number of ranks")->required()->check(integer_at_least(1));
  cmd->add_option("--set", o->sets, "config override key=value (repeatable)");
  cmd->add_option("--memory-gib", o->memory_gib, "memory per rank: a role whose model state exceeds it fails (exit 1)")
      ->check(finite_non_negative());
  return [o] { return run_dry_run(*o); };
}

}  // namespace tessel::app
