// Devices and the memory each allocator accounts by category (core/device.h, core/memory.h).
// Expected byte counts are computed here from the size-class rule (64-byte multiples below 4 KiB, 8
// classes per octave above), not read back from the allocator.
#include <gtest/gtest.h>

#include <thread>

#include "tessel/core/memory.h"
#include "tessel/core/tensor.h"
#include "support/error_of.h"

namespace tessel {
namespace {

constexpr size_t idx(MemoryCategory c) { return size_t(c); }

TEST(Device, NamesParseAndUnknownNamesAreRefusedWithTheAllowedOnes) {
  EXPECT_EQ(parse_device("cpu"), Device::cpu);
  EXPECT_EQ(parse_device("meta"), Device::meta);
  EXPECT_EQ(device_name(Device::meta), "meta");
  EXPECT_EQ(testing::error_of([] { parse_device("cuda"); }), "unknown device 'cuda' (allowed: cpu, meta)");
}

TEST(MemoryAccounting, CategoriesCountBlockBytesAndTheirPeaks) {
  Allocator& a = allocator(Device::meta);  // the meta allocator: nothing else in this test uses it
  a.reset_peak();
  const MemoryStats before = a.stats();
  Tensor w, g;
  {
    MemoryCategoryScope tag(MemoryCategory::parameters);
    w = Tensor::empty({1000}, DType::f32, Device::meta);  // 4,000 B: 63 lines of 64 B = 4,032 B
    MemoryCategoryScope inner(MemoryCategory::gradients);
    g = Tensor::empty({25000}, DType::f32, Device::meta);  // 100,000 B: class 65,536 + 5 x 8,192
  }
  EXPECT_EQ(w.memory_category(), MemoryCategory::parameters);
  EXPECT_EQ(g.memory_category(), MemoryCategory::gradients);
  {
    Tensor act = Tensor::empty({64}, DType::bf16, Device::meta);  // no scope: activations, 128 B
    EXPECT_EQ(act.memory_category(), MemoryCategory::activations);
    const MemoryStats mid = a.stats();
    EXPECT_EQ(mid.of(MemoryCategory::parameters) - before.of(MemoryCategory::parameters), 4032);
    EXPECT_EQ(mid.of(MemoryCategory::gradients) - before.of(MemoryCategory::gradients), 106496);
    EXPECT_EQ(mid.of(MemoryCategory::activations) - before.of(MemoryCategory::activations), 128);
  }
  Tensor later = Tensor::empty({16}, DType::f32, Device::meta);  // 64 B, after the 128 B were freed
  const MemoryStats after = a.stats();
  EXPECT_EQ(after.of(MemoryCategory::activations) - before.of(MemoryCategory::activations), 64);
  EXPECT_EQ(after.peak_of(MemoryCategory::activations) - before.of(MemoryCategory::activations), 128);
  // The total peaked while the 128 B lived: each category's share at that moment, summing to it.
  EXPECT_EQ(after.peak_total - before.current_total, 4032 + 106496 + 128);
  EXPECT_EQ(after.at_peak[idx(MemoryCategory::activations)] - before.of(MemoryCategory::activations), 128);
  int64_t sum = 0;
  for (int64_t b : after.at_peak) sum += b;
  EXPECT_EQ(sum, after.peak_total);
  w = g = later = Tensor();
  EXPECT_EQ(a.stats().current_total, before.current_total);
}

TEST(MemoryAccounting, ViewsShareTheirStorageAndAreNotCountedAgain) {
  Allocator& a = allocator(Device::meta);
  const int64_t before = a.stats().current_total;
  Tensor t = Tensor::empty({8, 16}, DType::f32, Device::meta);
  Tensor v = t.slice(0, 2, 4).transpose(0, 1);
  Tensor r = t.reshape({128});
  EXPECT_EQ(a.stats().current_total - before, 512);
  EXPECT_TRUE(v.is_meta() && r.is_meta());
}

TEST(MemoryAccounting, TheCategoryScopeBelongsToItsThread) {
  MemoryCategoryScope tag(MemoryCategory::optimizer_state);
  MemoryCategory seen_elsewhere = MemoryCategory::parameters;
  std::thread([&] { seen_elsewhere = current_memory_category(); }).join();
  EXPECT_EQ(seen_elsewhere, MemoryCategory::activations);
  EXPECT_EQ(current_memory_category(), MemoryCategory::optimizer_state);
}

TEST(MemoryAccounting, CpuAndMetaAccountTheSameBytesForTheSameAllocations) {
  // The premise of a dry run: the same sequence of allocations costs the same on both devices.
  Allocator& cpu = allocator(Device::cpu);
  Allocator& meta = allocator(Device::meta);
  const auto run = [](Device d) {
    std::vector<Tensor> kept;
    MemoryCategoryScope tag(MemoryCategory::workspace);
    for (int64_t n : {1, 63, 4097, 100000, 1 << 20}) kept.push_back(Tensor::zeros({n}, DType::bf16, d));
    kept.push_back(kept[3].to(DType::f32));
    return kept;
  };
  const int64_t c0 = cpu.stats().of(MemoryCategory::workspace), m0 = meta.stats().of(MemoryCategory::workspace);
  const auto on_cpu = run(Device::cpu);
  const auto on_meta = run(Device::meta);
  EXPECT_EQ(cpu.stats().of(MemoryCategory::workspace) - c0, meta.stats().of(MemoryCategory::workspace) - m0);
  EXPECT_GT(meta.stats().of(MemoryCategory::workspace) - m0, 0);
}

TEST(MemoryAccounting, WithoutTheMetaPoolTheBytesAreTheSameAndNoFreeBlockIsKept) {
  Allocator& meta = allocator(Device::meta);
  // A 1 MiB block freed, then 64 KiB taken: with the pool, the freed block stays reserved (split
  // or whole, with the rest of its segment); without it, the reserve grows only by what is in use.
  struct Growth {
    int64_t in_use, peak, free_kept, peak_reserved;
  };
  const auto run = [&] {
    meta.start_fresh_pool();
    meta.reset_peak();
    const MemoryStats before = meta.stats();
    { Tensor big = Tensor::empty({1 << 18}, DType::f32, Device::meta); }
    Tensor small = Tensor::empty({1 << 14}, DType::f32, Device::meta);
    const MemoryStats after = meta.stats();
    return Growth{after.current_total - before.current_total, after.peak_total - before.current_total,
                  (after.reserved - after.current_total) - (before.reserved - before.current_total),
                  after.peak_reserved - before.reserved};
  };
  const Growth pooled = run();
  EXPECT_EQ(pooled.in_use, 65536);
  EXPECT_EQ(pooled.peak, 1 << 20);
  EXPECT_GE(pooled.free_kept, (1 << 20) - 65536);
  {
    const MetaPoolOffScope off;
    const Growth unpooled = run();
    EXPECT_EQ(unpooled.in_use, pooled.in_use);
    EXPECT_EQ(unpooled.peak, pooled.peak);
    EXPECT_EQ(unpooled.free_kept, 0);
    EXPECT_EQ(unpooled.peak_reserved, unpooled.peak);
  }
  // The pool again once the scope is gone.
  EXPECT_EQ(run().free_kept, pooled.free_kept);
  // Blocks that cross the scope's edges: one taken from the pool before it goes back to the pool
  // inside it; one made inside (no block) is freed after it without touching the pool.
  meta.start_fresh_pool();
  Tensor before_scope = Tensor::empty({1 << 18}, DType::f32, Device::meta);
  Tensor inside;
  const int64_t kept_before = meta.stats().reserved - meta.stats().current_total;
  {
    const MetaPoolOffScope off;
    before_scope = Tensor();
    EXPECT_EQ(meta.stats().reserved - meta.stats().current_total, kept_before + (1 << 20));
    inside = Tensor::empty({1 << 16}, DType::f32, Device::meta);
  }
  const MemoryStats with_inside = meta.stats();
  inside = Tensor();
  const MemoryStats after = meta.stats();
  EXPECT_EQ(with_inside.current_total - after.current_total, 1 << 18);
  EXPECT_EQ(after.reserved - after.current_total, with_inside.reserved - with_inside.current_total);
}

TEST(MetaTensor, HasNoDataAndSaysSoWhenTouched) {
  Tensor t = Tensor::zeros({2, 3}, DType::f32, Device::meta);  // zeros on meta writes nothing
  EXPECT_EQ(t.str(), "f32[2, 3] on meta");
  EXPECT_EQ(t.numel(), 6);
  EXPECT_EQ(testing::error_of([&] { (void)t.data<float>(); }),
            "f32[2, 3] on meta is on the meta device, which holds no data: it cannot be read or written (a dry "
            "run computes nothing)");
  const Tensor one = Tensor::empty({1}, DType::f32, Device::meta);
  EXPECT_EQ(testing::error_of([&] { (void)one.item(); }).substr(0, 36), "f32[1] on meta is on the meta device");
  t.fill(1.0);                                    // nothing to fill
  Tensor c = t.to(DType::bf16);                   // accounted, not computed
  EXPECT_TRUE(c.is_meta());
  EXPECT_EQ(c.dtype(), DType::bf16);
  Tensor host = Tensor::zeros({2, 3}, DType::f32);
  EXPECT_EQ(testing::error_of([&] { host.copy_from(t); }),
            "copy_from: f32[2, 3] on meta into f32[2, 3] on cpu (copies stay on one device)");
}

TEST(MetaTensor, TheDefaultDeviceScopeMakesEveryUnnamedAllocationMeta) {
  Allocator& meta = allocator(Device::meta);
  const int64_t before = meta.stats().current_total;
  {
    DefaultDeviceScope on_meta(Device::meta);
    // 16 GiB of parameters, accounted on one machine without a byte allocated.
    MemoryCategoryScope tag(MemoryCategory::parameters);
    Tensor big = Tensor::zeros({int64_t(1) << 32}, DType::f32);
    EXPECT_TRUE(big.is_meta());
    EXPECT_EQ(meta.stats().current_total - before, int64_t(1) << 34);
  }
  EXPECT_EQ(default_device(), Device::cpu);
  EXPECT_EQ(Tensor::empty({4}, DType::f32).device(), Device::cpu);
}

}  // namespace
}  // namespace tessel
