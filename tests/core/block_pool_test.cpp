// The tensor block pool: requests rounded up to size classes (so sizes that change from step to step
// share blocks), and a bounded set of free blocks (the least recently returned go back to the OS).
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "support/host_access.h"
#include "tessel/core/block_pool.h"
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
  // (An exact-size pool kept the first block and allocated a new one.)
  void* first = nullptr;
  {
    Tensor t = Tensor::empty({25000}, DType::f32);
    first = t.raw();
  }
  Tensor u = Tensor::empty({26000}, DType::f32);
  EXPECT_EQ(u.raw(), first);
}

TEST(BlockPool, FreeBlocksStayUnderTheCap) {
  BlockPool pool(size_t(1) << 20);  // keeps at least 1 MiB of free blocks
  // One block in use at a time, of a new size class each time: peak use ~500 KB, so the cap is 1 MiB.
  std::vector<size_t> sizes;
  for (size_t kb = 64; kb <= 512; kb += 32) sizes.push_back(kb * 1000);
  for (size_t s : sizes) pool.put(pool.get(s), s);
  const BlockPoolStats st = pool.stats();
  EXPECT_EQ(st.cap_bytes, size_t(1) << 20);
  EXPECT_LE(st.cached_bytes, st.cap_bytes);
  EXPECT_GT(st.released, 0);
  EXPECT_EQ(st.live_bytes, 0u);
  // The most recently returned block is the one kept.
  void* last = pool.get(sizes.back());
  EXPECT_EQ(pool.stats().reused, 1);
  pool.put(last, sizes.back());
}

TEST(BlockPool, CapFollowsThePeakInUse) {
  // The bound is the most bytes ever in use at once: a step that frees everything keeps it all.
  BlockPool pool(0);
  std::vector<std::pair<void*, size_t>> held;
  for (size_t s : {300000u, 500000u, 700000u}) held.emplace_back(pool.get(s), s);
  const size_t in_use = pool.stats().live_bytes;
  for (auto [p, s] : held) pool.put(p, s);
  EXPECT_EQ(pool.stats().cap_bytes, in_use);
  EXPECT_EQ(pool.stats().cached_bytes, in_use);
  EXPECT_EQ(pool.stats().released, 0);
  for (size_t s : {300000u, 500000u, 700000u}) pool.put(pool.get(s), s);  // served from the pool
  EXPECT_EQ(pool.stats().reused, 3);
  EXPECT_EQ(pool.stats().allocated, 3);
}

TEST(BlockPool, VaryingSizesDoNotGrowThePool) {
  // MoE-like: each "step" holds a few buffers of random sizes (0.5..1.5 MB), then frees them. The free
  // blocks never exceed the peak in use, however many distinct sizes appear.
  BlockPool pool(0);
  std::mt19937 rng(7);
  std::uniform_int_distribution<size_t> size(500000, 1500000);
  size_t peak_cached = 0;
  for (int step = 0; step < 300; ++step) {
    std::vector<std::pair<void*, size_t>> held;
    for (int i = 0; i < 8; ++i) {
      const size_t s = size(rng);
      held.emplace_back(pool.get(s), s);
    }
    for (auto [p, s] : held) pool.put(p, s);
    peak_cached = std::max(peak_cached, pool.stats().cached_bytes);
  }
  const BlockPoolStats st = pool.stats();
  EXPECT_LE(peak_cached, st.peak_live_bytes);
  EXPECT_LE(st.peak_live_bytes, size_t(8 * 1700000));  // 8 blocks of at most 1.5 MB rounded up by <= 1/8
  // Independent random sizes over five classes: about half the requests find a block of their class
  // (a training step's sizes repeat far more).
  EXPECT_GT(st.reused, 8 * 300 / 3);
}

}  // namespace
}  // namespace tessel
