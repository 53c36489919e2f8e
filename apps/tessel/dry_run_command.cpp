// tessel dry-run CONFIG --world N [--set k=v ...] [--steps S] [--memory-gib M] [--expert-skew F]: builds the layout of
// N ranks on the meta device, sets the real Trainer up for each distinct role (pipeline stage) and
// runs its training step there: per role, the model-state memory by category, the step's peak by
// category and where it occurs, the cpu pool's reserve (the meta device runs the same pool), FLOPs
// per op family and bytes per collective per group; exact and
// allocation-free (MoE routing balanced, or with expert 0 taking F times its share). The last line
// printed is JSON.
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
  int steps = 1;
  double memory_gib = 0;  // 0: no limit
  double expert_skew = 1;  // 1: balanced routing
};

double gib(int64_t bytes) { return double(bytes) / double(int64_t(1) << 30); }

// "parameters 1.20, gradients 0.80 GiB" of the non-zero categories.
std::string by_category_text(const MemoryStats::PerCategory& bytes) {
  std::string text;
  for (int c = 0; c < kMemoryCategories; ++c)
    if (bytes[size_t(c)] > 0)
      text += fmt::format("{}{} {:.2f}", text.empty() ? "" : ", ", memory_category_name(MemoryCategory(c)),
                          gib(bytes[size_t(c)]));
  return text + " GiB";
}

nlohmann::json by_category_json(const MemoryStats::PerCategory& bytes) {
  nlohmann::json j = nlohmann::json::object();
  for (int c = 0; c < kMemoryCategories; ++c) j[std::string(memory_category_name(MemoryCategory(c)))] = bytes[size_t(c)];
  return j;
}

void print_step(const train::StepMeasurement& st) {
  std::printf("  step peak %.2f GiB at %s (%s; %.2f GiB in the cpu pool's blocks)\n", gib(st.peak_requested_bytes),
              st.peak_at.c_str(), by_category_text(st.peak_requested_bytes_by_category).c_str(), gib(st.peak_bytes));
  std::printf("  the cpu pool's reserve peaks at %.2f GiB at %s (%.2f GiB of it free blocks)\n",
              gib(st.peak_reserved_bytes), st.peak_reserved_at.c_str(), gib(st.pool_free_bytes()));
  std::string ops;
  for (const auto& [op, t] : st.ops)
    if (t.flops > 0) ops += fmt::format("{}{} {:.3g}", ops.empty() ? "" : ", ", op, t.flops);
  std::printf("  FLOPs %.4g per step: %s\n", st.flops, ops.c_str());
  for (const auto& [group, kinds] : st.comm_by_group) {
    std::string k;
    for (const auto& [kind, c] : kinds)
      k += fmt::format("{}{} {} x, {:.3f} GiB", k.empty() ? "" : "; ", kind, c.calls, gib(c.bytes));
    std::printf("  %s group: %s\n", group.c_str(), k.c_str());
  }
}

