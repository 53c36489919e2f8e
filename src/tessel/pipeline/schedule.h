#pragma once
// Pipeline schedules as data: for each pipeline rank, the ordered list of operations it runs.
//   F(mb, chunk)   forward of micro-batch mb through this rank's model chunk
//   B(mb, chunk)   backward for inputs ("B" of the ZeroBubble split, arXiv 2401.10241)
//   W(mb, chunk)   backward for weights (may be deferred; 1F1B runs it right after B)
//   send / recv    activations (forward) or their gradients (backward) to / from the neighbour
// An F marked `overlapped` forms an F&B pair with the next B (and that B's W) of its rank: DualPipe
// runs the two together so that one's communication hides behind the other's compute.
// Where a rank's chunks sit in the model is the schedule's Placement (below). One executor runs any
// schedule; one simulator (simulate.h) prices any schedule.
#include <functional>
#include <string>
#include <vector>

namespace tessel::pipeline {

enum class OpKind { F, B, W, send_fwd, recv_fwd, send_bwd, recv_bwd };
const char* op_name(OpKind k);

struct Op {
  OpKind kind;
  int mb;
  int chunk;
  bool overlapped = false;  // F only: runs as one F&B pair with the rank's next B and its W
};

// Which model stage each (rank, chunk) holds, for P ranks:
//   interleaved  V chunks per rank, P x V stages; chunk c of rank r is stage c * P + r (Megatron-LM).
//   v_shape      2 chunks, 2P stages in a V: rank r holds stages r and 2P - 1 - r, so rank 0 holds the
//                first and the last, and rank P - 1 passes stage P - 1's output to stage P itself
//                (ZB-V, DualPipeV).
//   dual         P stages, each held twice (DualPipe, even P): rank r holds stages r and P - 1 - r,
//                the lower as chunk 0, so that ranks r and P - 1 - r hold the same two stages alike
//                (their parameters are one layout; their gradients are summed). The first half of
//                the micro-batches enters at rank 0 and meets stage s on rank s, the second half
//                enters at rank P - 1 and meets it on rank P - 1 - s; a rank runs each micro-batch on
//                one of its chunks.
enum class Placement { interleaved, v_shape, dual };

struct Where {
  int rank, chunk;
};

struct Schedule {
  std::string kind;
  int pp = 1, vpp = 1, micro_batches = 1;
  std::vector<std::vector<Op>> ranks;  // ranks[r]: rank r's operations in order
  Placement placement = Placement::interleaved;

