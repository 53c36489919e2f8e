#include "tessel/comm/mpi_ring.h"

#include <algorithm>
#include <cstring>
#include <mutex>

#include "tessel/comm/ring_staging.h"
#include "tessel/core/check.h"
#include "tessel/core/memory.h"

namespace tessel::comm {
namespace {

// The ring reductions posted and not yet complete in this process, and the lock that makes testing
// them one thread at a time (MPI_THREAD_SERIALIZED).
std::mutex g_ring_mu;
std::vector<RingReduceWork*> g_in_flight;

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::f32: return MPI_FLOAT;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    default: break;
  }
  TESSEL_FAIL("ring reduction of {}: only f32, i32 and i64 are reduced", dtype_name(t));
}

// out[k] = mine[k] (op) theirs[k]; out may be mine.
template <class T>
void combine(ReduceOp op, int64_t n, const T* mine, const T* theirs, T* out) {
  switch (op) {
    case ReduceOp::sum:
      for (int64_t k = 0; k < n; ++k) out[k] = mine[k] + theirs[k];
      return;
    case ReduceOp::max:
      for (int64_t k = 0; k < n; ++k) out[k] = std::max(mine[k], theirs[k]);
      return;
    case ReduceOp::min:
      for (int64_t k = 0; k < n; ++k) out[k] = std::min(mine[k], theirs[k]);
      return;
  }
}

void combine(DType t, ReduceOp op, int64_t n, const void* mine, const void* theirs, void* out) {
  switch (t) {
    case DType::f32:
      return combine(op, n, static_cast<const float*>(mine), static_cast<const float*>(theirs), static_cast<float*>(out));
    case DType::i32:
      return combine(op, n, static_cast<const int32_t*>(mine), static_cast<const int32_t*>(theirs),
                     static_cast<int32_t*>(out));
    case DType::i64:
      return combine(op, n, static_cast<const int64_t*>(mine), static_cast<const int64_t*>(theirs),
                     static_cast<int64_t*>(out));
    default: TESSEL_FAIL("ring reduction of {}: only f32, i32 and i64 are reduced", dtype_name(t));
  }
}

int mod(int a, int p) { return ((a % p) + p) % p; }

}  // namespace

RingReduceWork::RingReduceWork(RingReduction r, std::function<void()> finish, std::shared_ptr<const WaitInfo> watch)
    : r_(std::move(r)), finish_(std::move(finish)), watch_(std::move(watch)) {
  TESSEL_CHECK(!r_.all_gather || r_.in == r_.out, "ring all-reduce: runs in place only");
  mpi_type(r_.t);  // checks the dtype
  const int64_t largest = ring_largest_block(r_.bounds);
  if (r_.size <= 1 || largest == 0) {  // nothing to exchange: out of place, this rank's block is the result
    if (!r_.all_gather && largest > 0) {
      const DeviceAccessScope on_device;
      std::memmove(r_.out, r_.in, size_t(largest) * dtype_size(r_.t));
    }
    complete();
    return;
  }
  chunk_elems_ = ring_staging_elements(largest, r_.t);
  chunks_ = (largest + chunk_elems_ - 1) / chunk_elems_;
  {
    MemoryCategoryScope tag(MemoryCategory::communication);
    received_ = Tensor::empty({chunk_elems_}, r_.t, Device::cpu);
    if (ring_staging_buffers(r_.size, r_.all_gather) > 1) partial_ = Tensor::empty({chunk_elems_}, r_.t, Device::cpu);
  }
  in_flight_.emplace();
  post();
  std::lock_guard<std::mutex> lock(g_ring_mu);
  g_in_flight.push_back(this);
}

RingReduceWork::~RingReduceWork() {
  if (!done_) {
    try {
      wait();
    } catch (...) {
    }
  }
  std::lock_guard<std::mutex> lock(g_ring_mu);
  g_in_flight.erase(std::remove(g_in_flight.begin(), g_in_flight.end(), this), g_in_flight.end());
}

const char* RingReduceWork::block_at(const void* base, int block, int64_t& count) const {
  const int64_t begin = r_.bounds[size_t(block)] + chunk_ * chunk_elems_;
  count = std::clamp<int64_t>(r_.bounds[size_t(block) + 1] - begin, 0, chunk_elems_);
  return static_cast<const char*>(base) + size_t(begin) * dtype_size(r_.t);
}

