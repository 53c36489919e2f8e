// Every collective of the MPI backend against results computed here from the ranks' known inputs.
#include <gtest/gtest.h>

#include <climits>
#include <numeric>
#include <vector>

#include "tessel/comm/communicator.h"
#include "tessel/comm/ring_staging.h"
#include "tessel/core/memory.h"
#include "tessel/core/tensor.h"
#include "tessel/core/check.h"
#include "mpi/mpi_world.h"

using namespace tessel;
using namespace tessel::comm;

namespace {

using tessel::testing::world;

// Element i of rank r's input: small integers, exact in every dtype including bf16.
double value(int r, int64_t i) { return double(r * 3 + i % 5); }

template <class T>
std::vector<T> input(int r, int64_t n) {
  std::vector<T> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = T(float(value(r, i)));
  return v;
}

template <class T>
void check_all_reduce(DType t) {
  auto& w = world();
  const int64_t n = 37;
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::min}) {
    auto v = input<T>(w.rank(), n);
    w.all_reduce(v.data(), n, t, op);
    for (int64_t i = 0; i < n; ++i) {
      double want = value(0, i);
      for (int r = 1; r < w.size(); ++r) {
        const double x = value(r, i);
        want = op == ReduceOp::sum ? want + x : op == ReduceOp::max ? std::max(want, x) : std::min(want, x);
      }
      ASSERT_EQ(double(float(v[size_t(i)])), want) << dtype_name(t) << " op " << int(op) << " element " << i;
    }
  }
}

TEST(Mpi, AllReduceEveryDtypeAndOp) {
  check_all_reduce<float>(DType::f32);
  check_all_reduce<bf16>(DType::bf16);
  check_all_reduce<int32_t>(DType::i32);
  check_all_reduce<int64_t>(DType::i64);
}

TEST(Mpi, AllGatherReduceScatterAllToAll) {
  auto& w = world();
  const int W = w.size();
  const int64_t n = 5;
  auto mine = input<float>(w.rank(), n);
  std::vector<float> all(size_t(n * W));
  w.all_gather(mine.data(), all.data(), n, DType::f32);
  for (int r = 0; r < W; ++r)
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(all[size_t(r * n + i)], float(value(r, i)));
  // reduce_scatter: rank r contributes value(r, j*n+i) to block j.
  auto big = input<float>(w.rank(), n * W);
  std::vector<float> out(static_cast<size_t>(n));
  w.reduce_scatter(big.data(), out.data(), n, DType::f32, ReduceOp::sum);
  for (int64_t i = 0; i < n; ++i) {
    double want = 0;
    for (int r = 0; r < W; ++r) want += value(r, w.rank() * n + i);
    ASSERT_EQ(out[size_t(i)], float(want));
  }
  // bf16 reduce_scatter rounds once from the fp32 sum.
  auto bbig = input<bf16>(w.rank(), n * W);
  std::vector<bf16> bout(static_cast<size_t>(n));
  w.reduce_scatter(bbig.data(), bout.data(), n, DType::bf16, ReduceOp::sum);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(float(bout[size_t(i)]), out[size_t(i)]);
  // all_to_all: block j of rank r holds 1000 r + j; rank r receives 1000 j + r from rank j.
  std::vector<int64_t> send(size_t(W * 2)), recv(size_t(W * 2));
  for (int j = 0; j < W; ++j) send[size_t(2 * j)] = send[size_t(2 * j + 1)] = 1000 * w.rank() + j;
  w.all_to_all(send.data(), recv.data(), 2, DType::i64);
  for (int j = 0; j < W; ++j) ASSERT_EQ(recv[size_t(2 * j + 1)], 1000 * j + w.rank());
}

