#pragma once
// Timeline simulator: prices any schedule. Each rank runs its operations in order; an operation
// starts when its rank is free and its inputs exist: F of virtual stage v needs F of v - 1 (plus the
// communication time when v - 1 is on another rank), B of v needs B of v + 1 (the last stage: its own
// F), W needs its B. An F&B pair (an overlapped F, the next B and its W) starts when both its F and
// its B could, and both results exist when the pair ends. Costs are per pipeline stage of 1/P of the
// model (all of one rank's layers under 1F1B); a chunk costs its share of that (1/V interleaved, 1/2
// in a V, all of it under DualPipe, whose ranks hold two such stages). send/recv take no time of their
// own (their cost is `comm`).
#include <string>
#include <vector>

#include "tessel/pipeline/schedule.h"

namespace tessel::pipeline {

struct Costs {
  double f = 1, b = 1, w = 1, comm = 0;
  double fb = -1;  // an F&B pair of one stage; negative: f + b + w (the overlap saves nothing)
};

struct Event {
  Op op;
  double start, end;
};

struct Timeline {
  std::vector<std::vector<Event>> ranks;  // compute events per rank, in execution order
  double makespan = 0;
  double bubble = 0;                      // makespan - the mean busy time of a rank
  double bubble_fraction = 0;             // idle time / (ranks x makespan)
  std::vector<double> busy;               // per rank: time spent computing
  std::vector<int> peak_activations;      // per rank: micro-batch chunks forwarded but not yet through B
  std::vector<int> peak_held;             // per rank: ... not yet through W (what a deferred W keeps)
  std::vector<double> hidden;             // per rank: the transfers its fused pairs hid (StageCosts::f_hidable)
};

// Costs per virtual stage (index Schedule::virtual_stage(rank, chunk)): the time of one micro-batch's F, B and W through
// that chunk alone, so stages may differ (the first holds the embedding, the last the output head
// and loss); comm is the time of one activation (or gradient) transfer between neighbours.
struct StageCosts {
  std::vector<double> f, b, w;
  double comm = 0;
  double fb_scale = 1;  // an F&B pair takes fb_scale x (F of its forward's stage + B + W of its backward's)
  // Per virtual stage (empty: none): the seconds of its F and of its B spent in transfers that an F&B
  // pair run fused hides behind the other pass's compute (the MoE all-to-alls under
  // parallel.overlap_moe_expert_parallel_comm). A pair then saves min(F's transfers, B's compute) +
  // min(B's transfers, F's compute): each pass computes while the other's transfer is in flight.
  std::vector<double> f_hidable{}, b_hidable{};
};

// Throws tessel::Error naming the blocked operations if the schedule deadlocks.
Timeline simulate(const Schedule& s, const StageCosts& c);
// Uniform costs: every stage of 1/P of the model costs c.f (B c.b, W c.w), a chunk its share.
Timeline simulate(const Schedule& s, const Costs& c);

// A text chart: one row per rank, one character per time unit (F, B, W, '.' idle; lower case for
// odd chunks), then the makespan and bubble fraction. Rows are at most 4096 characters (fewer for
// hundreds of ranks): a longer timeline is drawn at a coarser unit.
std::string render(const Schedule& s, const Timeline& t, double unit = 1.0);

// The timeline in Chrome's trace event format (chrome://tracing, Perfetto): one track per rank
// ("rank R"), each compute event a complete span named "F", "B" or "W" (with its micro-batch, chunk
// and stage as arguments; "F&B" pairs marked), times in microseconds of `seconds_per_unit` each.
std::string chrome_trace(const Schedule& s, const Timeline& t, double seconds_per_unit = 1e-3);

}  // namespace tessel::pipeline
