// The tensor block pool: requests rounded up to size classes, freed blocks reused as they are or
// merged with their neighbours, blocks carved best-fit from segments, a bounded set of free
// segments (the oldest go back), choices independent of the segments' addresses, and a pool
// started afresh while blocks of the old one are in use.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "support/host_access.h"
#include "tessel/core/block_pool.h"
#include "tessel/core/pool_generations.h"
#include "tessel/core/tensor.h"

namespace tessel {
namespace {

TEST(BlockPool, SizeClasses) {
  // Below 4 KiB: 64-byte multiples; above: 8 classes per octave (spacing = the octave's start / 8).
  EXPECT_EQ(BlockPool::block_size(0), 64u);
  EXPECT_EQ(BlockPool::block_size(1), 64u);
  EXPECT_EQ(BlockPool::block_size(65), 128u);
  EXPECT_EQ(BlockPool::block_size(4096), 4096u);
  EXPECT_EQ(BlockPool::block_size(4097), 4096u + 512u);
  EXPECT_EQ(BlockPool::block_size(100000), 65536u + 5u * 8192u);  // 98304 < 100000 <= 106496
  EXPECT_EQ(BlockPool::block_size(size_t(1) << 20), size_t(1) << 20);
  EXPECT_EQ(BlockPool::block_size((size_t(1) << 20) + 1), (size_t(1) << 20) + (size_t(1) << 17));
  EXPECT_EQ(BlockPool::block_size((size_t(15) << 17) + 1), size_t(1) << 21);  // past the last class: next power of two
}

TEST(BlockPool, TensorsOfNearbySizesShareABlock) {
  const tessel::testing::HostAccess host;  // the test reads and writes tensors in place: host code
  // 100,000 and 104,000 bytes fall in one class: the second tensor gets the first one's block back.
  void* first = nullptr;
  {
    Tensor t = Tensor::empty({25000}, DType::f32);
    first = t.raw();
  }
  Tensor u = Tensor::empty({26000}, DType::f32);
  EXPECT_EQ(u.raw(), first);
}

constexpr size_t kMiB = size_t(1) << 20;

TEST(BlockPool, ASmallerRequestTakesPartOfAFreedBlockAndTheRestStaysFree) {
  // Large requests get a segment of their own size; once freed, two smaller requests fit in it.
  BlockPool pool(0);
  void* big = pool.get(8 * kMiB);
  pool.put(big, 8 * kMiB);
  void* a = pool.get(3 * kMiB);
  void* b = pool.get(5 * kMiB);
  EXPECT_EQ(a, big);  // the lowest address of the best-fitting block
  EXPECT_EQ(static_cast<char*>(b), static_cast<char*>(big) + 3 * kMiB);
  BlockPoolStats st = pool.stats();
  EXPECT_EQ(st.allocated, 1);
  EXPECT_EQ(st.segment_bytes, 8 * kMiB);
  EXPECT_EQ(st.cached_bytes, 0u);
  // Freed in either order, the two halves merge back into one block the whole request fits in again.
  pool.put(b, 5 * kMiB);
  pool.put(a, 3 * kMiB);
  void* again = pool.get(8 * kMiB);
  EXPECT_EQ(again, big);
  EXPECT_EQ(pool.stats().allocated, 1);
  pool.put(again, 8 * kMiB);
}

TEST(BlockPool, AFreedBlockIsReusedAsItIsOrMergedWithItsNeighbours) {
  BlockPool pool(4 * kMiB);  // keeps the free segment
  std::vector<void*> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(pool.get(512 * 1024));  // fill one shared small segment
  EXPECT_EQ(pool.stats().segments, 1u);
  // A request of a freed block's size gets that block back as it is.
  pool.put(blocks[2], 512 * 1024);
  EXPECT_EQ(pool.get(512 * 1024), blocks[2]);
  // A larger one no free block holds: the freed neighbours 1 and 2 merge and hold it.
  pool.put(blocks[2], 512 * 1024);
  pool.put(blocks[1], 512 * 1024);
  void* merged = pool.get(kMiB);
  EXPECT_EQ(merged, blocks[1]);
  EXPECT_EQ(pool.stats().segments, 1u);
  EXPECT_EQ(pool.stats().allocated, 1);
  for (void* p : {blocks[0], merged, blocks[3]}) pool.put(p, p == merged ? kMiB : 512 * 1024);
  EXPECT_EQ(pool.stats().live_bytes, 0u);
  EXPECT_EQ(pool.stats().cached_bytes, BlockPool::kSmallSegment);
}

TEST(BlockPool, ASmallRequestUsesAFreeLargeBlockBeforeANewSegment) {
  BlockPool pool(0);
  void* big = pool.get(4 * kMiB);
  pool.put(big, 4 * kMiB);
  void* small = pool.get(100000);
  EXPECT_EQ(small, big);
  EXPECT_EQ(pool.stats().segments, 1u);
  pool.put(small, 100000);
}

TEST(BlockPool, FreeSegmentsStayUnderTheCap) {
  BlockPool pool(4 * kMiB);  // keeps at least 4 MiB of free segments
  // One block in use at a time, each larger than the last, so no free segment can serve it: the
  // peak in use is the last one (~6 MB), and the oldest free segments go back.
  std::vector<size_t> sizes;
  for (size_t mb = 2; mb <= 6; ++mb) sizes.push_back(mb * kMiB + 1);
  for (size_t s : sizes) pool.put(pool.get(s), s);
  const BlockPoolStats st = pool.stats();
  EXPECT_EQ(st.cap_bytes, BlockPool::block_size(sizes.back()));
  EXPECT_LE(st.cached_bytes, st.cap_bytes);
  EXPECT_GT(st.released, 0);
  EXPECT_EQ(st.live_bytes, 0u);
  // The most recently freed segment is the one kept.
  void* last = pool.get(sizes.back());
  EXPECT_EQ(pool.stats().reused, 1);
  pool.put(last, sizes.back());
}

TEST(BlockPool, CapFollowsThePeakInUse) {
  // The bound is the most bytes ever in use at once: a step that frees everything keeps it all.
  BlockPool pool(0);
  std::vector<std::pair<void*, size_t>> held;
  for (size_t s : {3 * kMiB, 5 * kMiB, 7 * kMiB}) held.emplace_back(pool.get(s), s);
  const size_t in_use = pool.stats().live_bytes;
  for (auto [p, s] : held) pool.put(p, s);
  EXPECT_EQ(pool.stats().cap_bytes, in_use);
  EXPECT_EQ(pool.stats().cached_bytes, in_use);
  EXPECT_EQ(pool.stats().released, 0);
  for (size_t s : {3 * kMiB, 5 * kMiB, 7 * kMiB}) pool.put(pool.get(s), s);  // served from the pool
  EXPECT_EQ(pool.stats().reused, 3);
  EXPECT_EQ(pool.stats().allocated, 3);
}

TEST(BlockPool, ReleaseIdleGivesBackEverySegmentWithNothingInUse) {
  BlockPool pool(64 * kMiB);  // would keep all of it
  void* kept = pool.get(1000);  // a small segment stays: a block of it is in use
  std::vector<std::pair<void*, size_t>> freed;
  for (size_t s : {3 * kMiB, 5 * kMiB, size_t(2000)}) freed.emplace_back(pool.get(s), s);
  for (auto [p, s] : freed) pool.put(p, s);  // the 2000 bytes go back parked, in kept's segment
  EXPECT_EQ(pool.stats().segments, 3u);
  pool.release_idle();
  const BlockPoolStats st = pool.stats();
  EXPECT_EQ(st.segments, 1u);
  EXPECT_EQ(st.released, 2);
  EXPECT_EQ(st.live_bytes, BlockPool::block_size(1000));
  EXPECT_EQ(st.cached_bytes, st.segment_bytes - st.live_bytes);  // the rest of kept's segment
  pool.put(kept, 1000);
  pool.release_idle();
  EXPECT_EQ(pool.stats().segments, 0u);
  EXPECT_EQ(pool.stats().cached_bytes, 0u);
}

TEST(BlockPool, VaryingSizesDoNotGrowThePool) {
  // MoE-like: beside a model state held throughout, each "step" holds a few buffers of random sizes
  // (0.5..3 MB), then frees them. Freed blocks merge and serve other sizes, so new segments are
  // rare and what the pool holds stays bounded by the most ever in use.
  BlockPool pool(0);
  void* state = pool.get(16 * kMiB);
  std::mt19937 rng(7);
  std::uniform_int_distribution<size_t> size(500000, 3000000);
  for (int step = 0; step < 300; ++step) {
    std::vector<std::pair<void*, size_t>> held;
    for (int i = 0; i < 8; ++i) {
      const size_t s = size(rng);
      held.emplace_back(pool.get(s), s);
    }
    for (auto [p, s] : held) pool.put(p, s);
  }
  const BlockPoolStats st = pool.stats();
  // 2,400 requests of ~2,000 distinct sizes took 16 segments here (a new one only when a rare step
  // needs more than every free block holds).
  EXPECT_LE(st.allocated, 24);
  // Independent random sizes are the worst case for fitting (a training step's sizes repeat): the
  // segments held 1.39x the peak in use here. Without merging the pool would keep adding segments.
  EXPECT_LE(double(st.peak_segment_bytes), 1.5 * double(st.peak_live_bytes));
  EXPECT_GT(st.reused, 8 * 300 * 9 / 10);
  pool.put(state, 16 * kMiB);
}

// Made-up segment addresses, never dereferenced (the pool only computes with them): one backing
// places each new segment above the last, the other below, as the heap may do either.
void* ascending_segment(size_t bytes) {
  static uintptr_t next = uintptr_t(1) << 40;
  const uintptr_t at = next;
  next += (bytes + 63) / 64 * 64;
  return reinterpret_cast<void*>(at);
}
void* descending_segment(size_t bytes) {
  static uintptr_t next = uintptr_t(1) << 46;
  next -= (bytes + 63) / 64 * 64;
  return reinterpret_cast<void*>(next);
}
void forget_segment(void*, size_t) {}

TEST(BlockPool, ChoicesDoNotDependOnWhereTheBackingPutsSegments) {
  // The meta device runs this pool over made-up addresses and must take the blocks the cpu's takes
  // over the heap: the same requests give the same blocks, named by segment and offset, and the
  // same reserve, whichever way the segments' addresses run. Sizes repeat (ties between free blocks
  // of one size in different segments), small and large, kept and freed at random.
  BlockPool up(0, {ascending_segment, forget_segment}), down(0, {descending_segment, forget_segment});
  std::mt19937 rng(7);
  const std::vector<size_t> sizes = {3000, 200000, 700000, 3 * kMiB, 5 * kMiB, 8 * kMiB};
  struct Held {
    void* up;
    void* down;
    size_t bytes;
  };
  std::vector<Held> held;
  for (int op = 0; op < 4000; ++op) {
    if (held.empty() || rng() % 5 < 3) {
      const size_t n = sizes[rng() % sizes.size()];
      held.push_back({up.get(n), down.get(n), n});
    } else {
      const size_t i = rng() % held.size();
      up.put(held[i].up, held[i].bytes);
      down.put(held[i].down, held[i].bytes);
      held.erase(held.begin() + std::ptrdiff_t(i));
    }
    const BlockPoolStats a = up.stats(), b = down.stats();
    ASSERT_EQ(a.segment_bytes, b.segment_bytes) << "operation " << op;
    ASSERT_EQ(a.cached_blocks, b.cached_blocks) << "operation " << op;
    ASSERT_EQ(a.reused, b.reused) << "operation " << op;
  }
  EXPECT_GT(up.stats().reused, 1000);
}

TEST(PoolGenerations, AFreshPoolStartsEmptyAndTheOldOneTakesItsBlocksBack) {
  PoolGenerations pools(64 * kMiB, {ascending_segment, forget_segment});  // would keep every free segment
  void* kept = pools.get(3 * kMiB);     // in use across the start
  void* freed = pools.get(5 * kMiB);
  pools.put(freed, 5 * kMiB);           // a free segment of the old pool
  EXPECT_EQ(pools.segment_bytes(), 8 * kMiB);
  pools.start_fresh();
  // The old pool's free segment went back; its block in use stays, in a segment of its own.
  EXPECT_EQ(pools.segment_bytes(), 3 * kMiB);
  EXPECT_EQ(pools.current_stats().segment_bytes, 0u);
  // A 5 MiB request no longer finds the old free block: the new pool takes a segment, as a new
  // process would.
  void* again = pools.get(5 * kMiB);
  EXPECT_EQ(pools.current_stats().allocated, 1);
  EXPECT_EQ(pools.segment_bytes(), 8 * kMiB);
  // The old block goes back to the pool that handed it out, which then holds nothing and goes.
  pools.put(kept, 3 * kMiB);
  EXPECT_EQ(pools.segment_bytes(), 5 * kMiB);
  EXPECT_EQ(pools.cached_bytes(), 0u);
  pools.put(again, 5 * kMiB);
  EXPECT_EQ(pools.current_stats().live_bytes, 0u);
  EXPECT_EQ(pools.cached_bytes(), 5 * kMiB);  // the new pool keeps its free segment
}

}  // namespace
}  // namespace tessel