TEST(Mpi, AllToAllVWithUnevenCounts) {
  auto& w = world();
  const int W = w.size(), me = w.rank();
  // Rank r sends (j + r) % 3 + 1 elements to rank j, each equal to 100 r + j.
  std::vector<int64_t> sc(static_cast<size_t>(W)), rc(static_cast<size_t>(W));
  std::vector<int32_t> send;
  for (int j = 0; j < W; ++j) {
    sc[size_t(j)] = (j + me) % 3 + 1;
    rc[size_t(j)] = (me + j) % 3 + 1;
    for (int64_t k = 0; k < sc[size_t(j)]; ++k) send.push_back(100 * me + j);
  }
  std::vector<int32_t> recv(size_t(std::accumulate(rc.begin(), rc.end(), int64_t(0))));
  w.all_to_all_v(send.data(), sc, recv.data(), rc, DType::i32);
  size_t p = 0;
  for (int j = 0; j < W; ++j)
    for (int64_t k = 0; k < rc[size_t(j)]; ++k) ASSERT_EQ(recv[p++], 100 * j + me);
}

// The non-blocking form (the MoE exchange of an F&B pair): two in flight at once on one group,
// started in the same order on every rank and waited for in the other order, each with its blocks.
TEST(Mpi, AllToAllVAsyncTwoInFlight) {
  auto& w = world();
  const int W = w.size(), me = w.rank();
  std::vector<int64_t> sc(static_cast<size_t>(W)), rc(static_cast<size_t>(W));
  std::vector<float> send_a, send_b;
  for (int j = 0; j < W; ++j) {
    sc[size_t(j)] = (j + 2 * me) % 3 + 1;
    rc[size_t(j)] = (me + 2 * j) % 3 + 1;
    for (int64_t k = 0; k < sc[size_t(j)]; ++k) {
      send_a.push_back(float(100 * me + j));
      send_b.push_back(float(-(100 * me + j) - 1));
    }
  }
  const size_t n = size_t(std::accumulate(rc.begin(), rc.end(), int64_t(0)));
  std::vector<float> recv_a(n, 0.5f), recv_b(n, 0.5f);
  auto a = w.all_to_all_v_async(send_a.data(), sc, recv_a.data(), rc, DType::f32);
  auto b = w.all_to_all_v_async(send_b.data(), sc, recv_b.data(), rc, DType::f32);
  b->wait();
  a->wait();
  EXPECT_TRUE(a->test());
  size_t p = 0;
  for (int j = 0; j < W; ++j)
    for (int64_t k = 0; k < rc[size_t(j)]; ++k, ++p) {
      ASSERT_EQ(recv_a[p], float(100 * j + me));
      ASSERT_EQ(recv_b[p], float(-(100 * j + me) - 1));
    }
}

// Uneven reduce-scatter then all-gather in place, against the sums computed here.
void check_uneven_reduce_scatter_and_all_gather(const std::vector<int64_t>& counts) {
  auto& w = world();
  const int W = w.size(), me = w.rank();
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  auto in = input<float>(me, total);
  std::vector<float> mine(static_cast<size_t>(counts[size_t(me)]));
  w.reduce_scatter_v(in.data(), mine.data(), counts, DType::f32, ReduceOp::sum);
  int64_t off = 0;
  for (int j = 0; j < me; ++j) off += counts[size_t(j)];
  for (int64_t i = 0; i < counts[size_t(me)]; ++i) {
    double want = 0;
    for (int r = 0; r < W; ++r) want += value(r, off + i);
    ASSERT_EQ(mine[size_t(i)], float(want));
  }
  // all_gather_v in place: each rank's block already sits at its offset of the full buffer.
  std::vector<float> full(static_cast<size_t>(total), -1.0f);
  std::copy(mine.begin(), mine.end(), full.begin() + off);
  w.all_gather_v(full.data() + off, full.data(), counts, DType::f32);
  int64_t o = 0;
  for (int j = 0; j < W; ++j)
    for (int64_t i = 0; i < counts[size_t(j)]; ++i, ++o) {
      double want = 0;
      for (int r = 0; r < W; ++r) want += value(r, o);
      ASSERT_EQ(full[size_t(o)], float(want)) << "block " << j;
    }
}