int run_dry_run(const DryRunOptions& o) {
  const train::Config cfg = train::Config::load(o.config, o.sets);
  const train::DryRunResult r = train::dry_run(cfg, o.world, o.steps, o.expert_skew);
  std::printf("tessel dry-run: %s on %d ranks (meta device): %s\n", o.config.c_str(), r.world, r.layout.c_str());
  if (cfg.model.num_experts > 0)
    std::printf("MoE routing: %s\n", r.expert_skew > 1 ? fmt::format("skewed, expert 0 of every block takes {:g} x its "
                                                                     "share of the token copies", r.expert_skew).c_str()
                                                       : "balanced (every expert its share of the token copies)");
  std::printf("parameters: %.3fB total, %.3fB active per token\n", double(r.parameters_total) / 1e9,
              double(r.parameters_active_per_token) / 1e9);
  nlohmann::json roles = nlohmann::json::array();
  std::vector<std::string> too_big;
  for (const auto& role : r.roles) {
    std::printf("%s (%zu ranks, evaluated on rank %d): %.3fB parameters, model state %.2f GiB (%s; %.2f GiB "
                "in the cpu pool's blocks)\n",
                role.role.c_str(), role.ranks.size(), role.evaluated_rank, double(role.local_parameters) / 1e9,
                gib(role.model_state_requested_bytes), by_category_text(role.model_state_requested).c_str(),
                gib(role.model_state_bytes));
    nlohmann::json j{{"role", role.role},
                     {"ranks", role.ranks},
                     {"evaluated_rank", role.evaluated_rank},
                     {"local_parameters", role.local_parameters},
                     {"model_state_bytes", role.model_state_bytes},
                     {"model_state_bytes_by_category", by_category_json(role.model_state)},
                     {"model_state_requested_bytes", role.model_state_requested_bytes},
                     {"model_state_requested_bytes_by_category", by_category_json(role.model_state_requested)},
                     {"peak_bytes", nullptr}};
    if (role.step_ran) {
      const train::StepMeasurement& st = role.step;
      print_step(st);
      nlohmann::json flops = nlohmann::json::object(), comm = nlohmann::json::object(),
                     detail = nlohmann::json::object();
      for (const auto& [op, t] : st.ops) flops[op] = t.flops;
      for (const auto& [group, kinds] : st.comm_by_group) {
        int64_t bytes = 0;
        for (const auto& [kind, c] : kinds) {
          bytes += c.bytes;
          detail[group][kind] = {{"calls", c.calls}, {"bytes", c.bytes}};
        }
        comm[group] = bytes;
      }
      j["peak_bytes"] = st.peak_bytes;
      j["peak_bytes_by_category"] = by_category_json(st.peak_bytes_by_category);
      j["peak_requested_bytes"] = st.peak_requested_bytes;
      j["peak_requested_bytes_by_category"] = by_category_json(st.peak_requested_bytes_by_category);
      j["peak_reserved_bytes"] = st.peak_reserved_bytes;
      j["peak_reserved_bytes_by_category"] = by_category_json(st.peak_reserved_bytes_by_category);
      j["peak_reserved_bytes_by_category"]["pool_free"] = st.pool_free_bytes();
      j["peak_reserved_at"] = st.peak_reserved_at;
      j["peak_at"] = st.peak_at;
      j["flops"] = st.flops;
      j["flops_by_op"] = flops;
      j["comm_bytes_by_group"] = comm;
      j["comm_by_group"] = detail;
    }
    // The limit applies to the step's peak where it ran, else to the model state alone; both as
    // requested (what any device's allocator must serve, before its own rounding).
    const int64_t need = role.step_ran ? role.step.peak_requested_bytes : role.model_state_requested_bytes;
    if (o.memory_gib > 0 && gib(need) > o.memory_gib)
      too_big.push_back(role.step_ran
                            ? fmt::format("{}: step peak {:.2f} GiB at {} exceeds --memory-gib {:g} ({})", role.role,
                                          gib(need), role.step.peak_at, o.memory_gib,
                                          by_category_text(role.step.peak_requested_bytes_by_category))
                            : fmt::format("{}: model state {:.2f} GiB exceeds --memory-gib {:g} ({})", role.role,
                                          gib(need), o.memory_gib, by_category_text(role.model_state_requested)));
    roles.push_back(std::move(j));
  }
  const std::string not_run = o.steps == 0 ? "not run (--steps 0): model state only" : "";
  if (!not_run.empty()) std::printf("step: %s\n", not_run.c_str());
  for (const auto& line : too_big) std::fprintf(stderr, "does not fit: %s\n", line.c_str());
  std::printf("%.2f s\n", r.seconds);
  nlohmann::json out{{"world", r.world},
                     {"roles", roles},
                     {"parameters_total", r.parameters_total},
                     {"parameters_active_per_token", r.parameters_active_per_token},
                     {"fits", too_big.empty()},
                     {"expert_skew", r.expert_skew},
                     {"seconds", r.seconds}};
  if (!not_run.empty()) out["step"] = not_run;
  std::printf("%s\n", out.dump().c_str());
  return too_big.empty() ? 0 : 1;
}

}  // namespace

Action add_dry_run_command(CLI::App& app) {
  auto o = std::make_shared<DryRunOptions>();
  auto* cmd = app.add_subcommand(
      "dry-run", "Set the run up for N ranks on the meta device (nothing allocated) and report each role's memory");
  cmd->add_option("config", o->config, "training config (YAML)")->required();
  cmd->add_option("--world", o->world, "number of ranks")->required()->check(integer_in(1, kMaxWorld));
  cmd->add_option("--set", o->sets, "config override key=value (repeatable)");
  cmd->add_option("--steps", o->steps, "training steps to run per role on meta (0: model state only; the peak comes "
                                       "in the first steps)")
      ->check(integer_in(0, 100));
  cmd->add_option("--memory-gib", o->memory_gib,
                  "memory per rank: a role whose step peak (or model state, when the step is not run) exceeds it fails "
                  "(exit 1)")
      ->check(finite_positive());
  cmd->add_option("--expert-skew", o->expert_skew,
                  "MoE routing on meta: expert 0 of every block takes F times its share of the token copies (1: "
                  "balanced; at most num_experts / topk); under expert parallelism its rank is reported as a role "
                  "of its own")
      ->check(finite_non_negative());
  return [o] { return run_dry_run(*o); };
}

}  // namespace tessel::app
