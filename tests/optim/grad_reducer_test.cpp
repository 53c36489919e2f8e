// GradReducer on one process. With the local communicator the all-reduce of one rank is the identity;
// the bucketing itself is checked through a communicator that records every all-reduce it is handed
// and sums `ranks` identical copies of the buffer (what `ranks` data-parallel ranks holding the same
// gradients would produce), so an element reduced twice, or never, shows as a wrong value. The
// reduction over real ranks, against float64 sums, is tests/mpi/grad_reducer_test.cpp.
#include <gtest/gtest.h>

#include <numeric>
#include <utility>
#include <vector>

#include "tessel/core/check.h"
#include "tessel/optim/grad_reducer.h"

namespace tessel {
namespace {

using Range = std::pair<int64_t, int64_t>;

class RecordingComm final : public comm::Communicator {
 public:
  RecordingComm(const float* base, float ranks) : base_(base), ranks_(ranks) {}
  std::vector<Range> launched;  // [begin, end) of each all-reduce, in launch order
  int64_t completed = 0;        // works waited for

  int rank() const override { return 0; }
  int size() const override { return 4; }
  const char* backend() const override { return "recording"; }
  std::unique_ptr<comm::Work> all_reduce_async(void* buf, int64_t count, DType t, comm::ReduceOp op) override {
    EXPECT_EQ(t, DType::f32);
    EXPECT_EQ(op, comm::ReduceOp::sum);
    float* p = static_cast<float*>(buf);
    const int64_t begin = p - base_;
    launched.emplace_back(begin, begin + count);
    struct Pending final : comm::Work {
      RecordingComm* c;
      float* p;
      int64_t n;
      bool done = false;
      void wait() override {
        if (done) return;
        for (int64_t i = 0; i < n; ++i) p[i] *= c->ranks_;  // the sum of `ranks` equal copies
        done = true;
        ++c->completed;
      }
      bool test() override { return done; }
    };
    auto w = std::make_unique<Pending>();
    w->c = this;
    w->p = p;
    w->n = count;
    return w;
  }
  // Nothing else is used by the reducer.
  void all_reduce(void*, int64_t, DType, comm::ReduceOp) override { unused(); }
  void all_gather(const void*, void*, int64_t, DType) override { unused(); }
  void reduce_scatter(const void*, void*, int64_t, DType, comm::ReduceOp) override { unused(); }
  void all_to_all(const void*, void*, int64_t, DType) override { unused(); }
  void all_to_all_v(const void*, const std::vector<int64_t>&, void*, const std::vector<int64_t>&, DType) override {
    unused();
  }
  void reduce_scatter_v(const void*, void*, const std::vector<int64_t>&, DType, comm::ReduceOp) override { unused(); }
  void all_gather_v(const void*, void*, const std::vector<int64_t>&, DType) override { unused(); }
  std::unique_ptr<comm::Work> all_gather_v_async(void*, const std::vector<int64_t>&, DType) override { unused(); }
  void broadcast(void*, int64_t, DType, int) override { unused(); }
  void send(const void*, int64_t, DType, int, int) override { unused(); }
  void recv(void*, int64_t, DType, int, int) override { unused(); }
  void barrier() override { unused(); }
  std::unique_ptr<comm::Work> all_gather_async(const void*, void*, int64_t, DType) override { unused(); }
  std::unique_ptr<comm::Work> reduce_scatter_async(const void*, void*, int64_t, DType, comm::ReduceOp) override {
    unused();
  }
  std::unique_ptr<comm::Work> send_async(const void*, int64_t, DType, int, int) override { unused(); }
  std::unique_ptr<comm::Work> recv_async(void*, int64_t, DType, int, int) override { unused(); }
  std::unique_ptr<comm::Communicator> split(int, int) override { unused(); }
  struct Reduced {
    int64_t begin, end;
    int root;
    bool operator==(const Reduced& o) const { return begin == o.begin && end == o.end && root == o.root; }
  };
  std::vector<Reduced> reduced;  // [begin, end) and root of each reduce, in launch order
  std::unique_ptr<comm::Work> reduce_async(void* buf, int64_t count, DType t, comm::ReduceOp op, int root) override {
    EXPECT_EQ(t, DType::f32);
    EXPECT_EQ(op, comm::ReduceOp::sum);
    const int64_t begin = static_cast<float*>(buf) - base_;
    reduced.push_back({begin, begin + count, root});
    struct Done final : comm::Work {
      void wait() override {}
      bool test() override { return true; }
    };
    return std::make_unique<Done>();
  }