TEST(Mpi, UnevenReduceScatterAndAllGather) {
  std::vector<int64_t> counts;
  for (int j = 0; j < world().size(); ++j) counts.push_back(j % 3 + 1);  // 1, 2, 3, 1, ...
  check_uneven_reduce_scatter_and_all_gather(counts);
}

// Past MPI's int counts (a stage of more than 2^31 parameters) the all-gather runs in chunks: here
// with the limit lowered to 4 elements, blocks of 5 to 11 elements (one empty) take several chunks
// each. (The reduce-scatter is a ring of small messages at any size: RingReductionsInChunks... .)
TEST(Mpi, UnevenReduceScatterAndAllGatherBeyondTheCountLimitRunInChunks) {
  std::vector<int64_t> counts;
  for (int j = 0; j < world().size(); ++j) counts.push_back(j == 1 ? 0 : 5 + 3 * (j % 3));
  comm::set_mpi_max_count_for_testing(4);
  check_uneven_reduce_scatter_and_all_gather(counts);
  comm::set_mpi_max_count_for_testing(INT_MAX);
}

// The distributed optimizer's per-bucket reduce: the sum lands in place on the root only, every
// rank taking its turn as root (several in flight at once, as during backward).
TEST(Mpi, ReduceToEachRootInPlace) {
  auto& w = world();
  const int W = w.size(), me = w.rank();
  constexpr int64_t n = 1000;
  std::vector<std::vector<float>> bufs;
  for (int root = 0; root < W; ++root) bufs.push_back(input<float>(me, n));
  std::vector<std::unique_ptr<comm::Work>> inflight;
  for (int root = 0; root < W; ++root)
    inflight.push_back(w.reduce_async(bufs[size_t(root)].data(), n, DType::f32, ReduceOp::sum, root));
  for (auto& work : inflight) work->wait();
  const std::vector<float> mine = input<float>(me, n);
  for (int root = 0; root < W; ++root)
    for (int64_t i = 0; i < n; ++i) {
      double want = 0;
      for (int r = 0; r < W; ++r) want += value(r, i);
      ASSERT_EQ(bufs[size_t(root)][size_t(i)], root == me ? float(want) : mine[size_t(i)]) << "root " << root;
    }
  EXPECT_THROW(w.reduce_async(bufs[0].data(), n, DType::bf16, ReduceOp::sum, 0), Error);  // f32, i32, i64 only
}

TEST(Mpi, BroadcastSendRecvBarrierAndAsync) {
  auto& w = world();
  const int W = w.size(), me = w.rank();
  std::vector<int64_t> b(4, me);
  const int root = 1 % W;
  w.broadcast(b.data(), 4, DType::i64, root);
  EXPECT_EQ(b, std::vector<int64_t>(4, root));
  // A ring: send to the right, receive from the left, non-blocking so it cannot deadlock.
  float out = float(me), in = -1;
  auto s = w.send_async(&out, 1, DType::f32, (me + 1) % W, 7);
  auto r = w.recv_async(&in, 1, DType::f32, (me + W - 1) % W, 7);
  r->wait();
  s->wait();
  EXPECT_EQ(in, float((me + W - 1) % W));
  // An asynchronous all-reduce overlapping local work.
  std::vector<float> g(1000, float(me));
  auto work = w.all_reduce_async(g.data(), 1000, DType::f32, ReduceOp::sum);
  double local = 0;
  for (int i = 0; i < 100000; ++i) local += i * 1e-9;
  work->wait();
  EXPECT_EQ(g[999], float(W * (W - 1) / 2));
  EXPECT_GT(local, 0);
  w.barrier();
}

