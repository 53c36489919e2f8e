// The MPI backend (OpenMPI). bf16 has no MPI type: data movement sends it as 16-bit words, and
// reductions widen to fp32, reduce, and round back once (RNE).
#include <fmt/ranges.h>
#include <mpi.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "tessel/comm/communicator.h"
#include "tessel/comm/mpi_ring.h"
#include "tessel/comm/ring_staging.h"
#include "tessel/comm/watchdog.h"
#include "tessel/core/check.h"
#include "tessel/core/device_arena.h"
#include "tessel/core/tensor.h"
#include "tessel/kernels/cast.h"

namespace tessel::comm {

void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  TESSEL_FAIL("MPI {} failed: {}", what, std::string(msg, size_t(len)));
}

namespace {

// The most elements one MPI call moves (its counts and displacements are int); tests lower it to
// reach the chunked paths with small buffers (set_mpi_max_count_for_testing).
int64_t g_max_count = INT_MAX;
int64_t mpi_max_count() { return g_max_count; }

int as_int(int64_t n, const char* what) {
  TESSEL_CHECK(n >= 0 && n <= INT_MAX, "{}: {} elements exceed MPI's int count", what, n);
  return int(n);
}

MPI_Datatype move_type(DType t) {  // for data movement: any dtype, by width
  switch (t) {
    case DType::f32: return MPI_FLOAT;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    case DType::bf16: case DType::f16: return MPI_UINT16_T;
    case DType::e4m3: case DType::e5m2: return MPI_UINT8_T;
  }
  return MPI_BYTE;
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return MPI_SUM;
    case ReduceOp::max: return MPI_MAX;
    case ReduceOp::min: return MPI_MIN;
  }
  return MPI_SUM;
}


// Waits for `req`, advancing the ring reductions in flight meanwhile (comm/mpi_ring.h): a peer may be
// waiting on one of them before it serves this request.
void wait_progressing(MPI_Request& req, const char* what) {
  for (;;) {
    int flag = 0;
    check_mpi(MPI_Test(&req, &flag, MPI_STATUS_IGNORE), what);
    if (flag) return;
    progress_ring_reductions();
  }
}

// A request plus what to do after it completes (e.g. round an fp32 staging buffer back to bf16).
class MpiWork : public Work {
 public:
  // Device memory stays reachable while the transfer is in flight (core/device_arena.h): MPI moves
  // it in the background, and the peer may read it directly (shared-memory single copy).
  MpiWork(MPI_Request r, std::function<void()> finish, std::shared_ptr<const WaitInfo> watch = nullptr)
      : req_(r), finish_(std::move(finish)), watch_(std::move(watch)) {
    in_flight_.emplace();
  }
  ~MpiWork() override {
    if (!done_) {
      try {
        wait();
      } catch (...) {
      }
    }
  }
  void wait() override {
    if (done_) return;
    {
      const WaitWatch timed(watch_);  // resilience.collective_timeout_s
      wait_progressing(req_, "wait");
    }
    complete();
  }
  bool test() override {
    if (done_) return true;
    int flag = 0;
    check_mpi(MPI_Test(&req_, &flag, MPI_STATUS_IGNORE), "test");
    if (flag) complete();
    return done_;
  }
  void cancel() override {
    if (done_) return;
    MPI_Cancel(&req_);
    MPI_Wait(&req_, MPI_STATUS_IGNORE);  // returns at once for a cancelled receive
    done_ = true;
    in_flight_.reset();
  }

 private:
  void complete() {
    done_ = true;
    in_flight_.reset();
    if (finish_) finish_();
  }
  MPI_Request req_;
  std::function<void()> finish_;
  std::shared_ptr<const WaitInfo> watch_;  // what the watchdog names if the wait never ends
  std::optional<DeviceMemoryAccess> in_flight_;  // no allocation per operation
  bool done_ = false;
};