 private:
  [[noreturn]] static void unused() { TESSEL_FAIL("GradReducer used a collective other than all_reduce_async"); }
  const float* base_;
  float ranks_;
};

// Reports `ranges` in order with buckets of `bucket` elements over a buffer of `n` elements valued
// i + 1; checks every reported element was summed exactly once and every other one left alone.
// Returns the all-reduces launched.
std::vector<Range> reduce_ranges(int64_t n, int64_t bucket, const std::vector<Range>& ranges) {
  std::vector<float> g(static_cast<size_t>(n));
  std::iota(g.begin(), g.end(), 1.0f);
  RecordingComm c(g.data(), 4.0f);
  optim::GradReducer r(c, Tensor::from_blob(g.data(), {int64_t(g.size())}, DType::f32), bucket);
  for (const auto& [b, e] : ranges) r.ready(b, e);
  r.finish();
  EXPECT_EQ(c.completed, int64_t(c.launched.size()));
  EXPECT_EQ(r.buckets_launched(), int64_t(c.launched.size()));
  std::vector<bool> reported(size_t(n), false);
  for (const auto& [b, e] : ranges)
    for (int64_t i = b; i < e; ++i) reported[size_t(i)] = true;
  for (int64_t i = 0; i < n; ++i)
    EXPECT_EQ(g[size_t(i)], float(i + 1) * (reported[size_t(i)] ? 4.0f : 1.0f)) << "element " << i;
  return c.launched;
}

// Backward reports parameters last first, each range ending where the previous one began: they merge
// into buckets, and a bucket launches as soon as it holds bucket_elems.
TEST(GradReducer, DescendingAdjacentRangesFillBuckets) {
  const std::vector<Range> ranges = {{90, 100}, {75, 90}, {70, 75}, {40, 70}, {38, 40}, {0, 38}};
  EXPECT_EQ(reduce_ranges(100, 20, ranges), (std::vector<Range>{{75, 100}, {40, 75}, {0, 40}}));
  // A bucket of exactly bucket_elems launches (>=); one element short waits for the next range.
  EXPECT_EQ(reduce_ranges(100, 30, ranges), (std::vector<Range>{{70, 100}, {40, 70}, {0, 40}}));
  EXPECT_EQ(reduce_ranges(100, 31, ranges), (std::vector<Range>{{40, 100}, {0, 40}}));
  // One element per bucket: every range on its own. Larger than the model: one all-reduce at finish().
  EXPECT_EQ(reduce_ranges(100, 1, ranges).size(), ranges.size());
  EXPECT_EQ(reduce_ranges(100, 1000, ranges), (std::vector<Range>{{0, 100}}));
}

// A range that does not end where the bucket begins (a gap, or ascending order) closes the bucket:
// buckets stay contiguous, nothing outside the reported ranges is touched.
TEST(GradReducer, GapsAndAscendingRangesCloseTheBucket) {
  EXPECT_EQ(reduce_ranges(100, 1000, {{80, 100}, {50, 70}, {40, 50}}), (std::vector<Range>{{80, 100}, {40, 70}}));
  EXPECT_EQ(reduce_ranges(100, 1000, {{0, 10}, {10, 20}, {20, 30}}), (std::vector<Range>{{0, 10}, {10, 20}, {20, 30}}));
  // Empty ranges are ignored; nothing reported, nothing launched.
  EXPECT_EQ(reduce_ranges(100, 10, {{50, 50}, {60, 40}}), std::vector<Range>{});
}

// A full bucket starts while backward continues: its all-reduce is launched inside ready(), before
// finish().
TEST(GradReducer, FullBucketLaunchesBeforeFinish) {
  std::vector<float> g(64, 1.0f);
  RecordingComm c(g.data(), 2.0f);
  optim::GradReducer r(c, Tensor::from_blob(g.data(), {int64_t(g.size())}, DType::f32), 16);
  r.ready(48, 64);
  EXPECT_EQ(c.launched, (std::vector<Range>{{48, 64}}));
  r.ready(40, 48);
  EXPECT_EQ(c.launched.size(), 1u);
  r.finish();
  EXPECT_EQ(c.launched, (std::vector<Range>{{48, 64}, {40, 48}}));
}

// With the distributed optimizer each bucket is reduced to the ranks owning its parts (shards of 25
// elements on 4 ranks here): one reduce per part, to its owner, as the bucket fills; no all-reduce.
TEST(GradReducer, ShardedBucketsAreReducedPartByPartToTheirOwners) {
  std::vector<float> g(100, 1.0f);
  RecordingComm c(g.data(), 4.0f);
  optim::GradReducer r(c, Tensor::from_blob(g.data(), {100}, DType::f32), 30, {25, 25, 25, 25});
  for (const Range& range : std::vector<Range>{{90, 100}, {75, 90}, {70, 75}, {40, 70}}) r.ready(range.first, range.second);
  using R = RecordingComm::Reduced;
  // Buckets [70, 100) and [40, 70) are launched as they fill, during "backward".
  EXPECT_EQ(c.reduced, (std::vector<R>{{70, 75, 2}, {75, 100, 3}, {40, 50, 1}, {50, 70, 2}}));
  r.ready(38, 40);
  r.ready(0, 38);
  r.finish();
  EXPECT_EQ(c.reduced,
            (std::vector<R>{{70, 75, 2}, {75, 100, 3}, {40, 50, 1}, {50, 70, 2}, {0, 25, 0}, {25, 40, 1}}));
  EXPECT_TRUE(c.launched.empty());
  EXPECT_EQ(r.buckets_launched(), 3);
  // Shards that do not cover the buffer are refused.
  EXPECT_THROW(optim::GradReducer(c, Tensor::from_blob(g.data(), {100}, DType::f32), 30, {25, 25, 25}), Error);
  EXPECT_THROW(optim::GradReducer(c, Tensor::from_blob(g.data(), {100}, DType::f32), 30, {25, 25, 25, 20}), Error);
}

// Under expert parallelism the buffer is cut into units, each reduced over its own group: a bucket
// launches one collective per unit it overlaps, on that unit's communicator and for its part only; a
// unit without a group (experts no other rank holds) is left as it is. Owner units reduce each
// part to its owner, ranks counted within the unit.
TEST(GradReducer, UnitsAreReducedEachOverItsOwnGroup) {
  std::vector<float> g(100, 1.0f);
  RecordingComm dp(g.data(), 4.0f), experts(g.data(), 2.0f);
  optim::GradReducer r(Tensor::from_blob(g.data(), {100}, DType::f32), 50,
                       {{&dp, 0, 40, {}}, {nullptr, 40, 60, {}}, {&experts, 60, 100, {}}});
  for (const Range& range : std::vector<Range>{{80, 100}, {50, 80}, {0, 50}}) r.ready(range.first, range.second);
  r.finish();
  // Buckets [50, 100) (launched at 50 elements) and [0, 50).
  EXPECT_EQ(dp.launched, (std::vector<Range>{{0, 40}}));
  EXPECT_EQ(experts.launched, (std::vector<Range>{{60, 100}}));
  for (int64_t i = 0; i < 100; ++i) EXPECT_EQ(g[size_t(i)], i < 40 ? 4.0f : i < 60 ? 1.0f : 2.0f) << i;
  EXPECT_EQ(r.buckets_launched(), 2);

  RecordingComm owners_dp(g.data(), 4.0f), owners_experts(g.data(), 2.0f);
  optim::GradReducer sharded(Tensor::from_blob(g.data(), {100}, DType::f32), 1000,
                             {{&owners_dp, 0, 40, {10, 10, 10, 10}}, {&owners_experts, 40, 100, {15, 15, 15, 15}}});
  sharded.ready(0, 100);
  sharded.finish();
  using R = RecordingComm::Reduced;
  EXPECT_EQ(owners_dp.reduced, (std::vector<R>{{0, 10, 0}, {10, 20, 1}, {20, 30, 2}, {30, 40, 3}}));
  EXPECT_EQ(owners_experts.reduced, (std::vector<R>{{40, 55, 0}, {55, 70, 1}, {70, 85, 2}, {85, 100, 3}}));
  // Units that do not tile the buffer are refused.
  EXPECT_THROW(optim::GradReducer(Tensor::from_blob(g.data(), {100}, DType::f32), 10, {{&dp, 0, 40, {}}}), Error);
  EXPECT_THROW(optim::GradReducer(Tensor::from_blob(g.data(), {100}, DType::f32), 10,
                                  {{&dp, 0, 40, {}}, {&experts, 50, 100, {}}}),
               Error);
}

// The local (one-rank) communicator: the sum over one rank is the gradient itself.
TEST(GradReducer, LocalCommunicatorLeavesGradientsAsTheyAre) {
  auto local = comm::make_local_communicator();
  std::vector<float> g(1000);
  for (size_t i = 0; i < g.size(); ++i) g[i] = 0.001f * float(i) - 0.3f;
  const std::vector<float> before = g;
  optim::GradReducer r(*local, Tensor::from_blob(g.data(), {int64_t(g.size())}, DType::f32), 128);
  for (int64_t e = 1000; e > 0; e -= 100) r.ready(e - 100, e);
  r.finish();
  EXPECT_EQ(g, before);
  EXPECT_EQ(r.buckets_launched(), 5);  // 200-element buckets: 100 + 100 >= 128
}

}  // namespace
}  // namespace tessel