// The block this rank receives at the current step: reduce-scatter (i - s - 2) mod p, all-gather
// (i - s - 1) mod p; it sends the one before, the block its right neighbour receives.
int RingReduceWork::recv_block() const { return mod(r_.rank - step_ - (phase_ == 0 ? 2 : 1), r_.size); }

void RingReduceWork::post() {
  const int p = r_.size, i = r_.rank, recv = recv_block();
  int64_t send_n = 0, recv_n = 0;
  const char* send = block_at(r_.in, mod(recv + 1, p), send_n);
  // Out of place, a partial sum received at an earlier step goes on from the staging buffer.
  if (phase_ == 0 && !r_.all_gather && step_ > 0) send = static_cast<const char*>(partial_.device_ptr());
  // Reduce-scatter receives into the staging buffer, all-gather into place.
  const char* recv_at = block_at(phase_ == 0 ? r_.in : r_.out, recv, recv_n);
  void* into = phase_ == 0 ? received_.device_ptr() : const_cast<char*>(recv_at);
  const MPI_Datatype dt = mpi_type(r_.t);
  reqs_[0] = reqs_[1] = MPI_REQUEST_NULL;
  if (recv_n > 0)
    check_mpi(MPI_Irecv(into, int(recv_n), dt, mod(i - 1, p), r_.tag, r_.comm, &reqs_[1]), "ring reduction");
  if (send_n > 0)
    check_mpi(MPI_Isend(send, int(send_n), dt, mod(i + 1, p), r_.tag, r_.comm, &reqs_[0]), "ring reduction");
}

void RingReduceWork::combine_received() {
  if (phase_ != 0) return;  // all-gather: received in place
  const int p = r_.size;
  int64_t n = 0;
  const char* mine = block_at(r_.in, recv_block(), n);
  if (n == 0) return;
  const DeviceAccessScope on_device;
  const void* theirs = received_.device_ptr();
  if (r_.all_gather) {  // in place
    combine(r_.t, r_.op, n, mine, theirs, const_cast<char*>(mine));
  } else if (step_ == p - 2) {  // this rank's own block: the result
    char* out = static_cast<char*>(r_.out) + size_t(chunk_ * chunk_elems_) * dtype_size(r_.t);
    combine(r_.t, r_.op, n, mine, theirs, out);
  } else {
    combine(r_.t, r_.op, n, mine, theirs, partial_.device_ptr());
  }
}

bool RingReduceWork::advance() {
  if (done_) return true;
  int flag = 0;
  check_mpi(MPI_Testall(2, reqs_, &flag, MPI_STATUSES_IGNORE), "ring reduction");
  if (!flag) return false;
  combine_received();
  // Chunk by chunk, each through the steps of the phase (the partial of a chunk goes on at the next
  // step); the all-gather after the reduce-scatter.
  if (++step_ == r_.size - 1) {
    step_ = 0;
    if (++chunk_ == chunks_) {
      chunk_ = 0;
      if (phase_ == 1 || !r_.all_gather) {
        complete();
        return true;
      }
      phase_ = 1;
    }
  }
  post();
  return false;
}

void RingReduceWork::complete() {
  done_ = true;
  in_flight_.reset();
  if (finish_) finish_();
}

void RingReduceWork::release_staging() {
  received_ = Tensor();
  partial_ = Tensor();
}

void progress_ring_reductions() {
  std::lock_guard<std::mutex> lock(g_ring_mu);
  for (RingReduceWork* w : g_in_flight) w->advance();
}

bool RingReduceWork::test() {
  std::lock_guard<std::mutex> lock(g_ring_mu);
  return advance();
}

void RingReduceWork::wait() {
  if (!done_) {
    const WaitWatch timed(watch_);  // resilience.collective_timeout_s
    for (;;) {
      std::lock_guard<std::mutex> lock(g_ring_mu);
      if (advance()) break;
      for (RingReduceWork* other : g_in_flight)
        if (other != this) other->advance();
    }
  }
  release_staging();
}

}  // namespace tessel::comm
