#pragma once
// Timeline simulator: prices any schedule. Each rank runs its operations in order; an operation
// starts when its rank is free and its inputs exist: F of virtual stage v needs F of v - 1 (plus the
// communication time across ranks), B of v needs B of v + 1 (the last stage: its own F), W needs its
// B. Costs are per full pipeline stage (all of one rank's layers); a chunk of an interleaved
// schedule costs 1/V of it. send/recv take no time of their own (their cost is `comm`).
#include <string>
#include <vector>

#include "tessel/pipeline/schedule.h"

namespace tessel::pipeline {

struct Costs {
  double f = 1, b = 1, w = 1, comm = 0;
};

struct Event {
  Op op;
  double start, end;
};

struct Timeline {
  std::vector<std::vector<Event>> ranks;  // compute events per rank, in execution order
  double makespan = 0;
  double bubble_fraction = 0;             // idle time / (ranks x makespan)
  std::vector<int> peak_activations;      // per rank: micro-batch chunks forwarded but not yet through B
};

// Costs per virtual stage (index chunk * pp + rank): the time of one micro-batch's F, B and W through
// that chunk alone, so stages may differ (the first holds the embedding, the last the output head
// and loss); comm is the time of one activation (or gradient) transfer between neighbours.
struct StageCosts {
  std::vector<double> f, b, w;
  double comm = 0;
};

// Throws tessel::Error naming the blocked operations if the schedule deadlocks.
Timeline simulate(const Schedule& s, const StageCosts& c);
// Uniform costs: every rank's whole stage costs c.f (B c.b, W c.w), a chunk 1/V of it.
Timeline simulate(const Schedule& s, const Costs& c);

// A text chart: one row per rank, one character per time unit (F, B, W, '.' idle; lower case for
// odd chunks), then the makespan and bubble fraction. Rows are at most 4096 characters (fewer for
// hundreds of ranks): a longer timeline is drawn at a coarser unit.
std::string render(const Schedule& s, const Timeline& t, double unit = 1.0);

}  // namespace tessel::pipeline
