#pragma once
// Communicator: the collectives and point-to-point operations parallel training needs, over one
// group of ranks (DESIGN.md section 1). Backends: `local` (one rank, no MPI) and `mpi` (OpenMPI).
// Buffers are raw element arrays; dtypes f32, bf16, i32, i64 (bf16 reductions accumulate in fp32 and
// round once). Non-blocking forms return a Work handle; the buffers must stay alive until wait().
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tessel/comm/comm_log.h"
#include "tessel/core/dtype.h"

namespace tessel::comm {

enum class ReduceOp { sum, max, min };

class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;  // completes the operation (idempotent)
  // Lets the operation progress without blocking; true once it is complete. MPI advances
  // non-blocking collectives only inside MPI calls, so work meant to overlap computation must be
  // tested now and then (GradReducer does, each time backward reports gradients).
  virtual bool test() = 0;
  // Abandons an operation that will not be completed (a receive posted early when the step fails),
  // so that destroying it does not wait for a message that may never come. Receives only.
  virtual void cancel() {}
};

// An operation that completed before its Work was returned (a backend without a non-blocking form).
class CompletedWork : public Work {
 public:
  void wait() override {}
  bool test() override { return true; }
};

// Payload bytes this rank handed to each kind of operation (for `tessel bench`'s communication
// figures): all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, send. The payload is what
// this rank contributes: all_reduce and broadcast `count`; all_gather its own block (`count`, or
// counts[rank]); reduce_scatter and all_to_all the whole input (size x count, or the sum of the
// counts); send `count`; recv nothing (the sender counts it). Every backend counts by this rule.
struct CommStats {
  int64_t calls = 0;
  int64_t bytes = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  const std::map<std::string, CommStats>& stats() const { return stats_; }
  void reset_stats() { stats_.clear(); }
  // Adds what the statistics gained since `before` (an earlier stats()) `times` more: collectives
  // a meta run did not make because they were alike ones it made (nn/alike_calls.h).
  void repeat_stats_since(const std::map<std::string, CommStats>& before, int64_t times) {
    for (auto& [kind, st] : stats_) {
      const auto b = before.find(kind);
      const CommStats was = b == before.end() ? CommStats{} : b->second;
      st.calls += (st.calls - was.calls) * times;
      st.bytes += (st.bytes - was.bytes) * times;
    }
  }
  // The group's name in the collective log ("tp", "dp", ...; ParallelState names its groups).
  const std::string& label() const { return label_; }
  void set_label(std::string label) { label_ = std::move(label); }
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* backend() const = 0;

  // buf [count] reduced across ranks, result on every rank.
  virtual void all_reduce(void* buf, int64_t count, DType t, ReduceOp op) = 0;
  // in [count] per rank -> out [size * count], rank r's block at r * count.
  virtual void all_gather(const void* in, void* out, int64_t count, DType t) = 0;
  // in [size * count] -> out [count]: rank r gets the reduction of every rank's block r.
  virtual void reduce_scatter(const void* in, void* out, int64_t count, DType t, ReduceOp op) = 0;
  // in [size * count]: block j goes to rank j; out [size * count]: block j came from rank j.
  virtual void all_to_all(const void* in, void* out, int64_t count, DType t) = 0;
  // Variable block sizes (elements): send_counts[j] to rank j, recv_counts[j] from rank j, packed.
  virtual void all_to_all_v(const void* in, const std::vector<int64_t>& send_counts, void* out,
                            const std::vector<int64_t>& recv_counts, DType t) = 0;
  // Uneven blocks (elements per rank in counts, packed in rank order): reduce_scatter_v gives rank r
  // the reduction of every rank's block r; all_gather_v packs every rank's block into out. `in` may
  // be rank r's own block inside `out` (in place). f32, i32, i64.
  virtual void reduce_scatter_v(const void* in, void* out, const std::vector<int64_t>& counts, DType t,
                                ReduceOp op) = 0;
  virtual void all_gather_v(const void* in, void* out, const std::vector<int64_t>& counts, DType t) = 0;
  virtual void broadcast(void* buf, int64_t count, DType t, int root) = 0;
  virtual void send(const void* buf, int64_t count, DType t, int dst, int tag) = 0;
  virtual void recv(void* buf, int64_t count, DType t, int src, int tag) = 0;
  virtual void barrier() = 0;