// Test-only transfer time: with TESSEL_TEST_P2P_DELAY_MS=D every point-to-point message takes D to
// move once both its send and its receive are posted (a rendezvous transfer that then runs in the
// background, as a copy engine would): it is delivered no earlier than max(sent, posted) + D. The
// sender's steady-clock time (shared by the ranks of one machine) travels beside the message, one
// i64 under tag + kStampTag; the receiver's wait sleeps the rest. A receive posted early hides the
// transfer behind whatever runs meanwhile; one posted when needed waits all of D. It shows whether
// a pipeline schedule overlaps its transfers (bench/pipeline_overlap.sh); unset, nothing changes.
constexpr int kStampTag = 1 << 28;
// A test-only delay from the environment variable `name`: milliseconds >= 0, 0 when unset.
std::chrono::nanoseconds delay_from_env(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::chrono::nanoseconds(0);
  char* end = nullptr;
  const double ms = std::strtod(v, &end);
  TESSEL_CHECK(end && *end == '\0' && std::isfinite(ms) && ms >= 0 && ms <= 1e6,
               "{} must be a number of milliseconds in [0, 1e6], got '{}'", name, v);
  return std::chrono::nanoseconds(int64_t(ms * 1e6));
}
std::chrono::nanoseconds p2p_delay() {
  static const std::chrono::nanoseconds d = [] {
    const std::chrono::nanoseconds ns = delay_from_env("TESSEL_TEST_P2P_DELAY_MS");
    if (ns.count() == 0) return ns;
    // The stamps' tags sit above every tag tessel uses; the MPI library must allow them.
    int* tag_ub = nullptr;
    int found = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &found);
    TESSEL_CHECK(found && tag_ub && *tag_ub >= 2 * kStampTag - 1,
                 "TESSEL_TEST_P2P_DELAY_MS needs MPI tags up to {}; this MPI library allows {}", 2 * kStampTag - 1,
                 found && tag_ub ? *tag_ub : 32767);
    return ns;
  }();
  return d;
}
// Test-only transfer time of an all-to-all-v (the MoE dispatch and combine): with
// TESSEL_TEST_A2A_DELAY_MS=D one completes no earlier than D after this rank started it, as a
// transfer that runs in the background once started would. Started early and waited for late (an
// F&B pair's other pass ran meanwhile), it costs less than D; started and waited for at once, all of
// D (bench/moe_overlap.sh). Unset, nothing changes.
std::chrono::nanoseconds a2a_delay() {
  static const std::chrono::nanoseconds d = delay_from_env("TESSEL_TEST_A2A_DELAY_MS");
  return d;
}
int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
int64_t delivered_ns(int64_t sent_ns, int64_t posted_ns) { return std::max(sent_ns, posted_ns) + p2p_delay().count(); }

// A receive under the test latency: the message and its stamp, then the rest of the delay.
class DelayedRecvWork : public Work {
 public:
  DelayedRecvWork(std::unique_ptr<Work> data, std::unique_ptr<Work> stamp, std::unique_ptr<int64_t> sent_ns)
      : sent_ns_(std::move(sent_ns)), data_(std::move(data)), stamp_(std::move(stamp)), posted_ns_(steady_ns()) {}
  void wait() override {
    stamp_->wait();
    data_->wait();
    std::this_thread::sleep_until(
        std::chrono::steady_clock::time_point(std::chrono::nanoseconds(delivered_ns(*sent_ns_, posted_ns_))));
  }
  bool test() override {
    // Both are tested every time (no short circuit), so both make progress.
    const bool stamp_in = stamp_->test();
    const bool data_in = data_->test();
    return stamp_in && data_in && steady_ns() >= delivered_ns(*sent_ns_, posted_ns_);
  }
  void cancel() override {
    stamp_->cancel();
    data_->cancel();
  }

 private:
  std::unique_ptr<int64_t> sent_ns_;  // declared first: destroyed after the receive into it completes
  std::unique_ptr<Work> data_, stamp_;
  int64_t posted_ns_;
};

// An operation under the test-only all-to-all time: done once the operation is and D has passed
// since it started.
class DelayedWork : public Work {
 public:
  DelayedWork(std::unique_ptr<Work> op, std::chrono::nanoseconds delay)
      : op_(std::move(op)), until_(std::chrono::steady_clock::now() + delay) {}
  void wait() override {
    op_->wait();
    std::this_thread::sleep_until(until_);
  }
  bool test() override { return op_->test() && std::chrono::steady_clock::now() >= until_; }

