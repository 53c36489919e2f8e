// The meta backend: one rank standing for a group of any size. What a collective would move is
// counted by the payload rule of communicator.h. A meta tensor's buffer is null and never touched.
// A non-null buffer (host values: token and expert counts, loss words; or cpu tensors when a test
// runs the cpu over a meta world) gets what it would if every rank of the group held the same data
// as this one: sums are size x the value, gathers repeat this rank's block, all-to-all returns the
// block this rank sends itself from every rank. That is the balanced assumption of a dry run: the
// expert counts every rank exchanges are this rank's own.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <utility>
#include <vector>

#include "tessel/comm/communicator.h"
#include "tessel/comm/ring_staging.h"
#include "tessel/core/check.h"
#include "tessel/core/device.h"
#include "tessel/core/tensor.h"

namespace tessel::comm {
namespace {

// Complete at once; holds the staging buffers the mpi backend's request would hold, for as long:
// `held` (bf16's fp32 copies) until the work is destroyed, `until_waited` (a ring reduction's
// staging, comm/mpi_ring.h) until it is waited on or destroyed.
class DoneWork : public Work {
 public:
  explicit DoneWork(std::vector<Tensor> held = {}, std::vector<Tensor> until_waited = {})
      : held_(std::move(held)), until_waited_(std::move(until_waited)) {}
  void wait() override { until_waited_.clear(); }
  bool test() override { return true; }

 private:
  std::vector<Tensor> held_, until_waited_;
};

// The mpi backend reduces bf16 through fp32 copies (mpi.cpp): one of the buffer for all_reduce, the
// input and the output for reduce_scatter, accounted as communication memory. The meta device
// accounts the same blocks, so a dry run's communication memory is the real run's.
std::vector<Tensor> bf16_staging(Device d, DType t, std::initializer_list<int64_t> elements) {
  std::vector<Tensor> held;
  if (t != DType::bf16) return held;
  MemoryCategoryScope tag(MemoryCategory::communication);
  for (int64_t n : elements) held.push_back(Tensor::empty({n}, DType::f32, d));
  return held;
}

// The ring's staging (comm/ring_staging.h), which the mpi backend holds while a reduction over
// `ranks` ranks of these blocks runs, added to `held`.
void add_ring_staging(std::vector<Tensor>& held, Device d, int ranks, const std::vector<int64_t>& bounds, DType t,
                      bool in_place) {
  const DType reduced = t == DType::bf16 ? DType::f32 : t;
  const int64_t largest = ring_largest_block(bounds);
  if (ranks <= 1 || largest == 0) return;
  MemoryCategoryScope tag(MemoryCategory::communication);
  for (int k = 0; k < ring_staging_buffers(ranks, in_place); ++k)
    held.push_back(Tensor::empty({ring_staging_elements(largest, reduced)}, reduced, d));
}

// x *= n for n elements of a reducible dtype (a sum over `n` ranks holding the same value).
void scale(void* buf, int64_t count, DType t, int n) {
  switch (t) {
    case DType::f32: for (int64_t i = 0; i < count; ++i) static_cast<float*>(buf)[i] *= float(n); return;
    case DType::i32: for (int64_t i = 0; i < count; ++i) static_cast<int32_t*>(buf)[i] *= n; return;
    case DType::i64: for (int64_t i = 0; i < count; ++i) static_cast<int64_t*>(buf)[i] *= n; return;
    case DType::bf16:
      for (int64_t i = 0; i < count; ++i) {
        bf16& v = static_cast<bf16*>(buf)[i];
        v = bf16(float(v) * float(n));
      }
      return;
    default: TESSEL_FAIL("meta communicator: cannot sum {}", dtype_name(t));
  }
}

// Every block j of out (block bytes at offsets[j]) = `block` (copied first: it may be one of them).
void repeat(const void* block, size_t bytes, void* out, const std::vector<size_t>& offsets) {
  if (bytes == 0) return;  // nothing to copy (and memcpy may not be given a null block)
  const std::vector<char> copy(static_cast<const char*>(block), static_cast<const char*>(block) + bytes);
  for (size_t at : offsets) std::memcpy(static_cast<char*>(out) + at, copy.data(), bytes);
}

std::vector<size_t> even_offsets(int n, size_t bytes) {
  std::vector<size_t> o;
  for (int j = 0; j < n; ++j) o.push_back(size_t(j) * bytes);
  return o;
}

class MetaCommunicator : public Communicator {
 public:
  MetaCommunicator(int rank, int size, Device staging) : rank_(rank), size_(size), staging_(staging) {
    TESSEL_CHECK(size > 0 && rank >= 0 && rank < size, "meta communicator: rank {} of {} ranks", rank, size);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "meta"; }

