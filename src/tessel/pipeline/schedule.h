#pragma once
// Pipeline schedules as data: for each pipeline rank, the ordered list of operations it runs.
//   F(mb, chunk)   forward of micro-batch mb through this rank's model chunk
//   B(mb, chunk)   backward for inputs ("B" of the ZeroBubble split)
//   W(mb, chunk)   backward for weights (may be deferred; 1F1B runs it right after B)
//   send / recv    activations (forward) or their gradients (backward) to / from the neighbour
// A rank with V virtual chunks holds virtual stages chunk * P + rank (Megatron's interleaving).
// One executor runs any schedule; one simulator (simulate.h) prices any schedule.
#include <string>
#include <vector>

namespace tessel::pipeline {

enum class OpKind { F, B, W, send_fwd, recv_fwd, send_bwd, recv_bwd };
const char* op_name(OpKind k);

struct Op {
  OpKind kind;
  int mb;
  int chunk;
};

struct Schedule {
  std::string kind;
  int pp = 1, vpp = 1, micro_batches = 1;
  std::vector<std::vector<Op>> ranks;  // ranks[r]: rank r's operations in order
  int virtual_stage(int rank, int chunk) const { return chunk * pp + rank; }
  int stages() const { return pp * vpp; }
};

// The generators refuse schedules of more than this many (rank, chunk, micro-batch) passes,
// pp x vpp x micro-batches: a schedule holds three compute operations per pass (plus their
// send/recv), the simulator prices them all, and a mistyped size would otherwise run for hours.
inline constexpr long long kMaxSchedulePasses = 1LL << 20;

// 1F1B (PipeDream-Flush): rank r runs min(P - r - 1, M) warm-up forwards, then alternates one
// forward and one backward, then drains the remaining backwards. W follows each B.
Schedule make_1f1b(int pp, int micro_batches);

// Interleaved 1F1B (Megatron-LM, Narayanan et al. 2021): V chunks per rank, micro-batches in groups
// of P per chunk; warm-up (P - r - 1) * 2 + (V - 1) * P forwards. Requires M % P == 0.
Schedule make_interleaved_1f1b(int pp, int vpp, int micro_batches);

// Inserts the send/recv operations each compute operation implies (recv before, send after).
void add_p2p(Schedule& s);

// Checks that every rank runs F, B and W of every (micro-batch, chunk) exactly once, each B after
// its F and each W after its B. Throws tessel::Error naming the first violation.
void validate(const Schedule& s);

}  // namespace tessel::pipeline