 private:
  std::unique_ptr<Work> op_;
  std::chrono::steady_clock::time_point until_;
};

// An fp32 staging buffer, accounted as communication memory (a tensor: it lives until the
// non-blocking operation that holds it completes).
Tensor staging(int64_t n) {
  MemoryCategoryScope tag(MemoryCategory::communication);
  return Tensor::empty({n}, DType::f32, Device::cpu);
}

Tensor widen(const void* bf, int64_t n) {
  Tensor f = staging(n);
  const DeviceAccessScope on_device;  // the backend's own cast, on the device
  kernels::cast_bf16_to_f32(n, static_cast<const bf16*>(bf), f.data<float>());
  return f;
}

// MPI's int counts and displacements of an all-to-all-v (elements), checked.
struct AllToAllVArrays {
  std::vector<int> send, send_at, recv, recv_at;
};

class MpiCommunicator : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm c, bool owned) : comm_(c), owned_(owned) {
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    // The members' world ranks, for the watchdog's messages and group keys.
    MPI_Group mine, world;
    MPI_Comm_group(comm_, &mine);
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    std::vector<int> ranks(static_cast<size_t>(size_));
    for (int r = 0; r < size_; ++r) ranks[size_t(r)] = r;
    world_ranks_.resize(ranks.size());
    MPI_Group_translate_ranks(mine, size_, ranks.data(), world, world_ranks_.data());
    MPI_Group_free(&mine);
    MPI_Group_free(&world);
    // The ring reductions' messages travel on a communicator of their own: no other message (a
    // pipeline's, a test's) can match their tags.
    check_mpi(MPI_Comm_dup(comm_, &ring_comm_), "dup");
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    MPI_Comm_free(&ring_comm_);
    if (owned_) MPI_Comm_free(&comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "mpi"; }