  void all_reduce(void* buf, int64_t n, DType t, ReduceOp op) override { all_reduce_async(buf, n, t, op)->wait(); }
  void all_gather(const void* in, void* out, int64_t n, DType t) override {
    const DeviceAccessScope buffers;  // host code filling device buffers: after the kernels before
    count("all_gather", n, t);
    if (out) repeat(in, bytes(n, t), out, even_offsets(size_, bytes(n, t)));
  }
  void reduce_scatter(const void* in, void* out, int64_t n, DType t, ReduceOp op) override {
    reduce_scatter_async(in, out, n, t, op)->wait();
  }
  void all_to_all(const void* in, void* out, int64_t n, DType t) override {
    const DeviceAccessScope buffers;  // host code filling device buffers: after the kernels before
    count("all_to_all", n * size_, t);
    if (out) repeat(static_cast<const char*>(in) + size_t(rank_) * bytes(n, t), bytes(n, t), out,
                    even_offsets(size_, bytes(n, t)));
  }
  void all_to_all_v(const void* in, const std::vector<int64_t>& send_counts, void* out,
                    const std::vector<int64_t>& recv_counts, DType t) override {
    const DeviceAccessScope buffers;  // host code filling device buffers: after the kernels before
    check_counts(send_counts, "all_to_all_v send");
    check_counts(recv_counts, "all_to_all_v receive");
    count("all_to_all", sum(send_counts), t);
    if (!out) return;
    // Block j gets what this rank sends itself, as far as it holds (the rest of it is left as it
    // is: a combine returns other ranks' rows, whose values a rank standing alone cannot know).
    const int64_t own = send_counts[size_t(rank_)];
    int64_t from = 0, at = 0;
    for (int j = 0; j < rank_; ++j) from += send_counts[size_t(j)];
    const std::vector<char> block(static_cast<const char*>(in) + size_t(from) * dtype_size(t),
                                  static_cast<const char*>(in) + size_t(from + own) * dtype_size(t));
    for (int j = 0; j < size_; ++j) {
      const size_t n = bytes(std::min(own, recv_counts[size_t(j)]), t);
      if (n > 0) std::memcpy(static_cast<char*>(out) + size_t(at) * dtype_size(t), block.data(), n);  // n 0: block may be null
      at += recv_counts[size_t(j)];
    }
  }
  void reduce_scatter_v(const void* in, void* out, const std::vector<int64_t>& counts, DType t, ReduceOp op) override {
    const DeviceAccessScope buffers;  // host code filling device buffers: after the kernels before
    check_reducible_v(t, "reduce_scatter_v");
    check_counts(counts, "reduce_scatter_v");
    count("reduce_scatter", sum(counts), t);
    std::vector<Tensor> staging;  // held for the call, as the mpi backend's ring holds it
    add_ring_staging(staging, staging_, size_, ring_counted_block_bounds(counts), t, false);
    if (!out) return;
    int64_t at = 0;
    for (int j = 0; j < rank_; ++j) at += counts[size_t(j)];
    std::memmove(out, static_cast<const char*>(in) + size_t(at) * dtype_size(t), bytes(counts[size_t(rank_)], t));
    if (op == ReduceOp::sum) scale(out, counts[size_t(rank_)], t, size_);
  }
  void all_gather_v(const void* in, void* out, const std::vector<int64_t>& counts, DType t) override {
    const DeviceAccessScope buffers;  // host code filling device buffers: after the kernels before
    check_counts(counts, "all_gather_v");
    count("all_gather", counts[size_t(rank_)], t);
    if (!out) return;  // other ranks' blocks (other shards) are not known: only this rank's is placed
    int64_t at = 0;
    for (int j = 0; j < rank_; ++j) at += counts[size_t(j)];
    std::memmove(static_cast<char*>(out) + size_t(at) * dtype_size(t), in, bytes(counts[size_t(rank_)], t));
  }
  void broadcast(void*, int64_t n, DType t, int root) override {
    check_peer(root, "broadcast root");
    count("broadcast", n, t);
  }
  void send(const void*, int64_t n, DType t, int dst, int) override {
    check_peer(dst, "send to");
    count("send", n, t);
  }
  void recv(void*, int64_t, DType, int src, int) override { check_peer(src, "recv from"); }
  void barrier() override {}

