#pragma once
// Pipeline timelines in Chrome's trace event format (chrome://tracing, Perfetto), from the simulator
// (simulate.h: chrome_trace) or from a real step (executor.h: run_schedule records one): one track per
// rank, one complete span per operation (F, B, W, and for a real step the send / recv calls, whose
// receives span the wait; an F&B pair run fused, one span per turn of each pass), so predicted and
// measured timelines open side by side. A real step's MoE all-to-alls are drawn on a second track per
// rank ("rank R transfers"), each from its start until its wait returned.
#include <string>
#include <vector>

#include "tessel/comm/communicator.h"
#include "tessel/pipeline/schedule.h"

namespace tessel::pipeline {

struct TraceSpan {
  OpKind kind;
  int mb, chunk, stage;
  bool pair;           // part of an F&B pair
  double start, end;   // seconds (any origin shared by the ranks: the steady clock of one machine)
  // >= 0: not the op itself but a transfer it made (a TracedTransfer, core/transfer_spans.h), in
  // flight from start to end; drawn on the rank's transfer track, beside the compute that ran meanwhile.
  int transfer = -1;
};
using RankTrace = std::vector<TraceSpan>;  // one rank's spans in execution order

// The trace file's text; times shifted so that the earliest span starts at 0, in microseconds.
std::string chrome_trace(const std::string& title, const std::vector<RankTrace>& ranks);

// Every pipeline rank's spans, on pipeline rank 0 (empty elsewhere). Collective over pp.
std::vector<RankTrace> gather_traces(comm::Communicator& pp, const RankTrace& mine);

// Per rank: the time between its first span's start and its last span's end not covered by a
// compute span (F, B, W; transfers are not compute): its bubble, including the waits inside receives.
std::vector<double> idle_seconds(const std::vector<RankTrace>& ranks);

}  // namespace tessel::pipeline
