// tessel plan estimate CONFIG --hardware HW --world N [--set k=v ...] [--memory-gib M]: the step time
// and memory of one layout on one hardware profile, predicted from the meta device's records of the
// real step (src/tessel/plan/estimate.h). CONFIG: a tessel YAML or a SimuMax model JSON; HW: a tessel
// profile (configs/hardware/, `tessel plan calibrate`) or a SimuMax system JSON. The last line
// printed is JSON.
// tessel plan calibrate --out FILE: measures this machine into a profile (src/tessel/plan/calibrate.h).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "option_checks.h"
#include "tessel/comm/communicator.h"
#include "tessel/core/check.h"
#include "tessel/plan/calibrate.h"
#include "tessel/plan/estimate.h"
#include "tessel/plan/planner_config.h"
#include "tessel/plan/search.h"

namespace tessel::app {
namespace {

struct EstimateOptions {
  std::string config, hardware;
  std::vector<std::string> sets;
  int world = 1;
  double memory_gib = 0;
  bool ops = false;
};

// "name 1.23 ms (45%)" lines, the largest first.
void print_shares(const char* title, const std::map<std::string, double>& seconds, double total) {
  std::vector<std::pair<double, std::string>> sorted;
  for (const auto& [name, t] : seconds) sorted.emplace_back(t, name);
  std::sort(sorted.rbegin(), sorted.rend());
  std::printf("  %s:\n", title);
  for (const auto& [t, name] : sorted)
    std::printf("    %-40s %10.3f ms  %5.1f%%\n", name.c_str(), 1e3 * t, total > 0 ? 100 * t / total : 0.0);
}

double gib(int64_t bytes) { return double(bytes) / double(int64_t(1) << 30); }

nlohmann::json categories_json(const MemoryStats::PerCategory& bytes) {
  nlohmann::json j = nlohmann::json::object();
  for (int c = 0; c < kMemoryCategories; ++c)
    j[std::string(memory_category_name(MemoryCategory(c)))] = gib(bytes[size_t(c)]);
  return j;
}

int run_estimate(const EstimateOptions& o) {
  const plan::HardwareProfile hw = plan::load_hardware_profile(o.hardware);
  const train::Config cfg = plan::load_plan_config(o.config, o.sets);
  const plan::Estimate e = plan::estimate_step(cfg, hw, o.world);
  std::printf("tessel plan estimate: %s on %d ranks of %s (%s)\n", o.config.c_str(), e.world, hw.name.c_str(),
              e.layout.c_str());
  const double memory_limit = o.memory_gib > 0 ? o.memory_gib : hw.memory_gib;
  const bool cpu = hw.device == "cpu";  // its memory holds oneDNN's GEMM primitives
  nlohmann::json stages = nlohmann::json::array();
  std::vector<std::string> too_big;
  for (const plan::StageEstimate& s : e.stages) {
    std::string comm;
    double exposed = 0;
    nlohmann::json comm_j = nlohmann::json::object();
    for (const auto& [group, t] : s.exposed_comm_s) {
      comm += fmt::format("{}{} {:.2f}", comm.empty() ? "" : ", ", group, 1e3 * t);
      exposed += t;
      comm_j[group] = 1e3 * t;
    }
    std::printf("%s (%zu ranks): step %.2f ms = passes %.2f ms (per micro-batch F %.2f, B %.2f, W %.2f) + bubble "
                "%.2f + optimizer %.2f + exposed communication %.2f ms (%s)\n",
                s.role.c_str(), s.ranks.size(), 1e3 * s.step_s, 1e3 * (s.pipeline_end_s - s.bubble_s),
                1e3 * s.forward_s, 1e3 * s.backward_s, 1e3 * s.weight_s, 1e3 * s.bubble_s, 1e3 * s.optimizer_s,
                1e3 * exposed, comm.empty() ? "none" : (comm + " ms").c_str());
    if (s.hidden_all_to_all_s > 0)
      std::printf("  fused F&B pairs hid %.2f ms of expert-parallel all-to-all behind the other pass's compute\n",
                  1e3 * s.hidden_all_to_all_s);
    std::string cats;
    for (int c = 0; c < kMemoryCategories; ++c)
      if (s.peak_bytes_by_category[size_t(c)] > 0)
        cats += fmt::format("{}{} {:.2f}", cats.empty() ? "" : ", ", memory_category_name(MemoryCategory(c)),
                            gib(s.peak_bytes_by_category[size_t(c)]));
    if (s.gemm_primitives > 0)
      cats += fmt::format("{}oneDNN's {} GEMM primitives {:.4f}", cats.empty() ? "" : " GiB; and ", s.gemm_primitives,
                          gib(s.gemm_primitive_bytes));
    std::printf("  peak memory %.2f GiB at %s (%s GiB)\n", gib(s.peak_bytes), s.peak_at.c_str(), cats.c_str());
    if (s.peak_reserved_bytes > 0)
      std::printf("  tessel's cpu pool holds at most %.2f GiB over two steps (in use plus the free blocks it keeps; with "
                  "the GEMM primitives)\n",
                  gib(s.peak_reserved_bytes));
    if (o.ops) {
      double kernels = 0;
      for (const auto& [op, t] : s.kernel_s_by_op) kernels += t;
      print_shares("kernels by op family (per step)", s.kernel_s_by_op, kernels);
      print_shares("collectives by group and kind (per step, exposed or not)", s.comm_s_by_kind, kernels);
    }
    if (memory_limit > 0 && gib(s.peak_bytes) > memory_limit)
      too_big.push_back(fmt::format("{}: peak {:.2f} GiB exceeds {:.2f} GiB per device ({})", s.role, gib(s.peak_bytes),
                                    memory_limit, o.memory_gib > 0 ? "--memory-gib" : "the profile's memory_gib"));
    stages.push_back({{"role", s.role},
                      {"ranks", s.ranks.size()},
                      {"step_ms", 1e3 * s.step_s},
                      {"compute_ms", 1e3 * s.compute_s},
                      {"forward_ms", 1e3 * s.forward_s},
                      {"backward_ms", 1e3 * s.backward_s},
                      {"weight_ms", 1e3 * s.weight_s},
                      {"layer_ms", [&] {  // per step: each of its layers' passes, then the rest of them
                         std::vector<double> ms;
                         for (const double t : s.layer_s) ms.push_back(1e3 * t);
                         return ms;
                       }()},
                      {"non_layer_ms", 1e3 * s.non_layer_s},
                      {"bubble_ms", 1e3 * s.bubble_s},
                      {"optimizer_ms", 1e3 * s.optimizer_s},
                      {"exposed_comm_ms", comm_j},
                      {"hidden_all_to_all_ms", 1e3 * s.hidden_all_to_all_s},
                      {"peak_memory_gib", gib(s.peak_bytes)},
                      {"peak_memory_gib_by_category", categories_json(s.peak_bytes_by_category)},
                      {"peak_reserved_memory_gib", s.peak_reserved_bytes > 0 ? nlohmann::json(gib(s.peak_reserved_bytes)) : nlohmann::json()},
                      {"gemm_primitives", cpu ? nlohmann::json(s.gemm_primitives) : nlohmann::json()},
                      {"gemm_primitive_memory_gib", cpu ? nlohmann::json(gib(s.gemm_primitive_bytes)) : nlohmann::json()},
                      {"peak_at", s.peak_at}});
  }
  std::printf("step %.2f ms | %.1f tokens/s | MFU %.1f%% | peak memory %.2f GiB (max over ranks) | estimated in "
              "%.2f s\n",
              1e3 * e.step_s, e.tokens_per_s, 100 * e.mfu, gib(e.peak_bytes), e.seconds);
  for (const auto& line : too_big) std::fprintf(stderr, "does not fit: %s\n", line.c_str());
  const nlohmann::json out{{"step_ms", 1e3 * e.step_s},
                           {"peak_memory_gib", gib(e.peak_bytes)},
                           {"peak_reserved_memory_gib", e.peak_reserved_bytes > 0 ? nlohmann::json(gib(e.peak_reserved_bytes)) : nlohmann::json()},
                           {"tokens_per_s", e.tokens_per_s},
                           {"mfu", e.mfu},
                           {"world", e.world},
                           {"hardware", hw.name},
                           {"fits", too_big.empty()},
                           {"stages", stages},
                           {"seconds", e.seconds}};
  std::printf("%s\n", out.dump().c_str());
  return too_big.empty() ? 0 : 1;
}

struct SearchCliOptions {
  std::string config, hardware;
  std::vector<std::string> sets;
  std::string fp8_recipes, pipeline_schedules;  // comma-separated, as given
  plan::SearchOptions search;
};

// A comma-separated option's items (checked by comma_separated_items: none is empty). One argument,
// split here: CLI11's list option took "--fp8-recipes ," as no item and the next argument
// ("--workers") as its value.
std::vector<std::string> comma_list(const std::string& text) {
  std::vector<std::string> items;
  if (text.empty()) return items;
  size_t from = 0;
  for (size_t comma; (comma = text.find(',', from)) != std::string::npos; from = comma + 1)
    items.push_back(text.substr(from, comma - from));
  items.push_back(text.substr(from));
  return items;
}

nlohmann::json candidate_json(const plan::Candidate& c) {
  return {{"layout", c.layout},
          {"overrides", c.overrides},
          {"step_ms", 1e3 * c.estimate.step_s},
          {"tokens_per_s", c.estimate.tokens_per_s},
          {"mfu", c.estimate.mfu},
          {"peak_memory_gib", gib(c.estimate.peak_bytes)}};
}

int run_search(SearchCliOptions o) {
  o.search.fp8_recipes = comma_list(o.fp8_recipes);
  o.search.pipeline_schedules = comma_list(o.pipeline_schedules);
  const plan::HardwareProfile hw = plan::load_hardware_profile(o.hardware);
  const auto load = [&](const std::vector<std::string>& layout) {
    std::vector<std::string> sets = o.sets;
    sets.insert(sets.end(), layout.begin(), layout.end());
    return plan::load_plan_config(o.config, sets);
  };
  plan::SearchOptions search = o.search;
  auto last = std::chrono::steady_clock::now();
  search.progress = [&last](int done, int structures) {  // a line on stderr every 10 s
    const auto now = std::chrono::steady_clock::now();
    if (now - last < std::chrono::seconds(10)) return;
    last = now;
    std::fprintf(stderr, "plan search: %d layouts estimated or pruned (%d structures)\n", done, structures);
  };
  const plan::SearchResult r = plan::search_layouts(load, hw, search);
  std::printf("tessel plan search: %s on %d ranks of %s: %d layouts enumerated, %zu fit, %.1f s\n", o.config.c_str(),
              o.search.world, hw.name.c_str(), r.enumerated, r.ranked.size(), r.seconds);
  std::printf("%4s  %-84s %10s %12s %6s %9s\n", "rank", "layout", "step ms", "tokens/s", "MFU", "peak GiB");
  nlohmann::json top = nlohmann::json::array();
  for (size_t i = 0; i < r.ranked.size() && int(i) < o.search.top; ++i) {
    const plan::Candidate& c = r.ranked[i];
    std::printf("%4zu  %-84s %10.2f %12.1f %5.1f%% %9.2f\n", i + 1, c.layout.c_str(), 1e3 * c.estimate.step_s,
                c.estimate.tokens_per_s, 100 * c.estimate.mfu, gib(c.estimate.peak_bytes));
    top.push_back(candidate_json(c));
  }
  nlohmann::json pruned = nlohmann::json::object();
  for (const auto& [reason, n] : r.pruned) {
    std::printf("pruned %d: %s\n", n, reason.c_str());
    pruned[reason] = n;
  }
  if (r.ranked.empty())
    std::fprintf(stderr, "no layout of %d ranks fits: %s\n", o.search.world,
                 r.pruned.empty() ? "none enumerated" : "every one was pruned (reasons above)");
  const nlohmann::json out{{"best", r.ranked.empty() ? nlohmann::json(nullptr) : candidate_json(r.ranked.front())},
                           {"top", top},
                           {"enumerated", r.enumerated},
                           {"fitting", r.ranked.size()},
                           {"pruned", pruned},
                           {"seconds", r.seconds}};
  std::printf("%s\n", out.dump().c_str());
  return r.ranked.empty() ? 1 : 0;
}

int run_calibration(const plan::CalibrateOptions& o) {
  // Checked before minutes of measuring, not when the profile is written.
  std::error_code ec;
  const std::filesystem::path out(o.out);
  const std::filesystem::path dir = out.has_parent_path() ? out.parent_path() : std::filesystem::path(".");
  TESSEL_CHECK(!o.out.empty() && !std::filesystem::is_directory(out, ec),
               "plan calibrate: --out '{}' must name a file to write, not {}", o.out,
               o.out.empty() ? "nothing" : "a directory");
  TESSEL_CHECK(std::filesystem::is_directory(dir, ec), "plan calibrate: --out '{}': its directory '{}' does not exist",
               o.out, dir.string());
  auto world = comm::mpi_launched() ? comm::make_mpi_world() : comm::make_local_communicator();
  const plan::HardwareProfile p = plan::calibrate_machine(*world, o);
  if (world->rank() == 0) {
    plan::save_hardware_profile(p, o.out);
    std::printf("wrote %s: %s | gemm bf16 peak %.1f GFLOP/s, f32 %.1f GFLOP/s | memory %.1f GB/s | kernel latency "
                "%.1f us, host %.1f us per kernel | %s\n",
                o.out.c_str(), p.name.c_str(), p.compute.at("gemm.bf16").peak_flops / 1e9,
                p.compute.at("gemm.f32").peak_flops / 1e9, p.memory_bandwidth / 1e9, p.kernel_latency_s * 1e6,
                p.host_seconds_per_kernel * 1e6,
                p.networks.empty() ? "no collectives (run under mpirun -np 2 to measure them)"
                                   : "collectives measured");
  }
  return 0;
}

}  // namespace

Action add_plan_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "plan", "Predict step time and memory of a layout on given hardware, search the layouts (estimate, search, calibrate)");
  cmd->require_subcommand(1);
  auto e = std::make_shared<EstimateOptions>();
  auto* est = cmd->add_subcommand("estimate", "Step time, its breakdown and memory per stage of one layout");
  est->add_option("config", e->config, "tessel YAML config, or a SimuMax model JSON")->required();
  est->add_option("--hardware", e->hardware, "hardware profile: configs/hardware/*.json or a SimuMax system JSON")
      ->required();
  est->add_option("--world", e->world, "number of ranks")->required()->check(integer_in(1, kMaxWorld));
  est->add_option("--set", e->sets, "config override key=value (repeatable)");
  est->add_flag("--ops", e->ops, "also print each stage's time by op family and by collective");
  est->add_option("--memory-gib", e->memory_gib, "memory per device (default: the profile's); exit 1 when a stage exceeds it")
      ->check(finite_positive());
  auto c = std::make_shared<plan::CalibrateOptions>();
  auto* cal = cmd->add_subcommand("calibrate", "Measure this machine into a hardware profile (under mpirun -np 2 "
                                                "it also measures the collectives)");
  cal->add_option("--out", c->out, "profile to write (JSON)")->required();
  cal->add_option("--name", c->name, "the profile's name (default: the CPU model)");
  cal->add_option("--repeats", c->repeats, "timed repetitions per point (the median counts)")->check(integer_at_least(1));
  auto s = std::make_shared<SearchCliOptions>();
  auto* sea = cmd->add_subcommand("search", "Estimate every layout of N ranks and rank those that fit by tokens/s");
  sea->add_option("config", s->config, "tessel YAML config, or a SimuMax model JSON")->required();
  sea->add_option("--hardware", s->hardware, "hardware profile: configs/hardware/*.json or a SimuMax system JSON")
      ->required();
  sea->add_option("--world", s->search.world, "number of ranks")->required()->check(integer_in(1, kMaxWorld));
  sea->add_option("--global-batch", s->search.global_batch, "sequences per step (default: the config's)")
      ->check(integer_at_least(1));
  sea->add_option("--memory-gib", s->search.memory_gib, "memory per device (default: the profile's)")
      ->check(finite_positive());
  sea->add_option("--top", s->search.top, "layouts to print (default 10)")->check(integer_at_least(1));
  sea->add_option("--set", s->sets, "config override key=value (repeatable), applied before each layout's");
  sea->add_option("--fp8-recipes", s->fp8_recipes,
                  "FP8 recipes to try besides the configured one, comma-separated (none, delayed, current, block; "
                  "default: the configured recipe only)")
      ->check(comma_separated_items());
  sea->add_option("--pipeline-schedules", s->pipeline_schedules,
                  "pipeline schedules to try besides the configured one on pipelined layouts, comma-separated "
                  "(1f1b, interleaved, zb-h1, zb-h2, zb-v, dualpipe, dualpipev; default: the configured schedule only)")
      ->check(comma_separated_items());
  s->search.workers = int(std::max(1u, std::thread::hardware_concurrency()));
  sea->add_option("--workers", s->search.workers, "processes estimating layouts at once (default: the cores)")
      ->check(integer_at_least(1));
  auto ran = std::make_shared<int>(0);
  est->callback([ran] { *ran = 1; });
  cal->callback([ran] { *ran = 2; });
  sea->callback([ran] { *ran = 3; });
  return [e, c, s, ran] {
    if (*ran == 1) return run_estimate(*e);
    return *ran == 3 ? run_search(*s) : run_calibration(*c);
  };
}

}  // namespace tessel::app