// Ring messages of at most `bytes` while in scope (the default again after, a failed assertion too).
struct RingChunkBytes {
  explicit RingChunkBytes(int64_t bytes) { comm::set_ring_chunk_bytes_for_testing(bytes); }
  ~RingChunkBytes() { comm::set_ring_chunk_bytes_for_testing(0); }
};

// The reductions run as a ring of messages of at most ring_chunk_bytes() (comm/mpi_ring.h). With it
// lowered to 8 bytes, a block takes several chunks, the chunks of uneven blocks run out at different
// steps and some blocks are empty; every result must stay exact.
TEST(Mpi, RingReductionsInChunksOfTwoElements) {
  auto& w = world();
  const int W = w.size(), me = w.rank();
  const RingChunkBytes two_floats(8);
  check_all_reduce<float>(DType::f32);
  check_all_reduce<bf16>(DType::bf16);
  check_all_reduce<int32_t>(DType::i32);
  check_all_reduce<int64_t>(DType::i64);
  std::vector<int64_t> counts;
  for (int j = 0; j < W; ++j) counts.push_back(j == 1 ? 0 : 5 + 3 * (j % 3));
  check_uneven_reduce_scatter_and_all_gather(counts);
  // Equal blocks, non-blocking, through the fp32 copies of bf16 as well.
  const int64_t n = 7;
  const auto in = input<bf16>(me, n * W);
  std::vector<bf16> out(size_t(n), bf16(-1.0f));
  w.reduce_scatter_async(in.data(), out.data(), n, DType::bf16, ReduceOp::sum)->wait();
  const auto in64 = input<int64_t>(me, n * W);
  std::vector<int64_t> out64(size_t(n), -1);
  w.reduce_scatter(in64.data(), out64.data(), n, DType::i64, ReduceOp::max);
  for (int64_t i = 0; i < n; ++i) {
    double sum = 0, max = value(0, me * n + i);
    for (int r = 0; r < W; ++r) {
      sum += value(r, me * n + i);
      max = std::max(max, value(r, me * n + i));
    }
    ASSERT_EQ(float(out[size_t(i)]), float(sum)) << "element " << i;
    ASSERT_EQ(double(out64[size_t(i)]), max) << "element " << i;
  }
}

// Ranks may wait on their reductions in flight in different orders (here odd ranks backwards): a
// wait must move the others on too, as MPI's progress engine does, or the ranks wait on each other
// for ever.
TEST(Mpi, RingReductionsInFlightCompleteWhateverOrderTheRanksWaitIn) {
  auto& w = world();
  const int W = w.size(), me = w.rank();
  const RingChunkBytes sixteen_floats(64);  // many exchanges each
  constexpr int64_t n = 1000;
  constexpr int K = 3;
  std::vector<std::vector<float>> bufs;
  std::vector<std::unique_ptr<comm::Work>> inflight;
  for (int k = 0; k < K; ++k) {
    bufs.push_back(input<float>(me, n));
    for (float& x : bufs.back()) x *= float(k + 1);
  }
  for (int k = 0; k < K; ++k) inflight.push_back(w.all_reduce_async(bufs[size_t(k)].data(), n, DType::f32, ReduceOp::sum));
  for (int k = 0; k < K; ++k) inflight[size_t(me % 2 ? K - 1 - k : k)]->wait();
  for (int k = 0; k < K; ++k)
    for (int64_t i = 0; i < n; ++i) {
      double want = 0;
      for (int r = 0; r < W; ++r) want += value(r, i) * (k + 1);
      ASSERT_EQ(bufs[size_t(k)][size_t(i)], float(want)) << "reduction " << k << " element " << i;
    }
}

