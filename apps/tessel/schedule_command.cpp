// tessel schedule --kind 1f1b|interleaved|zb-h1|zb-h2|zb-v|dualpipe|dualpipev --pp P [--vpp V]
//   --micro-batches M [--f 1 --b 1 --w 1 --fb F&B --comm 0]:
// prints each rank's timeline from the simulator, the makespan, the bubble and the peak in-flight
// activations per rank; the last line is the same as JSON.
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "option_checks.h"
#include "tessel/core/check.h"
#include "tessel/pipeline/simulate.h"

namespace tessel::app {
namespace {

struct ScheduleOptions {
  std::string kind = "1f1b";
  int pp = 4, vpp = 1, micro_batches = 8;
  pipeline::Costs costs;
  bool ops = false;
  std::string trace;  // Chrome trace file to write; empty: none
};

int run_schedule(const ScheduleOptions& o) {
  pipeline::Schedule s = pipeline::make_schedule(
      o.kind, o.pp, o.vpp, o.micro_batches,
      {std::max(o.costs.f, 1e-9), std::max(o.costs.b, 1e-9), std::max(o.costs.w, 1e-9)});
  pipeline::validate(s);
  pipeline::add_p2p(s);
  const auto t = pipeline::simulate(s, o.costs);
  std::printf("%s schedule: pp %d, %d chunks per rank, %d stages, %d micro-batches, F %.3g B %.3g W %.3g F&B %.3g "
              "comm %.3g (per stage of 1/pp of the model)\n",
              s.kind.c_str(), s.pp, s.vpp, s.stages(), s.micro_batches, o.costs.f, o.costs.b, o.costs.w,
              o.costs.fb >= 0 ? o.costs.fb : o.costs.f + o.costs.b + o.costs.w, o.costs.comm);
  const double unit = std::min({o.costs.f, o.costs.b, o.costs.w}) * s.pp / s.stages();
  std::printf("%s", pipeline::render(s, t, unit > 0 ? unit : 1.0).c_str());
  if (o.ops)
    for (int r = 0; r < s.pp; ++r) {
      std::printf("rank %d:", r);
      for (const auto& op : s.ranks[size_t(r)]) std::printf(" %s(%d,%d)", pipeline::op_name(op.kind), op.mb, op.chunk);
      std::printf("\n");
    }
  if (!o.trace.empty()) {
    std::ofstream f(o.trace);
    f << pipeline::chrome_trace(s, t);
    f.close();
    TESSEL_CHECK(f.good(), "--trace: cannot write '{}'", o.trace);
    std::printf("trace: %s (one time unit shown as 1 ms)\n", o.trace.c_str());
  }
  std::printf("bubble %.3f (makespan - mean busy time per rank)\n", t.bubble);
  std::printf("peak in-flight activations per rank (chunks forwarded, not yet through B):");
  for (const int p : t.peak_activations) std::printf(" %d", p);
  std::printf("\nheld until W per rank:");
  for (const int p : t.peak_held) std::printf(" %d", p);
  std::printf("\n");
  std::printf("%s\n", nlohmann::json{{"kind", s.kind},
                                     {"pp", s.pp},
                                     {"vpp", s.vpp},
                                     {"stages", s.stages()},
                                     {"micro_batches", s.micro_batches},
                                     {"makespan", t.makespan},
                                     {"bubble", t.bubble},
                                     {"bubble_fraction", t.bubble_fraction},
                                     {"busy", t.busy},
                                     {"peak_activations", t.peak_activations},
                                     {"peak_held", t.peak_held}}
                          .dump()
                          .c_str());
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
  cmd->add_option("--f", o->costs.f, "forward time of one stage (1/pp of the model)")->capture_default_str()->check(finite_non_negative());
  cmd->add_option("--b", o->costs.b, "input-gradient backward time of one stage")
      ->capture_default_str()
      ->check(finite_non_negative());
  cmd->add_option("--w", o->costs.w, "weight-gradient backward time of one stage")
      ->capture_default_str()
      ->check(finite_non_negative());
  cmd->add_option("--fb", o->costs.fb,
                  "time of an overlapped forward + full backward pair (F&B, DualPipe) of one stage; default F+B+W")
      ->check(finite_non_negative());
  cmd->add_option("--comm", o->costs.comm, "time of one activation transfer between ranks")
      ->capture_default_str()
      ->check(finite_non_negative());
  cmd->add_flag("--ops", o->ops, "also list every rank's operations");
  cmd->add_option("--trace", o->trace,
                  "write the simulated timeline as a Chrome trace (chrome://tracing, Perfetto; 1 unit = 1 ms)");
  return [o] { return run_schedule(*o); };
}

}  // namespace tessel::app