  void all_reduce(void* buf, int64_t count, DType t, ReduceOp op) override { all_reduce_async(buf, count, t, op)->wait(); }
  void all_gather(const void* in, void* out, int64_t count, DType t) override {
    all_gather_async(in, out, count, t)->wait();
  }
  void reduce_scatter(const void* in, void* out, int64_t count, DType t, ReduceOp op) override {
    reduce_scatter_async(in, out, count, t, op)->wait();
  }
  void all_to_all(const void* in, void* out, int64_t count, DType t) override {
    const DeviceAccessScope buffers;  // device memory, after the kernels launched before
    count_op("all_to_all", count * size_, t);
    const WaitWatch timed(watched("all_to_all"));
    check_mpi(MPI_Alltoall(in, as_int(count, "all_to_all"), move_type(t), out, as_int(count, "all_to_all"),
                           move_type(t), comm_),
              "all_to_all");
  }
  // Blocking: MPI_Alltoallv (the library's tuned algorithm; its non-blocking form may pick another).
  void all_to_all_v(const void* in, const std::vector<int64_t>& sc, void* out, const std::vector<int64_t>& rc,
                    DType t) override {
    const DeviceAccessScope buffers;  // device memory, after the kernels launched before
    const auto a = alltoallv_arrays(sc, rc, t);
    {
      const WaitWatch timed(watched("all_to_all_v"));
      check_mpi(MPI_Alltoallv(in, a->send.data(), a->send_at.data(), move_type(t), out, a->recv.data(),
                              a->recv_at.data(), move_type(t), comm_),
                "all_to_all_v");
    }
    std::this_thread::sleep_for(a2a_delay());
  }
  std::unique_ptr<Work> all_to_all_v_async(const void* in, const std::vector<int64_t>& sc, void* out,
                                           const std::vector<int64_t>& rc, DType t) override {
    auto watch = watched("all_to_all_v");  // posted now: its place in the group's sequence
    const DeviceAccessScope buffers;  // device memory, after the kernels launched before
    // The counts and displacements must stay unchanged until the operation completes: the work's
    // completion hook owns them.
    std::shared_ptr<const AllToAllVArrays> a = alltoallv_arrays(sc, rc, t);
    MPI_Request req;
    check_mpi(MPI_Ialltoallv(in, a->send.data(), a->send_at.data(), move_type(t), out, a->recv.data(),
                             a->recv_at.data(), move_type(t), comm_, &req),
              "all_to_all_v");
    auto work = std::make_unique<MpiWork>(req, [a] {}, watch);
    if (a2a_delay().count() == 0) return work;
    return std::make_unique<DelayedWork>(std::move(work), a2a_delay());
  }
  // Checks the counts, counts the operation (elements sent) and lays out MPI's arrays.
  std::shared_ptr<AllToAllVArrays> alltoallv_arrays(const std::vector<int64_t>& sc, const std::vector<int64_t>& rc,
                                                    DType t) {
    TESSEL_CHECK(int(sc.size()) == size_ && int(rc.size()) == size_, "all_to_all_v: {} / {} counts for {} ranks",
                 sc.size(), rc.size(), size_);
    int64_t sent = 0;
    for (int64_t n : sc) sent += n;
    count_op("all_to_all", sent, t);
    auto a = std::make_shared<AllToAllVArrays>();
    int64_t so = 0, ro = 0;
    for (size_t j = 0; j < size_t(size_); ++j) {
      a->send.push_back(as_int(sc[j], "all_to_all_v"));
      a->recv.push_back(as_int(rc[j], "all_to_all_v"));
      a->send_at.push_back(as_int(so, "all_to_all_v"));
      a->recv_at.push_back(as_int(ro, "all_to_all_v"));
      so += sc[j];
      ro += rc[j];
    }
    return a;
  }
  void reduce_scatter_v(const void* in, void* out, const std::vector<int64_t>& counts, DType t,
                        ReduceOp op) override {
    const DeviceAccessScope buffers;  // device memory, after the kernels launched before
    check_reducible_v(t, "reduce_scatter_v");
    TESSEL_CHECK(int(counts.size()) == size_, "reduce_scatter_v: {} counts for {} ranks", counts.size(), size_);
    int64_t total = 0;
    for (int64_t n : counts) {
      TESSEL_CHECK(n >= 0, "reduce_scatter_v: a count of {} elements", n);
      total += n;
    }
    count_op("reduce_scatter", total, t);
    RingReduceWork(ring(t, op, in, out, ring_counted_block_bounds(counts), false), nullptr, watched("reduce_scatter_v"))
        .wait();
  }
  void all_gather_v(const void* in, void* out, const std::vector<int64_t>& counts, DType t) override {
    const DeviceAccessScope buffers;  // device memory, after the kernels launched before
    TESSEL_CHECK(int(counts.size()) == size_, "all_gather_v: {} counts for {} ranks", counts.size(), size_);
    count_op("all_gather", counts[size_t(rank_)], t);
    int64_t total = 0;
    for (int64_t n : counts) {
      TESSEL_CHECK(n >= 0, "all_gather_v: a count of {} elements", n);
      total += n;
    }
    const WaitWatch timed(watched("all_gather_v"));
    if (total > mpi_max_count()) {
      // Beyond MPI's int displacements (the flat parameters of more than 2^31 elements): each rank's
      // block broadcast from it, in chunks. Every rank receives the same bytes as from an all-gather.
      const size_t es = dtype_size(t);
      int64_t at = 0;
      for (int r = 0; r < size_; ++r) {
        char* block = static_cast<char*>(out) + size_t(at) * es;
        if (r == rank_ && in != block) std::memmove(block, in, size_t(counts[size_t(r)]) * es);
        for (int64_t o = 0; o < counts[size_t(r)]; o += mpi_max_count())
          check_mpi(MPI_Bcast(block + size_t(o) * es, int(std::min(mpi_max_count(), counts[size_t(r)] - o)),
                              move_type(t), r, comm_),
                    "all_gather_v");
        at += counts[size_t(r)];
      }
      return;
    }
    std::vector<int> c = int_counts(counts, "all_gather_v"), displ(c.size());
    int64_t off = 0;
    for (size_t j = 0; j < c.size(); ++j) {
      displ[j] = as_int(off, "all_gather_v");
      off += counts[j];
    }
    // This rank's block already in place inside `out`: MPI requires MPI_IN_PLACE for that.
    const bool in_place = in == static_cast<const char*>(out) + size_t(displ[size_t(rank_)]) * dtype_size(t);
    check_mpi(MPI_Allgatherv(in_place ? MPI_IN_PLACE : in, c[size_t(rank_)], move_type(t), out, c.data(),
                             displ.data(), move_type(t), comm_),
              "all_gather_v");
  }
  void broadcast(void* buf, int64_t count, DType t, int root) override {
    const DeviceAccessScope buffers;  // device memory, after the kernels launched before
    count_op("broadcast", count, t);
    const WaitWatch timed(watched("broadcast"));
    check_mpi(MPI_Bcast(buf, as_int(count, "broadcast"), move_type(t), root, comm_), "broadcast");
  }
  void send(const void* buf, int64_t count, DType t, int dst, int tag) override {
    const DeviceAccessScope buffers;  // device memory, after the kernels launched before
    count_op("send", count, t);
    stamp(dst, tag);
    const WaitWatch timed(watched("send", dst));
    MPI_Request req;
    check_mpi(MPI_Isend(buf, as_int(count, "send"), move_type(t), dst, tag, comm_, &req), "send");
    wait_progressing(req, "send");
  }
  void recv(void* buf, int64_t count, DType t, int src, int tag) override {
    if (p2p_delay().count() > 0) return recv_async(buf, count, t, src, tag)->wait();
    const DeviceAccessScope buffers;  // device memory, after the kernels launched before
    const WaitWatch timed(watched("recv", src));
    MPI_Request req;
    check_mpi(MPI_Irecv(buf, as_int(count, "recv"), move_type(t), src, tag, comm_, &req), "recv");
    wait_progressing(req, "recv");
  }
  void barrier() override {
    const WaitWatch timed(watched("barrier"));
    MPI_Request req;
    check_mpi(MPI_Ibarrier(comm_, &req), "barrier");
    wait_progressing(req, "barrier");
  }