// A rank blocked in a point-to-point receive still advances its ring reductions: here odd ranks wait
// on the all-reduce before they send, even ranks receive before they wait. Were the receive not to
// advance the reduction, the odd ranks would wait for the even ranks' next exchange for ever.
TEST(Mpi, ARankInAReceiveAdvancesItsRingReductions) {
  auto& w = world();
  const int W = w.size(), me = w.rank();
  if (W % 2) GTEST_SKIP() << "pairs of ranks";
  const RingChunkBytes sixteen_floats(64);
  constexpr int64_t n = 1000;
  std::vector<float> buf = input<float>(me, n);
  auto work = w.all_reduce_async(buf.data(), n, DType::f32, ReduceOp::sum);
  float word = float(me);
  if (me % 2) {
    work->wait();
    w.send(&word, 1, DType::f32, me - 1, 11);
  } else {
    w.recv(&word, 1, DType::f32, me + 1, 11);
    work->wait();
    EXPECT_EQ(word, float(me + 1));
  }
  for (int64_t i = 0; i < n; ++i) {
    double want = 0;
    for (int r = 0; r < W; ++r) want += value(r, i);
    ASSERT_EQ(buf[size_t(i)], float(want)) << "element " << i;
  }
}

// The ring's staging is tensor memory of the communication category while a reduction is in flight,
// gone when it completes, and the meta communicator of the same group accounts the same bytes: a dry
// run's communication memory is the real run's.
TEST(Mpi, RingStagingIsCommunicationMemoryAsTheMetaCommunicatorCountsIt) {
  auto& w = world();
  auto meta = comm::make_meta_communicator(w.rank(), w.size());
  Allocator &cpu = allocator(Device::cpu), &dry = allocator(Device::meta);
  const auto comm_bytes = [](Allocator& a) { return a.stats().of(MemoryCategory::communication); };
  const int64_t n = (int64_t(3) << 20) + 5;  // uneven blocks
  Tensor g = Tensor::zeros({n}, DType::bf16, Device::cpu);
  const int64_t cpu0 = comm_bytes(cpu), meta0 = comm_bytes(dry);
  for (const DType t : {DType::bf16, DType::f32}) {
    const int64_t count = t == DType::bf16 ? n : n / 2;  // the f32 view of the same bytes
    auto real = w.all_reduce_async(g.device_ptr(), count, t, ReduceOp::sum);
    auto dry_run = meta->all_reduce_async(nullptr, count, t, ReduceOp::sum);
    const int64_t held = comm_bytes(cpu) - cpu0;
    EXPECT_EQ(held, comm_bytes(dry) - meta0) << dtype_name(t);
    if (w.size() > 1) {
      EXPECT_GT(held, 0) << dtype_name(t);
    }
    real->wait();
    real.reset();  // the bf16 path's fp32 copy goes with the work
    dry_run.reset();
    EXPECT_EQ(comm_bytes(cpu), cpu0) << dtype_name(t);
    EXPECT_EQ(comm_bytes(dry), meta0) << dtype_name(t);
  }
  const int64_t each = n / w.size();
  Tensor out = Tensor::zeros({each}, DType::bf16, Device::cpu);
  auto real = w.reduce_scatter_async(g.device_ptr(), out.device_ptr(), each, DType::bf16, ReduceOp::sum);
  auto dry_run = meta->reduce_scatter_async(nullptr, nullptr, each, DType::bf16, ReduceOp::sum);
  EXPECT_EQ(comm_bytes(cpu) - cpu0, comm_bytes(dry) - meta0);
  real->wait();
}

TEST(Mpi, SplitFormsGroups) {
  auto& w = world();
  auto even = w.split(w.rank() % 2, w.rank());
  ASSERT_NE(even, nullptr);
  EXPECT_EQ(even->size(), (w.size() + 1 - w.rank() % 2) / 2);
  int x = w.rank(), sum = x;
  even->all_reduce(&sum, 1, DType::i32, ReduceOp::sum);
  int want = 0;
  for (int r = w.rank() % 2; r < w.size(); r += 2) want += r;
  EXPECT_EQ(sum, want);
  EXPECT_EQ(w.split(w.rank() == 0 ? 0 : -1, 0) == nullptr, w.rank() != 0);
}

}  // namespace
