// The meta backend: one rank standing for a group of any size. Buffers are never read or written
// (meta tensors have no data); what a collective would move is counted by the payload rule of
// communicator.h.
#include <algorithm>
#include <numeric>
#include <utility>
#include <vector>

#include "tessel/comm/communicator.h"
#include "tessel/core/check.h"
#include "tessel/core/tensor.h"

namespace tessel::comm {
namespace {

// Complete at once; holds the staging buffers the mpi backend's request would hold, for as long.
class DoneWork : public Work {
 public:
  explicit DoneWork(std::vector<Tensor> staging = {}) : staging_(std::move(staging)) {}
  void wait() override {}
  bool test() override { return true; }

 private:
  std::vector<Tensor> staging_;
};

// The mpi backend reduces bf16 through fp32 copies (mpi.cpp): one of the buffer for all_reduce, the
// input and the output for reduce_scatter, accounted as communication memory. The meta device
// accounts the same blocks, so a dry run's communication memory is the real run's.
std::vector<Tensor> bf16_staging(DType t, std::initializer_list<int64_t> elements) {
  std::vector<Tensor> held;
  if (t != DType::bf16) return held;
  MemoryCategoryScope tag(MemoryCategory::communication);
  for (int64_t n : elements) held.push_back(Tensor::empty({n}, DType::f32, Device::meta));
  return held;
}

class MetaCommunicator : public Communicator {
 public:
  MetaCommunicator(int rank, int size) : rank_(rank), size_(size) {
    TESSEL_CHECK(size > 0 && rank >= 0 && rank < size, "meta communicator: rank {} of {} ranks", rank, size);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "meta"; }

  void all_reduce(void* buf, int64_t n, DType t, ReduceOp op) override { all_reduce_async(buf, n, t, op)->wait(); }
  void all_gather(const void*, void*, int64_t n, DType t) override { count("all_gather", n, t); }
  void reduce_scatter(const void* in, void* out, int64_t n, DType t, ReduceOp op) override {
    reduce_scatter_async(in, out, n, t, op)->wait();
  }
  void all_to_all(const void*, void*, int64_t n, DType t) override { count("all_to_all", n * size_, t); }
  void all_to_all_v(const void*, const std::vector<int64_t>& send_counts, void*, const std::vector<int64_t>& recv_counts,
                    DType t) override {
    check_counts(send_counts, "all_to_all_v send");
    check_counts(recv_counts, "all_to_all_v receive");
    count("all_to_all", sum(send_counts), t);
  }
  void reduce_scatter_v(const void*, void*, const std::vector<int64_t>& counts, DType t, ReduceOp) override {
    check_reducible_v(t, "reduce_scatter_v");
    check_counts(counts, "reduce_scatter_v");
    count("reduce_scatter", sum(counts), t);
  }
  void all_gather_v(const void*, void*, const std::vector<int64_t>& counts, DType t) override {
    check_counts(counts, "all_gather_v");
    count("all_gather", counts[size_t(rank_)], t);
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

  std::unique_ptr<Work> all_reduce_async(void*, int64_t n, DType t, ReduceOp) override {
    check_reducible(t, "all_reduce");
    count("all_reduce", n, t);
    return std::make_unique<DoneWork>(bf16_staging(t, {n}));
  }
  std::unique_ptr<Work> all_gather_async(const void* in, void* out, int64_t n, DType t) override {
    all_gather(in, out, n, t);
    return std::make_unique<DoneWork>();
  }
  std::unique_ptr<Work> reduce_scatter_async(const void*, void*, int64_t n, DType t, ReduceOp) override {
    check_reducible(t, "reduce_scatter");
    count("reduce_scatter", n * size_, t);
    return std::make_unique<DoneWork>(bf16_staging(t, {n * size_, n}));
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
    return std::make_unique<MetaCommunicator>(int(me - members.begin()), int(members.size()));
  }

 private:
  void check_counts(const std::vector<int64_t>& counts, const char* what) const {
    TESSEL_CHECK(int64_t(counts.size()) == size_, "{}: {} counts for {} ranks", what, counts.size(), size_);
  }
  void check_peer(int r, const char* what) const {
    TESSEL_CHECK(r >= 0 && r < size_, "{} rank {}: the group has {} ranks", what, r, size_);
  }
  static int64_t sum(const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t(0)); }

  int rank_, size_;
};

}  // namespace

std::unique_ptr<Communicator> make_meta_communicator(int rank, int size) {
  return std::make_unique<MetaCommunicator>(rank, size);
}

}  // namespace tessel::comm