  virtual std::unique_ptr<Work> all_reduce_async(void* buf, int64_t count, DType t, ReduceOp op) = 0;
  virtual std::unique_ptr<Work> all_gather_async(const void* in, void* out, int64_t count, DType t) = 0;
  virtual std::unique_ptr<Work> reduce_scatter_async(const void* in, void* out, int64_t count, DType t,
                                                     ReduceOp op) = 0;
  virtual std::unique_ptr<Work> send_async(const void* buf, int64_t count, DType t, int dst, int tag) = 0;
  virtual std::unique_ptr<Work> recv_async(void* buf, int64_t count, DType t, int src, int tag) = 0;
  // The reduction of every rank's buf lands in root's buf (in place); the others' buf is left as it
  // was. f32, i32, i64. (The distributed optimizer reduces each gradient bucket to the ranks owning
  // its parts: the bytes of a reduce-scatter, launched during backward.) Counted as "reduce".
  virtual std::unique_ptr<Work> reduce_async(void* buf, int64_t count, DType t, ReduceOp op, int root) = 0;
  // all_gather_v in place without blocking: rank r's block already sits at its offset in out (the
  // sum of the counts before r). Any dtype. (The distributed optimizer gathers the updated
  // parameters bucket by bucket while the next forward runs: parallel.overlap_param_gather.)
  // Counted as "all_gather".
  virtual std::unique_ptr<Work> all_gather_v_async(void* out, const std::vector<int64_t>& counts, DType t) = 0;
  // all_to_all_v without blocking (the MoE dispatch and combine, overlapped with the other pass of
  // an F&B pair: parallel.overlap_moe_expert_parallel_comm). The count vectors are copied; in and out
  // must stay alive until wait(). By default the blocking form, done when this returns.
  virtual std::unique_ptr<Work> all_to_all_v_async(const void* in, const std::vector<int64_t>& send_counts, void* out,
                                                   const std::vector<int64_t>& recv_counts, DType t) {
    all_to_all_v(in, send_counts, out, recv_counts, t);
    return std::make_unique<CompletedWork>();
  }

  // Ranks with the same color form a new communicator, ordered by key. A negative color returns
  // null (the rank joins no group). Collective over this communicator.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;
  // The same by a rule every rank can evaluate for any rank: rank r takes (color, key) = rule(r).
  // By default this rank's pair goes to split() (collective); the meta communicator, which stands
  // for every rank of its group at once, evaluates the rule for all of them.
  using ColorKeyRule = std::function<std::pair<int, int>(int rank)>;
  virtual std::unique_ptr<Communicator> split_by(const ColorKeyRule& rule) {
    const auto [color, key] = rule(rank());
    return split(color, key);
  }

 protected:
  void count(const char* kind, int64_t elements, DType t) {
    CommStats& st = stats_[kind];
    ++st.calls;
    st.bytes += elements * int64_t(dtype_size(t));
    if (comm_log().enabled()) comm_log().add({label_, kind, elements * int64_t(dtype_size(t)), size(), false, {}});
  }

 private:
  std::map<std::string, CommStats> stats_;
  std::string label_;
};

// The dtypes every backend reduces (all_reduce, reduce_scatter: f32, bf16, i32, i64; the uneven
// reduce_scatter_v: f32, i32, i64); anything else is refused, naming the operation.
void check_reducible(DType t, const char* op);
void check_reducible_v(DType t, const char* op);

// The sum of one double per rank, added in rank order: exact to the last bit and identical on every
// rank (gathered as 8-byte words; MPI's reductions may add in any order).
double sum_in_rank_order(Communicator& c, double x);

// One rank, no MPI: collectives are copies, point-to-point is an error.
std::unique_ptr<Communicator> make_local_communicator();

// Rank `rank` of a group of `size` ranks with no other process (the meta device: a dry run of any
// layout on one machine). Collectives return at once; each is counted in stats() by the payload
// rule above, exactly as the mpi backend counts it. Meta tensors' buffers (null) are not touched;
// host buffers get what they would if every rank held this rank's data (sums x size, gathers and
// all-to-alls repeat this rank's block: balanced expert counts). Point-to-point completes without
// a peer. The staging the mpi backend holds while a reduction runs (its ring's buffers, the fp32
// copies of bf16) is allocated alike, on `staging`: the meta device in a dry run; the cpu when a test
// runs the cpu step over a meta world, as the mpi backend would hold it in cpu memory.
std::unique_ptr<Communicator> make_meta_communicator(int rank, int size, Device staging = Device::meta);

// MPI_COMM_WORLD (initialises MPI on first use, finalises at exit).
std::unique_ptr<Communicator> make_mpi_world();
// The MPI library's thread level (MPI_THREAD_SINGLE .. MULTIPLE, as MPI numbers them; SINGLE
// before MPI is initialised), and whether two threads may call it one at a time (SERIALIZED or
// more; true before MPI is initialised): an F&B pair run fused needs it.
int mpi_thread_level();
bool mpi_threads_serialized();
bool mpi_launched();  // true when started by mpirun / srun (OMPI_COMM_WORLD_SIZE or PMI_SIZE set)
// The uneven all-gather (all_gather_v) of more elements than one MPI call takes (int counts:
// 2^31 - 1) runs in chunks; tests lower the limit to reach that path. (Reductions run as a ring of
// messages of at most comm::ring_chunk_bytes(), comm/ring_staging.h, whatever their size.)
void set_mpi_max_count_for_testing(int64_t n);

// After an error on one rank: ends every rank of a multi-rank MPI job (the others may be waiting in a
// collective and would hang). Does nothing in a single-process run.
void abort_distributed(int code);

}  // namespace tessel::comm
