// tessel schedule --kind 1f1b|interleaved --pp P [--vpp V] --micro-batches M [--f 1 --b 1 --w 1 --comm 0]:
// prints each rank's timeline from the simulator, the makespan and the bubble fraction.
#include <cstdio>

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
};

int run_schedule(const ScheduleOptions& o) {
  pipeline::Schedule s;
  if (o.kind == "1f1b") {
    TESSEL_CHECK(o.vpp == 1, "--kind 1f1b has one chunk per rank (--vpp 1); use --kind interleaved for --vpp {}",
                 o.vpp);
    s = pipeline::make_1f1b(o.pp, o.micro_batches);
  } else if (o.kind == "interleaved") {
    s = pipeline::make_interleaved_1f1b(o.pp, o.vpp, o.micro_batches);
  } else {
    TESSEL_FAIL("--kind '{}' is not supported (allowed: 1f1b, interleaved)", o.kind);
  }
  pipeline::validate(s);
  pipeline::add_p2p(s);
  const auto t = pipeline::simulate(s, o.costs);
  std::printf("%s schedule: pp %d, vpp %d, %d micro-batches, F %.3g B %.3g W %.3g comm %.3g (per full stage)\n",
              s.kind.c_str(), s.pp, s.vpp, s.micro_batches, o.costs.f, o.costs.b, o.costs.w, o.costs.comm);
  const double unit = std::min({o.costs.f, o.costs.b, o.costs.w}) / s.vpp;
  std::printf("%s", pipeline::render(s, t, unit > 0 ? unit : 1.0).c_str());
  if (o.ops)
    for (int r = 0; r < s.pp; ++r) {
      std::printf("rank %d:", r);
      for (const auto& op : s.ranks[size_t(r)]) std::printf(" %s(%d,%d)", pipeline::op_name(op.kind), op.mb, op.chunk);
      std::printf("\n");
    }
  nlohmann::json peaks = t.peak_activations;
  std::printf("%s\n", nlohmann::json{{"kind", s.kind},
                                     {"pp", s.pp},
                                     {"vpp", s.vpp},
                                     {"micro_batches", s.micro_batches},
                                     {"makespan", t.makespan},
                                     {"bubble_fraction", t.bubble_fraction},
                                     {"peak_activations", peaks}}
                          .dump()
                          .c_str());
  return 0;
}

}  // namespace

Action add_schedule_command(CLI::App& app) {
  auto o = std::make_shared<ScheduleOptions>();
  auto* cmd = app.add_subcommand("schedule", "Generate a pipeline schedule and price it with the timeline simulator");
  cmd->add_option("--kind", o->kind, "1f1b or interleaved")->capture_default_str();
  cmd->add_option("--pp", o->pp, "pipeline ranks")->capture_default_str()->check(integer_at_least(1));
  cmd->add_option("--vpp", o->vpp, "model chunks per rank (interleaved)")
      ->capture_default_str()
      ->check(integer_at_least(1));
  cmd->add_option("--micro-batches", o->micro_batches, "micro-batches per step")
      ->capture_default_str()
      ->check(integer_at_least(1));
  cmd->add_option("--f", o->costs.f, "forward time of one full stage")->capture_default_str()->check(finite_non_negative());
  cmd->add_option("--b", o->costs.b, "input-gradient backward time of one full stage")
      ->capture_default_str()
      ->check(finite_non_negative());
  cmd->add_option("--w", o->costs.w, "weight-gradient backward time of one full stage")
      ->capture_default_str()
      ->check(finite_non_negative());
  cmd->add_option("--comm", o->costs.comm, "time of one activation transfer between ranks")
      ->capture_default_str()
      ->check(finite_non_negative());
  cmd->add_flag("--ops", o->ops, "also list every rank's operations");
  return [o] { return run_schedule(*o); };
}

}  // namespace tessel::app
