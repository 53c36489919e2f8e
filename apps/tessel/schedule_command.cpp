// tessel schedule --kind 1f1b|interleaved|zb-h1|zb-h2|zb-v|dualpipe|dualpipev --pp P [--vpp V]
//   --micro-batches M [--f 1 --b 1 --w 1 --fb F&B --comm 0]:
// prints each rank's timeline from the simulator, the makespan, the bubble and the peak in-flight
// activations per rank; the last line is the same as JSON.
#include <cstdio>
#include <algorithm>
#include <cmath>
#include <fstream>
#include <optional>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "option_checks.h"
#include "tessel/core/check.h"
#include "tessel/pipeline/simulate.h"
#include "tessel/pipeline/trace.h"

namespace tessel::app {
namespace {

// The largest cost of one pass or transfer: a step of up to 2^20 passes of it still sums to a finite
// time (a cost near the largest double made the sums infinite).
constexpr double kMaxCost = 1e12;

struct ScheduleOptions {
  std::string kind = "1f1b";
  int pp = 4, vpp = 1, micro_batches = 8;
  pipeline::Costs costs;
  bool ops = false;
  std::string trace;       // Chrome trace file to write; empty: none
  std::string costs_from;  // a measured step's trace (log.pipeline_trace) to take F, B, W per stage from
};

// Per stage, the mean F, B and W seconds of a measured step's trace (log.pipeline_trace), and that
// step's makespan and mean idle time per rank (idle: not in F, B or W, waits in receives included).
struct Measured {
  pipeline::StageCosts costs;
  double makespan = 0, idle = 0;
};

Measured measured_costs(const std::string& path, const pipeline::Schedule& s) {
  std::ifstream f(path);
  TESSEL_CHECK(f.good(), "--costs-from: cannot read '{}'", path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    TESSEL_FAIL("--costs-from: '{}' is not a Chrome trace: {}", path, e.what());
  }
  const size_t stages = size_t(s.stages());
  Measured m;
  m.costs.f.assign(stages, 0);
  m.costs.b = m.costs.w = m.costs.f;
  std::vector<double> n(3 * stages, 0.0);
  std::set<std::tuple<int, int, int, double>> counted;  // (F/B/W, stage, rank, micro-batch) spans counted in n
  std::vector<pipeline::RankTrace> ranks(size_t(s.pp));
  TESSEL_CHECK(j.is_object() && j.contains("traceEvents") && j["traceEvents"].is_array(),
               "--costs-from: '{}' is not a Chrome trace (an object with a traceEvents list)", path);
  // Span i's field, as log.pipeline_trace writes it: a finite number (an integer for ids).
  const auto field = [&](size_t i, const nlohmann::json& obj, const char* key, bool integer) {
    const auto it = obj.find(key);
    TESSEL_CHECK(it != obj.end() && (integer ? it->is_number_integer() : it->is_number()) &&
                     std::isfinite(it->get<double>()),
                 "--costs-from: '{}': traceEvents[{}] has no {} '{}' (each span needs name, tid, ts, dur and "
                 "args.stage, as log.pipeline_trace writes them)",
                 path, i, integer ? "integer" : "number", key);
    return it->get<double>();
  };
  const nlohmann::json& events = j["traceEvents"];
  for (size_t i = 0; i < events.size(); ++i) {
    const nlohmann::json& e = events[i];
    if (!e.is_object() || !e.contains("ph") || e["ph"] != "X") continue;
    // A transfer (an all-to-all in flight, on a rank's transfer track) is not an op of the schedule.
    if (e.contains("args") && e["args"].is_object() && e["args"].contains("made_by")) continue;
    const std::string name = e.contains("name") && e["name"].is_string() ? e["name"].get<std::string>() : "";
    TESSEL_CHECK(e.contains("args") && e["args"].is_object(),
                 "--costs-from: '{}': traceEvents[{}] has no 'args' object (its stage)", path, i);
    const double tid = field(i, e, "tid", true), stage_id = field(i, e["args"], "stage", true);
    TESSEL_CHECK(tid >= 0 && tid < s.pp && stage_id >= 0 && stage_id < double(stages),
                 "--costs-from: '{}' has a span of rank {} stage {}; the schedule has {} ranks and {} stages", path,
                 tid, stage_id, s.pp, stages);
    const int rank = int(tid), stage = int(stage_id);
    const double start = field(i, e, "ts", false) * 1e-6, dur = field(i, e, "dur", false) * 1e-6;
    // As the command line's costs: sums over a step must stay finite.
    TESSEL_CHECK(dur >= 0 && dur <= kMaxCost && std::abs(start) <= kMaxCost,
                 "--costs-from: '{}': traceEvents[{}] has ts {} us and dur {} us (dur from 0, both within {:g} s)", path,
                 i, start * 1e6, dur * 1e6, kMaxCost);
    pipeline::OpKind kind = pipeline::OpKind::send_fwd;  // any non-compute kind
    const int which = name == "F" ? 0 : name == "B" ? 1 : name == "W" ? 2 : -1;
    if (which >= 0) {
      kind = which == 0 ? pipeline::OpKind::F : which == 1 ? pipeline::OpKind::B : pipeline::OpKind::W;
      auto& list = which == 0 ? m.costs.f : which == 1 ? m.costs.b : m.costs.w;
      list[size_t(stage)] += dur;
      // A pass of an F&B pair run fused is drawn as one span per turn it held: counted once.
      const double mb = e["args"].contains("mb") ? field(i, e["args"], "mb", true) : -1.0 - double(i);
      if (counted.insert({which, stage, rank, mb}).second) n[size_t(which) * stages + size_t(stage)] += 1;
    }
    ranks[size_t(rank)].push_back({kind, 0, 0, stage, false, start, start + dur});
  }
  for (size_t v = 0; v < stages; ++v)
    for (int which = 0; which < 3; ++which) {
      const double count = n[size_t(which) * stages + v];
      TESSEL_CHECK(count > 0, "--costs-from: '{}' has no {} span of stage {}", path, "FBW"[which], v);
      auto& list = which == 0 ? m.costs.f : which == 1 ? m.costs.b : m.costs.w;
      list[v] /= count;
    }
  double first = 1e300, last = 0;
  for (auto& r : ranks) {
    std::sort(r.begin(), r.end(), [](const auto& a, const auto& b) { return a.start < b.start; });
    if (r.empty()) continue;
    first = std::min(first, r.front().start);
    last = std::max(last, r.back().end);
  }
  m.makespan = last - first;
  for (const double idle : pipeline::idle_seconds(ranks)) m.idle += idle / s.pp;
  return m;
}

int run_schedule(const ScheduleOptions& o) {
  pipeline::Schedule s = pipeline::make_schedule(
      o.kind, o.pp, o.vpp, o.micro_batches,
      {std::max(o.costs.f, 1e-9), std::max(o.costs.b, 1e-9), std::max(o.costs.w, 1e-9)});
  pipeline::validate(s);
  pipeline::add_p2p(s);
  std::optional<Measured> measured;
  if (!o.costs_from.empty()) measured = measured_costs(o.costs_from, s);
  const auto t = measured ? pipeline::simulate(s, measured->costs) : pipeline::simulate(s, o.costs);
  if (measured)
    std::printf("costs per stage from %s (seconds): measured step %.6f, mean idle per rank %.6f; predicted "
                "below\n",
                o.costs_from.c_str(), measured->makespan, measured->idle);
  if (measured)
    std::printf("%s schedule: pp %d, %d chunks per rank, %d stages, %d micro-batches, each stage's F, B, W as "
                "traced (seconds)\n",
                s.kind.c_str(), s.pp, s.vpp, s.stages(), s.micro_batches);
  else
    std::printf("%s schedule: pp %d, %d chunks per rank, %d stages, %d micro-batches, F %.3g B %.3g W %.3g F&B %.3g "
                "comm %.3g (per stage of 1/pp of the model)\n",
                s.kind.c_str(), s.pp, s.vpp, s.stages(), s.micro_batches, o.costs.f, o.costs.b, o.costs.w,
                o.costs.fb >= 0 ? o.costs.fb : o.costs.f + o.costs.b + o.costs.w, o.costs.comm);
  const double unit = measured ? t.makespan / 120 : std::min({o.costs.f, o.costs.b, o.costs.w}) * s.pp / s.stages();
  std::printf("%s", pipeline::render(s, t, unit > 0 ? unit : 1.0).c_str());
  if (o.ops)
    for (int r = 0; r < s.pp; ++r) {
      std::printf("rank %d:", r);
      for (const auto& op : s.ranks[size_t(r)]) std::printf(" %s(%d,%d)", pipeline::op_name(op.kind), op.mb, op.chunk);
      std::printf("\n");
    }
  if (!o.trace.empty()) {
    std::ofstream f(o.trace);
    f << pipeline::chrome_trace(s, t, measured ? 1.0 : 1e-3);  // traced costs are seconds already
    f.close();
    TESSEL_CHECK(f.good(), "--trace: cannot write '{}'", o.trace);
    std::printf("trace: %s (%s)\n", o.trace.c_str(), measured ? "in seconds" : "one time unit shown as 1 ms");
  }
  std::printf("bubble %.3f (makespan - mean busy time per rank)\n", t.bubble);
  std::printf("peak in-flight activations per rank (chunks forwarded, not yet through B):");
  for (const int p : t.peak_activations) std::printf(" %d", p);
  std::printf("\nheld until W per rank:");
  for (const int p : t.peak_held) std::printf(" %d", p);
  std::printf("\n");
  nlohmann::json out{{"kind", s.kind},
                     {"pp", s.pp},
                     {"vpp", s.vpp},
                     {"stages", s.stages()},
                     {"micro_batches", s.micro_batches},
                     {"makespan", t.makespan},
                     {"bubble", t.bubble},
                     {"bubble_fraction", t.bubble_fraction},
                     {"busy", t.busy},
                     {"peak_activations", t.peak_activations},
                     {"peak_held", t.peak_held}};
  if (measured) {
    out["measured_makespan"] = measured->makespan;
    out["measured_bubble"] = measured->idle;
  }
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace

Action add_schedule_command(CLI::App& app) {
  auto o = std::make_shared<ScheduleOptions>();
  auto* cmd = app.add_subcommand("schedule", "Generate a pipeline schedule and price it with the timeline simulator");
  cmd->add_option("--kind", o->kind, "1f1b, interleaved, zb-h1, zb-h2, zb-v, dualpipe or dualpipev")
      ->capture_default_str();
  cmd->add_option("--pp", o->pp, "pipeline ranks")->capture_default_str()->check(integer_at_least(1));
  cmd->add_option("--vpp", o->vpp, "model chunks per rank (interleaved)")
      ->capture_default_str()
      ->check(integer_at_least(1));
  cmd->add_option("--micro-batches", o->micro_batches, "micro-batches per step")
      ->capture_default_str()
      ->check(integer_at_least(1));
  cmd->add_option("--f", o->costs.f, "forward time of one stage (1/pp of the model)")->capture_default_str()->check(finite_in(0, kMaxCost));
  cmd->add_option("--b", o->costs.b, "input-gradient backward time of one stage")
      ->capture_default_str()
      ->check(finite_in(0, kMaxCost));
  cmd->add_option("--w", o->costs.w, "weight-gradient backward time of one stage")
      ->capture_default_str()
      ->check(finite_in(0, kMaxCost));
  cmd->add_option("--fb", o->costs.fb,
                  "time of an overlapped forward + full backward pair (F&B, DualPipe) of one stage; default F+B+W")
      ->check(finite_in(0, kMaxCost));
  cmd->add_option("--comm", o->costs.comm, "time of one activation transfer between ranks")
      ->capture_default_str()
      ->check(finite_in(0, kMaxCost));
  cmd->add_flag("--ops", o->ops, "also list every rank's operations");
  cmd->add_option("--costs-from", o->costs_from,
                  "a measured step's trace (log.pipeline_trace): simulate with its mean F, B, W per stage and print "
                  "the measured step and idle time beside the prediction");
  cmd->add_option("--trace", o->trace,
                  "write the simulated timeline as a Chrome trace (chrome://tracing, Perfetto; 1 unit = 1 ms)");
  return [o] { return run_schedule(*o); };
}

}  // namespace tessel::app