  std::unique_ptr<Work> all_reduce_async(void* buf, int64_t n, DType t, ReduceOp op) override {
    const DeviceAccessScope buffers;  // host code filling device buffers: after the kernels before
    check_reducible(t, "all_reduce");
    count("all_reduce", n, t);
    if (buf && op == ReduceOp::sum) scale(buf, n, t, size_);  // max and min of equal values: the value
    std::vector<Tensor> ring;
    std::vector<Tensor> copies = bf16_staging(staging_, t, {n});
    add_ring_staging(ring, staging_, size_, ring_block_bounds(n, size_), t, true);
    return std::make_unique<DoneWork>(std::move(copies), std::move(ring));
  }
  std::unique_ptr<Work> all_gather_async(const void* in, void* out, int64_t n, DType t) override {
    all_gather(in, out, n, t);
    return std::make_unique<DoneWork>();
  }
  std::unique_ptr<Work> all_gather_v_async(void* out, const std::vector<int64_t>& counts, DType t) override {
    check_counts(counts, "all_gather_v");
    count("all_gather", counts[size_t(rank_)], t);
    (void)out;  // in place: this rank's block is already placed, the others' are not known
    return std::make_unique<DoneWork>();
  }
  std::unique_ptr<Work> reduce_async(void* buf, int64_t n, DType t, ReduceOp op, int root) override {
    const DeviceAccessScope buffers;  // host code filling device buffers: after the kernels before
    check_reducible_v(t, "reduce");
    check_peer(root, "reduce root");
    count("reduce", n, t);
    if (buf && op == ReduceOp::sum && root == rank_) scale(buf, n, t, size_);  // every rank held this one's values
    return std::make_unique<DoneWork>();
  }
  std::unique_ptr<Work> reduce_scatter_async(const void* in, void* out, int64_t n, DType t, ReduceOp op) override {
    const DeviceAccessScope buffers;  // host code filling device buffers: after the kernels before
    check_reducible(t, "reduce_scatter");
    count("reduce_scatter", n * size_, t);
    if (out) {
      std::memmove(out, static_cast<const char*>(in) + size_t(rank_) * bytes(n, t), bytes(n, t));
      if (op == ReduceOp::sum) scale(out, n, t, size_);
    }
    std::vector<Tensor> ring;
    std::vector<Tensor> copies = bf16_staging(staging_, t, {n * size_, n});
    add_ring_staging(ring, staging_, size_, ring_equal_block_bounds(n, size_), t, false);
    return std::make_unique<DoneWork>(std::move(copies), std::move(ring));
  }
  std::unique_ptr<Work> send_async(const void* buf, int64_t n, DType t, int dst, int tag) override {
    send(buf, n, t, dst, tag);
    return std::make_unique<DoneWork>();
  }
  std::unique_ptr<Work> recv_async(void* buf, int64_t n, DType t, int src, int tag) override {
    recv(buf, n, t, src, tag);
    return std::make_unique<DoneWork>();
  }

  std::unique_ptr<Communicator> split(int, int) override {
    TESSEL_FAIL("meta communicator: split(color, key) cannot see the other ranks' colors; use split_by with a rule "
                "for every rank");
  }
  std::unique_ptr<Communicator> split_by(const ColorKeyRule& rule) override {
    const auto [color, key] = rule(rank_);
    if (color < 0) return nullptr;
    // The members of this rank's group ordered by (key, rank), as MPI_Comm_split orders them.
    std::vector<std::pair<int, int>> members;
    for (int r = 0; r < size_; ++r) {
      const auto [c, k] = rule(r);
      if (c == color) members.emplace_back(k, r);
    }
    std::sort(members.begin(), members.end());
    const auto me = std::find(members.begin(), members.end(), std::make_pair(key, rank_));
    return std::make_unique<MetaCommunicator>(int(me - members.begin()), int(members.size()), staging_);
  }

 private:
  void check_counts(const std::vector<int64_t>& counts, const char* what) const {
    TESSEL_CHECK(int64_t(counts.size()) == size_, "{}: {} counts for {} ranks", what, counts.size(), size_);
  }
  void check_peer(int r, const char* what) const {
    TESSEL_CHECK(r >= 0 && r < size_, "{} rank {}: the group has {} ranks", what, r, size_);
  }
  static int64_t sum(const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t(0)); }
  static size_t bytes(int64_t n, DType t) { return size_t(n) * dtype_size(t); }

  int rank_, size_;
  Device staging_;  // where the mpi backend's staging is accounted (communicator.h)
};

}  // namespace

std::unique_ptr<Communicator> make_meta_communicator(int rank, int size, Device staging) {
  return std::make_unique<MetaCommunicator>(rank, size, staging);
}

}  // namespace tessel::comm