  // Model stages of the pipeline.
  int stages() const { return placement == Placement::dual ? pp : pp * vpp; }
  // The stage chunk `chunk` of rank `rank` holds.
  int virtual_stage(int rank, int chunk) const;
  // Whether chunk `chunk` of rank `rank` runs micro-batch mb: always, except under `dual` (the half
  // of the micro-batches that meets the chunk's stage on this rank).
  bool runs(int rank, int mb, int chunk) const;
  // The rank and chunk that run stage `stage` for micro-batch `mb`.
  Where holder(int stage, int mb) const;
};

// The generators refuse schedules of more than this many (rank, chunk, micro-batch) passes,
// pp x vpp x micro-batches: a schedule holds three compute operations per pass (plus their
// send/recv), the simulator prices them all, and a mistyped size would otherwise run for hours.
inline constexpr long long kMaxSchedulePasses = 1LL << 20;
// Throws unless pp, vpp and micro-batches are positive and within kMaxSchedulePasses.
void check_schedule_sizes(int pp, int vpp, int micro_batches);

// 1F1B (PipeDream-Flush): rank r runs min(P - r - 1, M) warm-up forwards, then alternates one
// forward and one backward, then drains the remaining backwards. W follows each B.
Schedule make_1f1b(int pp, int micro_batches);
// The same order with rank r's W of micro-batch k run once the B of k + lag(r) has (the rest after
// the last B): 1F1B is lag 0, ZB-H1 lag r.
Schedule make_1f1b_deferring_w(int pp, int micro_batches, const std::function<int(int rank)>& lag);

// Interleaved 1F1B (Megatron-LM, Narayanan et al. 2021): V chunks per rank, micro-batches in groups
// of P per chunk; warm-up (P - r - 1) * 2 + (V - 1) * P forwards. Requires M % P == 0.
Schedule make_interleaved_1f1b(int pp, int vpp, int micro_batches);

// ZB-H1 (ZeroBubble, Qi et al. 2024): 1F1B's order and memory (P - r micro-batches in flight on rank
// r), with rank r's W running r places behind its B; the deferred W's fill the drain. Bubble
// (P - 1)(F + B - W) against 1F1B's (P - 1)(F + B).
Schedule make_zb_h1(int pp, int micro_batches);

// ZB-H2: 2(P - r) - 1 warm-up forwards on rank r, then B and F alternate with W running 2r behind B:
// up to 2P - 1 micro-batches held until W on every rank, at any micro-batch count. Bubble (P - 1)(F + B - 2W) when B >= 2W;
// below that, the P - 1 forwards before the last rank starts are the floor of one step with a
// synchronous optimizer step (the paper removes them by overlapping steps, with post-validation of
// the optimizer step). Needs micro-batches >= 2P - 1.
Schedule make_zb_h2(int pp, int micro_batches);

// The relative times of one chunk's F, B and W that a cost-aware generator (zb-v) plans for.
struct PassTimes {
  double f = 1, b = 1, w = 1;
};

// ZB-V: two chunks per rank in a V (Placement::v_shape) with 1F1B's memory: at most 2P chunk
// activations (P stages) held per rank from F until W. Built by a list scheduler run at `times`
// (ZeroBubble's heuristic: a ready F while its chunk is under its limit, 2P - 1 - r for chunk 0 and
// r + 1 for chunk 1, else a ready B, else the oldest deferred W; chunk 1 first).
Schedule make_zb_v(int pp, int micro_batches, const PassTimes& times = {});

// DualPipe (DeepSeek-V3): Placement::dual; even P, even micro-batches >= 2P. Phases after the
// reference's: warm-up forwards, F&B pairs in the steady state, zero-bubble W's in the drain.
// Peak P + 1 chunk activations per rank; bubble (P/2 - 1)(F&B + B - 3W) (B the full backward).
Schedule make_dualpipe(int pp, int micro_batches);

// DualPipeV: DualPipe folded into a V over 2P stages on P ranks (Placement::v_shape); every
// micro-batch enters at rank 0. Micro-batches >= 2P. Peak 2P + 1 chunk activations per rank.
Schedule make_dualpipe_v(int pp, int micro_batches);

// The schedule kinds by name (parallel.pipeline_schedule, tessel schedule --kind), and the
// generator for one: vpp is the chunks per rank of `interleaved` (1f1b and the zero-bubble and
// DualPipe kinds fix their own: 1, or 2 for zb-v, dualpipe and dualpipev). Throws naming the kind and
// the allowed ones, or the constraint a size breaks.
const std::vector<std::string>& schedule_kinds();
bool is_schedule_kind(const std::string& kind);
std::string schedule_kinds_text();  // "1f1b, interleaved, ...", for messages
Schedule make_schedule(const std::string& kind, int pp, int vpp, int micro_batches, const PassTimes& times = {});
// The chunks per rank a kind runs with, given the configured vpp (which 1f1b and interleaved use;
// 1f1b with vpp > 1 runs interleaved).
int chunks_per_rank(const std::string& kind, int vpp);
// The placement of a kind.
Placement placement_of(const std::string& kind);
// The model stages a kind cuts the layers into on pp ranks (pp x chunks; DualPipe's copies: pp).
int stages_of(const std::string& kind, int pp, int vpp);
// The fewest micro-batches a kind's generator accepts on pp ranks (zb-h2 2P - 1, DualPipe 2P; else 1).
int fewest_micro_batches(const std::string& kind, int pp);

// Inserts the send/recv operations each compute operation implies (recv before, send after), except
// between two chunks of one rank (the V's bend), which the executor hands over in place.
void add_p2p(Schedule& s);

// Checks that every rank runs F, B and W of every (micro-batch, chunk) it holds exactly once, each B
// after its F and each W after its B, and that every overlapped F is followed by a B and then that
// B's W. Throws tessel::Error naming the first violation.
void validate(const Schedule& s);

}  // namespace tessel::pipeline
