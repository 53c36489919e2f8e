#pragma once
// The MPI backend's reductions as a ring over point-to-point messages (internal to comm/mpi.cpp).
//
// Why not MPI's own: Open MPI's reductions take temporaries of the whole message from malloc (its
// non-blocking all-reduce one as large as the buffer, its reduce-scatter the input and a block more),
// memory tessel's allocator never sees, so neither the accounting nor a dry run could count it (a
// 2-rank data-parallel step of llama-tiny held 29 MB of them, ZeRO-1's 41 MB). The ring's staging is
// tensor memory of the communication category, one or two buffers of at most a block per reduction in
// flight (comm/ring_staging.h).
//
// The algorithm (the bandwidth-optimal ring of Patarasuk & Yuan, 2009): the buffer is cut into one
// block per rank. Reduce-scatter: in p - 1 steps, rank i sends block (i - s - 1) mod p to rank i + 1
// and receives block (i - s - 2) mod p from rank i - 1, which it combines with its own; after the last
// step rank i holds the whole reduction of block i. All-gather (for all-reduce): in p - 1 more steps
// the reduced blocks go round the ring into place. Messages are at most ring_chunk_bytes(); each
// chunk of the blocks takes the steps in turn. Each block is reduced by one rank, so every rank ends
// with the same bits. The reduction order is fixed (a block's partial sum, then the next rank's
// value), so runs repeat bit for bit.
//
// Progress: MPI moves a posted message on its own at best; the next exchange is posted when a rank tests
// or waits on the reduction. A wait also advances every other ring reduction in flight in the process,
// as MPI's progress engine advances all its non-blocking collectives, so ranks that wait on their
// reductions in different orders cannot deadlock; so do the MPI backend's other waits, point-to-point
// and barrier (progress_ring_reductions). MPI's blocking collectives (all-to-all, all-gather,
// broadcast) do not: a rank inside one does not advance its ring reductions, so every rank must reach
// those in the same order relative to its waits on reductions (as MPI requires of collectives anyway).
// A reduction's work must be waited on or destroyed before its communicator: it posts its messages
// on the communicator's ring communicator, which goes with it.
#include <mpi.h>

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "tessel/comm/communicator.h"
#include "tessel/comm/watchdog.h"
#include "tessel/core/device_arena.h"
#include "tessel/core/tensor.h"

namespace tessel::comm {

void check_mpi(int rc, const char* what);

// Advances every ring reduction in flight in the process by what has arrived (the MPI backend's
// waits call it while they poll).
void progress_ring_reductions();

struct RingReduction {
  MPI_Comm comm;  // a communicator of the ring's own, so no other message can match its tags
  int rank, size, tag;
  DType t;  // f32, i32 or i64 (bf16 is reduced through an fp32 copy by the caller)
  ReduceOp op;
  const void* in;               // every block: block r is elements [bounds[r], bounds[r + 1])
  void* out;                    // all-reduce: `in` (in place); reduce-scatter: this rank's block
  std::vector<int64_t> bounds;  // size + 1 boundaries
  bool all_gather;              // all-reduce (in place): the reduced blocks then go to every rank
};

class RingReduceWork : public Work {
 public:
  // `finish` runs once the reduction is complete (e.g. rounds an fp32 copy back to bf16).
  RingReduceWork(RingReduction r, std::function<void()> finish, std::shared_ptr<const WaitInfo> watch);
  ~RingReduceWork() override;
  void wait() override;
  bool test() override;

 private:
  friend void progress_ring_reductions();
  bool advance();  // tests the exchange in flight; when it is done, combines and posts the next
  int recv_block() const;
  void post();
  void combine_received();
  void complete();
  // The staging goes when the reduction is waited on (or the work destroyed), not when it completes:
  // completion depends on when messages arrive, a wait is a point of the program, so the accounted
  // memory (and the dry run that reproduces it) does not depend on timing.
  void release_staging();
  const char* block_at(const void* base, int block, int64_t& count) const;  // this chunk of a block

  RingReduction r_;
  std::function<void()> finish_;
  std::shared_ptr<const WaitInfo> watch_;
  Tensor received_, partial_;  // staging: the chunk received; out of place on > 2 ranks, the partial passed on
  int64_t chunk_elems_ = 0, chunks_ = 0;
  int phase_ = 0;  // 0: reduce-scatter, 1: all-gather
  int64_t chunk_ = 0;
  int step_ = 0;
  MPI_Request reqs_[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  std::optional<DeviceMemoryAccess> in_flight_;
  bool done_ = false;
};

}  // namespace tessel::comm
