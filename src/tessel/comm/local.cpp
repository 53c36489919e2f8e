// The one-rank backend: every collective over a single rank is the identity (or a copy).
#include <cstring>
#include <vector>

#include "tessel/comm/communicator.h"
#include "tessel/core/check.h"
#include "tessel/core/device.h"

namespace tessel::comm {
namespace {

class NoWork : public Work {
 public:
  void wait() override {}
  bool test() override { return true; }
};

class LocalCommunicator : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const char* backend() const override { return "local"; }
  void all_reduce(void*, int64_t, DType, ReduceOp) override {}
  void all_gather(const void* in, void* out, int64_t count, DType t) override { copy(in, out, count, t); }
  void reduce_scatter(const void* in, void* out, int64_t count, DType t, ReduceOp) override { copy(in, out, count, t); }
  void all_to_all(const void* in, void* out, int64_t count, DType t) override { copy(in, out, count, t); }
  void all_to_all_v(const void* in, const std::vector<int64_t>& sc, void* out, const std::vector<int64_t>& rc,
                    DType t) override {
    TESSEL_CHECK(sc.size() == 1 && rc.size() == 1 && sc[0] == rc[0], "all_to_all_v on one rank: counts must match");
    copy(in, out, sc[0], t);
  }
  void reduce_scatter_v(const void* in, void* out, const std::vector<int64_t>& counts, DType t, ReduceOp) override {
    TESSEL_CHECK(counts.size() == 1, "reduce_scatter_v on one rank needs one count");
    copy(in, out, counts[0], t);
  }
  void all_gather_v(const void* in, void* out, const std::vector<int64_t>& counts, DType t) override {
    TESSEL_CHECK(counts.size() == 1, "all_gather_v on one rank needs one count");
    copy(in, out, counts[0], t);
  }
  void broadcast(void*, int64_t, DType, int root) override {
    TESSEL_CHECK(root == 0, "broadcast root {} on a one-rank communicator", root);
  }
  void send(const void*, int64_t, DType, int dst, int) override { no_peer(dst); }
  void recv(void*, int64_t, DType, int src, int) override { no_peer(src); }
  void barrier() override {}
  std::unique_ptr<Work> all_reduce_async(void*, int64_t, DType, ReduceOp) override { return std::make_unique<NoWork>(); }
  std::unique_ptr<Work> all_gather_async(const void* in, void* out, int64_t count, DType t) override {
    copy(in, out, count, t);
    return std::make_unique<NoWork>();
  }
  std::unique_ptr<Work> all_gather_v_async(void*, const std::vector<int64_t>& counts, DType) override {
    TESSEL_CHECK(counts.size() == 1, "all_gather_v on one rank needs one count");
    return std::make_unique<NoWork>();  // in place: the one block is where it belongs
  }
  std::unique_ptr<Work> reduce_async(void*, int64_t, DType t, ReduceOp, int root) override {
    check_reducible_v(t, "reduce");
    TESSEL_CHECK(root == 0, "reduce root {} on a one-rank communicator", root);
    return std::make_unique<NoWork>();  // the one rank's buffer is the reduction
  }
  std::unique_ptr<Work> reduce_scatter_async(const void* in, void* out, int64_t count, DType t, ReduceOp) override {
    copy(in, out, count, t);
    return std::make_unique<NoWork>();
  }
  std::unique_ptr<Work> send_async(const void*, int64_t, DType, int dst, int) override { no_peer(dst); }
  std::unique_ptr<Work> recv_async(void*, int64_t, DType, int src, int) override { no_peer(src); }
  std::unique_ptr<Communicator> split(int color, int) override {
    if (color < 0) return nullptr;
    return std::make_unique<LocalCommunicator>();
  }

 private:
  static void copy(const void* in, void* out, int64_t count, DType t) {
    if (in == out) return;
    const DeviceAccessScope buffers;  // device memory, after the kernels launched before
    std::memmove(out, in, size_t(count) * dtype_size(t));
  }
  [[noreturn]] static void no_peer(int peer) {
    TESSEL_FAIL("point-to-point with rank {} on the one-rank local communicator (launch with mpirun for more ranks)",
                peer);
  }
};

}  // namespace

std::unique_ptr<Communicator> make_local_communicator() { return std::make_unique<LocalCommunicator>(); }

void check_reducible(DType t, const char* op) {
  TESSEL_CHECK(t == DType::f32 || t == DType::bf16 || t == DType::i32 || t == DType::i64,
               "{}: reductions support f32, bf16, i32 and i64, not {}", op, dtype_name(t));
}

void check_reducible_v(DType t, const char* op) {
  TESSEL_CHECK(t == DType::f32 || t == DType::i32 || t == DType::i64, "{} supports f32, i32 and i64, not {}", op,
               dtype_name(t));
}

double sum_in_rank_order(Communicator& c, double x) {
  std::vector<double> all(static_cast<size_t>(c.size()));
  c.all_gather(&x, all.data(), 1, DType::i64);
  double sum = 0;
  for (double v : all) sum += v;
  return sum;
}

}  // namespace tessel::comm
