// The prefetching batch loader: batches are the source's samples in order whether or not the
// background prefetch guessed the next request, and a sample that fails on the background thread
// reaches the caller of the batch that needed it. `make test-tsan` runs these under ThreadSanitizer.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>

#include "support/host_access.h"
#include "tessel/core/check.h"
#include "tessel/data/gpt_dataset.h"

using namespace tessel;
using namespace tessel::data;

namespace {

// Sample i is the T + 1 tokens i * 1000 + j; samples from `fail_from` on throw. Counts the calls so
// the tests can see the prefetch happen.
class CountingSource : public SampleSource {
 public:
  CountingSource(int64_t seq_length, int64_t fail_from) : T_(seq_length), fail_from_(fail_from) {}
  int64_t size() const override { return 1 << 20; }
  void sample(int64_t i, int64_t* out) const override {
    calls.fetch_add(1);
    TESSEL_CHECK(i < fail_from_, "sample {} is unreadable", i);
    for (int64_t j = 0; j <= T_; ++j) out[j] = i * 1000 + j;
  }
  mutable std::atomic<int64_t> calls{0};

 private:
  int64_t T_, fail_from_;
};

void expect_batch(const Batch& b, int64_t first, int64_t batch, int64_t T) {
  ASSERT_EQ(b.tokens.shape(), (Shape{batch, T}));
  ASSERT_EQ(b.targets.shape(), (Shape{batch, T}));
  for (int64_t s = 0; s < batch; ++s)
    for (int64_t j = 0; j < T; ++j) {
      EXPECT_EQ(b.tokens.data<int64_t>()[s * T + j], (first + s) * 1000 + j);
      EXPECT_EQ(b.targets.data<int64_t>()[s * T + j], (first + s) * 1000 + j + 1);
    }
}

TEST(BatchLoader, SequentialAndOutOfOrderRequestsGiveTheSourcesSamples) {
  const tessel::testing::HostAccess host;  // the test reads and writes tensors in place: host code
  const int64_t T = 6;
  auto src = std::make_shared<CountingSource>(T, 1 << 20);
  BatchLoader loader(src, T);
  expect_batch(loader.get(0, 4), 0, 4, T);
  for (int64_t first = 4; first < 40; first += 4) expect_batch(loader.get(first, 4), first, 4, T);  // prefetched
  expect_batch(loader.get(100, 3), 100, 3, T);  // not the prefetched batch: built in place
  expect_batch(loader.get(103, 3), 103, 3, T);
  expect_batch(loader.get(103, 2), 103, 2, T);  // same start, another size
}

TEST(BatchLoader, PrefetchRunsAheadOfTheRequest) {
  const int64_t T = 4;
  auto src = std::make_shared<CountingSource>(T, 1 << 20);
  {
    BatchLoader loader(src, T);
    loader.get(0, 5);
  }  // the destructor waits for the prefetch of [5, 10)
  EXPECT_EQ(src->calls.load(), 10);
}

// A sample that fails on the prefetch thread must reach the caller of the batch that needs it as
// that sample's tessel::Error, and leave a loader that works on. (Before the fix get() left the
// consumed future in place: the destructor or the next get() waited on it, std::future_error
// escaped and std::terminate ended the process without the error's message.)
TEST(BatchLoader, AFailedPrefetchReachesTheCallerAsItsError) {
  const tessel::testing::HostAccess host;  // the test reads and writes tensors in place: host code
  const int64_t T = 4;
  auto src = std::make_shared<CountingSource>(T, 10);
  try {
    BatchLoader loader(src, T);
    expect_batch(loader.get(8, 2), 8, 2, T);  // prefetches [10, 12): fails in the background
    loader.get(10, 2);
    FAIL() << "no error for an unreadable sample";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sample 10 is unreadable"), std::string::npos) << e.what();
  }
}

TEST(BatchLoader, TheLoaderWorksOnAfterAFailedBatch) {
  const tessel::testing::HostAccess host;  // the test reads and writes tensors in place: host code
  const int64_t T = 4;
  auto src = std::make_shared<CountingSource>(T, 10);
  BatchLoader loader(src, T);
  expect_batch(loader.get(8, 2), 8, 2, T);
  EXPECT_THROW(loader.get(10, 2), Error);
  expect_batch(loader.get(0, 3), 0, 3, T);
  loader.get(2, 8);  // its prefetch of [10, 18) fails and is never asked for: dropped quietly
}

TEST(BatchLoader, AFailedPrefetchNobodyAsksForIsDropped) {
  const tessel::testing::HostAccess host;  // the test reads and writes tensors in place: host code
  const int64_t T = 4;
  auto src = std::make_shared<CountingSource>(T, 10);
  BatchLoader loader(src, T);
  expect_batch(loader.get(6, 2), 6, 2, T);  // prefetches [8, 10): fine
  expect_batch(loader.get(2, 8), 2, 8, T);  // not the prefetched batch; prefetches [10, 18), which fails
  expect_batch(loader.get(0, 2), 0, 2, T);  // the failed prefetch is waited for and dropped
}

}  // namespace