  std::unique_ptr<Work> all_reduce_async(void* buf, int64_t count, DType t, ReduceOp op) override {
    auto watch = watched("all_reduce");  // posted now: its place in the group's sequence
    const DeviceAccessScope buffers;  // device memory, after the kernels launched before
    check_reducible(t, "all_reduce");
    count_op("all_reduce", count, t);
    if (t == DType::bf16) {
      Tensor f = widen(buf, count);
      return std::make_unique<RingReduceWork>(
          ring(DType::f32, op, f.device_ptr(), f.device_ptr(), ring_block_bounds(count, size_), true),
          [f, buf, count] {
            const DeviceAccessScope on_device;
            kernels::cast_f32_to_bf16(count, f.data<float>(), static_cast<bf16*>(buf));
          },
          watch);
    }
    return std::make_unique<RingReduceWork>(ring(t, op, buf, buf, ring_block_bounds(count, size_), true), nullptr,
                                            watch);
  }
  std::unique_ptr<Work> all_gather_v_async(void* out, const std::vector<int64_t>& counts, DType t) override {
    auto watch = watched("all_gather_v");  // posted now: its place in the group's sequence
    const DeviceAccessScope buffers;  // device memory, after the kernels launched before
    TESSEL_CHECK(int(counts.size()) == size_, "all_gather_v: {} counts for {} ranks", counts.size(), size_);
    int64_t at = 0, total = 0;
    for (int r = 0; r < size_; ++r) {
      TESSEL_CHECK(counts[size_t(r)] >= 0, "all_gather_v: a count of {} elements", counts[size_t(r)]);
      if (r < rank_) at += counts[size_t(r)];
      total += counts[size_t(r)];
    }
    if (total > mpi_max_count()) {  // beyond int displacements: the chunked blocking path
      all_gather_v(static_cast<char*>(out) + size_t(at) * dtype_size(t), out, counts, t);
      return std::make_unique<MpiWork>(MPI_REQUEST_NULL, nullptr);
    }
    count_op("all_gather", counts[size_t(rank_)], t);
    // The count and displacement arrays must stay unchanged until the operation completes: the
    // work's completion hook owns them.
    auto arrays = std::make_shared<std::pair<std::vector<int>, std::vector<int>>>(int_counts(counts, "all_gather_v"),
                                                                                  std::vector<int>(counts.size()));
    int64_t off = 0;
    for (size_t j = 0; j < counts.size(); ++j) {
      arrays->second[j] = as_int(off, "all_gather_v");
      off += counts[j];
    }
    MPI_Request req;
    check_mpi(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, out, arrays->first.data(), arrays->second.data(),
                              move_type(t), comm_, &req),
              "all_gather_v");
    return std::make_unique<MpiWork>(req, [arrays] {}, watch);
  }
  std::unique_ptr<Work> reduce_async(void* buf, int64_t count, DType t, ReduceOp op, int root) override {
    auto watch = watched("reduce");  // posted now: its place in the group's sequence
    const DeviceAccessScope buffers;  // device memory, after the kernels launched before
    check_reducible_v(t, "reduce");
    TESSEL_CHECK(root >= 0 && root < size_, "reduce: root {} outside the {} ranks", root, size_);
    count_op("reduce", count, t);
    MPI_Request req;
    check_mpi(MPI_Ireduce(root == rank_ ? MPI_IN_PLACE : buf, buf, as_int(count, "reduce"), move_type(t), mpi_op(op),
                          root, comm_, &req),
              "reduce");
    return std::make_unique<MpiWork>(req, nullptr, watch);
  }
  std::unique_ptr<Work> all_gather_async(const void* in, void* out, int64_t count, DType t) override {
    auto watch = watched("all_gather");  // posted now: its place in the group's sequence
    const DeviceAccessScope buffers;  // device memory, after the kernels launched before
    count_op("all_gather", count, t);
    MPI_Request req;
    check_mpi(MPI_Iallgather(in, as_int(count, "all_gather"), move_type(t), out, as_int(count, "all_gather"),
                             move_type(t), comm_, &req),
              "all_gather");
    return std::make_unique<MpiWork>(req, nullptr, watch);
  }
  std::unique_ptr<Work> reduce_scatter_async(const void* in, void* out, int64_t count, DType t,
                                             ReduceOp op) override {
    auto watch = watched("reduce_scatter");  // posted now: its place in the group's sequence
    const DeviceAccessScope buffers;  // device memory, after the kernels launched before
    check_reducible(t, "reduce_scatter");
    count_op("reduce_scatter", count * size_, t);
    std::vector<int64_t> bounds = ring_equal_block_bounds(count, size_);
    if (t == DType::bf16) {
      Tensor fin = widen(in, count * size_), fout = staging(count);
      return std::make_unique<RingReduceWork>(
          ring(DType::f32, op, fin.device_ptr(), fout.device_ptr(), std::move(bounds), false),
          [fin, fout, out, count] {
            const DeviceAccessScope on_device;
            kernels::cast_f32_to_bf16(count, fout.data<float>(), static_cast<bf16*>(out));
          },
          watch);
    }
    return std::make_unique<RingReduceWork>(ring(t, op, in, out, std::move(bounds), false), nullptr, watch);
  }
  std::unique_ptr<Work> send_async(const void* buf, int64_t count, DType t, int dst, int tag) override {
    auto watch = watched("send", dst);  // posted now; point-to-point takes no place in the collective sequence
    const DeviceAccessScope buffers;  // device memory, after the kernels launched before
    count_op("send", count, t);
    stamp(dst, tag);
    MPI_Request req;
    check_mpi(MPI_Isend(buf, as_int(count, "send"), move_type(t), dst, tag, comm_, &req), "send");
    return std::make_unique<MpiWork>(req, nullptr, watch);
  }
  std::unique_ptr<Work> recv_async(void* buf, int64_t count, DType t, int src, int tag) override {
    auto watch = watched("recv", src);  // posted now; point-to-point takes no place in the collective sequence
    const DeviceAccessScope buffers;  // device memory, after the kernels launched before
    MPI_Request req;
    check_mpi(MPI_Irecv(buf, as_int(count, "recv"), move_type(t), src, tag, comm_, &req), "recv");
    auto data = std::make_unique<MpiWork>(req, nullptr, watch);
    if (p2p_delay().count() == 0) return data;
    auto sent_ns = std::make_unique<int64_t>(0);
    MPI_Request stamp_req;
    check_mpi(MPI_Irecv(sent_ns.get(), 1, MPI_INT64_T, src, tag + kStampTag, comm_, &stamp_req), "recv");
    return std::make_unique<DelayedRecvWork>(std::move(data), std::make_unique<MpiWork>(stamp_req, nullptr),
                                             std::move(sent_ns));
  }
  std::unique_ptr<Communicator> split(int color, int key) override {
    MPI_Comm c;
    check_mpi(MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &c), "split");
    if (c == MPI_COMM_NULL) return nullptr;
    return std::make_unique<MpiCommunicator>(c, true);
  }

 private:
  void count_op(const char* kind, int64_t elements, DType t) { count(kind, elements, t); }
  // Under the test latency, the send time travels beside each message (a small eager send).
  void stamp(int dst, int tag) {
    if (p2p_delay().count() == 0) return;
    const int64_t now = steady_ns();
    check_mpi(MPI_Send(&now, 1, MPI_INT64_T, dst, tag + kStampTag, comm_), "send");
  }
  // A ring reduction on this group (comm/mpi_ring.h), with the next tag of its sequence: every rank
  // posts the group's collectives in the same order, so the same reduction has the same tag on all.
  RingReduction ring(DType t, ReduceOp op, const void* in, void* out, std::vector<int64_t> bounds, bool all_gather) {
    const int tag = int(ring_seq_++ % kRingTags);
    return {ring_comm_, rank_, size_, tag, t, op, in, out, std::move(bounds), all_gather};
  }
  std::vector<int> int_counts(const std::vector<int64_t>& counts, const char* what) const {
    TESSEL_CHECK(int(counts.size()) == size_, "{}: {} counts for {} ranks", what, counts.size(), size_);
    std::vector<int> c;
    for (int64_t n : counts) c.push_back(as_int(n, what));
    return c;
  }
  // The watchdog's record of a collective this rank posts now (the next in this group's sequence),
  // or of a transfer with group rank `peer`; null while no watchdog runs.
  std::shared_ptr<const WaitInfo> watched(const char* op, int peer = -1) {
    if (peer < 0) ++posted_;
    if (!watchdog_running()) return nullptr;
    if (key_label_ != label() || group_key_.empty()) {
      key_label_ = label();
      group_key_ = fmt::format("{}[{}]", label().empty() ? "group" : label(), fmt::join(world_ranks_, ","));
    }
    if (peer < 0) note_collective_posted(group_key_, posted_);
    return std::make_shared<const WaitInfo>(
        WaitInfo{op, group_key_, world_ranks_, posted_, peer < 0 ? -1 : world_ranks_[size_t(peer)]});
  }
  static constexpr int64_t kRingTags = 32768;  // MPI_TAG_UB is at least 32767
  MPI_Comm comm_;
  MPI_Comm ring_comm_ = MPI_COMM_NULL;
  bool owned_;
  int rank_ = 0, size_ = 1;
  int64_t ring_seq_ = 0;  // ring reductions posted on the group
  std::vector<int> world_ranks_;
  int64_t posted_ = 0;  // collectives this rank posted on the group
  std::string group_key_, key_label_;
};

void finalize_mpi() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

}  // namespace

void set_mpi_max_count_for_testing(int64_t n) {
  TESSEL_CHECK(n >= 1 && n <= INT_MAX, "the MPI count limit must be in [1, {}], got {}", INT_MAX, n);
  g_max_count = n;
}

bool mpi_launched() { return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") || std::getenv("PMIX_RANK"); }

void abort_distributed(int code) {
  int initialized = 0, finalized = 0, size = 1;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size > 1) MPI_Abort(MPI_COMM_WORLD, code);
}

int mpi_thread_level() {
  int initialized = 0, level = MPI_THREAD_SINGLE;
  MPI_Initialized(&initialized);
  if (initialized) MPI_Query_thread(&level);
  return level;
}

bool mpi_threads_serialized() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  return !initialized || mpi_thread_level() >= MPI_THREAD_SERIALIZED;
}

std::unique_ptr<Communicator> make_mpi_world() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    // SERIALIZED where the library has it: an F&B pair's two passes (core/paired_tasks.h) call MPI
    // from two threads, one at a time (parallel.overlap_moe_expert_parallel_comm checks it).
    check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "init");
    std::atexit(finalize_mpi);
  }
  return std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, false);
}

}  // namespace tessel::comm
