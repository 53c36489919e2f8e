// Tensor: allocation, views (reshape / slice / transpose) and their strides, copies across dtypes from
// strided sources, and errors that carry the throwing file:line.
#include <gtest/gtest.h>

#include <cctype>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "support/host_access.h"
#include "tessel/core/tensor.h"

namespace tessel {
namespace {

// A [R, C] f32 tensor with element (i, j) = 100 i + j.
Tensor iota2d(int64_t R, int64_t C) {
  Tensor t = Tensor::empty({R, C}, DType::f32);
  float* p = t.data<float>();
  for (int64_t i = 0; i < R; ++i)
    for (int64_t j = 0; j < C; ++j) p[i * C + j] = float(100 * i + j);
  return t;
}

// Element (i, j) of a 2-D tensor of any float dtype, read through its strides.
double at(const Tensor& t, int64_t i, int64_t j) {
  const int64_t off = i * t.stride(0) + j * t.stride(1);
  switch (t.dtype()) {
    case DType::f32: return static_cast<const float*>(t.raw())[off];
    case DType::bf16: return float(static_cast<const bf16*>(t.raw())[off]);
    case DType::f16: return float(static_cast<const f16*>(t.raw())[off]);
    case DType::e4m3: return float(static_cast<const fp8_e4m3*>(t.raw())[off]);
    case DType::e5m2: return float(static_cast<const fp8_e5m2*>(t.raw())[off]);
    case DType::i32: return static_cast<const int32_t*>(t.raw())[off];
    case DType::i64: return double(static_cast<const int64_t*>(t.raw())[off]);
  }
  return 0;
}

::testing::AssertionResult throws_with_location(const std::function<void()>& f, const std::string& file) {
  try {
    f();
  } catch (const Error& e) {
    const std::string msg = e.where();  // the location, kept apart from the message
    if (msg.find(file + ":") == std::string::npos)
      return ::testing::AssertionFailure() << "message lacks '" << file << ":': " << msg;
    // "file:line: ..." with a number after the colon.
    const size_t p = msg.find(file + ":") + file.size() + 1;
    if (p >= msg.size() || !std::isdigit(static_cast<unsigned char>(msg[p])))
      return ::testing::AssertionFailure() << "no line number after '" << file << ":': " << msg;
    return ::testing::AssertionSuccess();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw a non-tessel exception: " << e.what();
  }
  return ::testing::AssertionFailure() << "did not throw";
}

TEST(Tensor, EmptyAndZeros) {
  const tessel::testing::HostAccess host;  // the test reads and writes tensors in place: host code
  for (DType t : {DType::f32, DType::bf16, DType::f16, DType::e4m3, DType::e5m2, DType::i32, DType::i64}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    Tensor z = Tensor::zeros({3, 5, 7}, t);
    EXPECT_TRUE(z.defined());
    EXPECT_EQ(z.dtype(), t);
    EXPECT_EQ(z.dim(), 3);
    EXPECT_EQ(z.numel(), 105);
    EXPECT_EQ(z.nbytes(), 105 * dtype_size(t));
    EXPECT_EQ(z.strides(), (Shape{35, 7, 1}));
    EXPECT_TRUE(z.is_contiguous());
    const auto* bytes = static_cast<const unsigned char*>(z.raw());
    for (size_t i = 0; i < z.nbytes(); ++i) ASSERT_EQ(bytes[i], 0) << i;
    Tensor e = Tensor::empty({0, 4}, t);
    EXPECT_EQ(e.numel(), 0);
    EXPECT_EQ(e.nbytes(), 0u);
  }
  EXPECT_FALSE(Tensor().defined());
  Tensor s = Tensor::zeros({}, DType::f32);  // scalar
  EXPECT_EQ(s.numel(), 1);
  EXPECT_EQ(s.item(), 0.0);
  EXPECT_EQ(Tensor::zeros({2, 3}, DType::bf16).str(), "bf16[2, 3]");
  EXPECT_EQ(shape_str({4, 1, 2}), "[4, 1, 2]");
}

TEST(Tensor, StorageIs64ByteAligned) {
  const tessel::testing::HostAccess host;  // the test reads and writes tensors in place: host code
  for (int64_t n : {1, 3, 17, 63, 64, 65, 1000}) {
    for (DType t : {DType::f32, DType::bf16, DType::e4m3, DType::i64}) {
      Tensor a = Tensor::empty({n}, t);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(a.raw()) % 64, 0u) << n << " " << dtype_name(t);
    }
  }
}

TEST(Tensor, ReshapeInfersOneDimension) {
  const tessel::testing::HostAccess host;  // the test reads and writes tensors in place: host code
  Tensor t = iota2d(4, 6);
  Tensor r = t.reshape({2, -1, 3});
  EXPECT_EQ(r.shape(), (Shape{2, 4, 3}));
  EXPECT_EQ(r.strides(), (Shape{12, 3, 1}));
  EXPECT_EQ(r.raw(), t.raw());  // a view
  EXPECT_EQ(t.reshape({-1}).shape(), (Shape{24}));
  EXPECT_EQ(t.reshape({24, -1}).shape(), (Shape{24, 1}));
  // Element order is preserved: r[1][2][1] is flat index 12 + 6 + 1 = 19 = (3, 1).
  EXPECT_EQ(static_cast<float*>(r.raw())[1 * 12 + 2 * 3 + 1], 301.0f);
  EXPECT_TRUE(throws_with_location([&] { t.reshape({5, -1}); }, "tensor.cpp"));     // 24 not divisible by 5
  EXPECT_TRUE(throws_with_location([&] { t.reshape({-1, -1}); }, "tensor.cpp"));    // two -1
  EXPECT_TRUE(throws_with_location([&] { t.reshape({5, 5}); }, "tensor.cpp"));      // wrong numel
  EXPECT_TRUE(throws_with_location([&] { t.transpose(0, 1).reshape({24}); }, "tensor.cpp"));  // non-contiguous
}

// A tensor holds the strides of up to 8 dimensions in itself; a shape of more is refused by name,
// never written past the end. Contiguity is judged from shape and strides alone.
TEST(Tensor, EightDimensionsAtMostAndContiguityFromTheStrides) {
  const Shape eight{2, 1, 3, 1, 2, 1, 1, 2};
  Tensor t = Tensor::empty(eight, DType::f32, Device::meta);
  EXPECT_EQ(t.strides(), (Shape{12, 12, 4, 4, 2, 2, 2, 1}));
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_FALSE(t.transpose(0, 2).is_contiguous());
  EXPECT_TRUE(t.reshape({24}).is_contiguous());
  EXPECT_FALSE(t.slice(2, 0, 2).is_contiguous());  // 2 of 3 along a dim with more outside it
  EXPECT_FALSE(Tensor::empty({4, 6}, DType::f32, Device::meta).slice(1, 0, 3).is_contiguous());
  EXPECT_TRUE(Tensor::empty({4, 6}, DType::f32, Device::meta).slice(0, 1, 3).is_contiguous());
  try {
    Tensor::empty({1, 1, 1, 1, 1, 1, 1, 1, 2}, DType::f32, Device::meta);
    ADD_FAILURE() << "a 9-dimensional tensor was made";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("9 dimensions; at most 8"), std::string::npos) << e.what();
  }
  EXPECT_THROW(t.reshape({1, 1, 1, 1, 1, 1, 1, 1, 24}), Error);
}

TEST(Tensor, SliceStridesAndValues) {
  const tessel::testing::HostAccess host;  // the test reads and writes tensors in place: host code
  Tensor t = iota2d(5, 7);
  Tensor rows = t.slice(0, 1, 4);  // rows 1..3
  EXPECT_EQ(rows.shape(), (Shape{3, 7}));
  EXPECT_EQ(rows.strides(), (Shape{7, 1}));
  EXPECT_TRUE(rows.is_contiguous());
  EXPECT_EQ(at(rows, 0, 0), 100.0);
  Tensor cols = t.slice(1, 2, 6);  // columns 2..5
  EXPECT_EQ(cols.shape(), (Shape{5, 4}));
  EXPECT_EQ(cols.strides(), (Shape{7, 1}));
  EXPECT_FALSE(cols.is_contiguous());
  Tensor both = t.slice(0, 3, 5).slice(-1, 5, 7);
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 2; ++j) EXPECT_EQ(at(both, i, j), 100.0 * (3 + i) + (5 + j));
  EXPECT_EQ(t.slice(0, 2, 2).numel(), 0);
  // Writes through a view land in the base tensor.
  static_cast<float*>(cols.raw())[1 * 7 + 1] = -1.0f;
  EXPECT_EQ(at(t, 1, 3), -1.0);
  EXPECT_TRUE(throws_with_location([&] { t.slice(0, 3, 6); }, "tensor.cpp"));
  EXPECT_TRUE(throws_with_location([&] { t.slice(1, 4, 3); }, "tensor.cpp"));
  EXPECT_TRUE(throws_with_location([&] { t.slice(2, 0, 1); }, "tensor.cpp"));
}

TEST(Tensor, TransposeStridesAndValues) {
  const tessel::testing::HostAccess host;  // the test reads and writes tensors in place: host code
  Tensor t = iota2d(3, 4);
  Tensor tt = t.transpose(0, 1);
  EXPECT_EQ(tt.shape(), (Shape{4, 3}));
  EXPECT_EQ(tt.strides(), (Shape{1, 4}));
  EXPECT_FALSE(tt.is_contiguous());
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(at(tt, i, j), 100.0 * j + i);
  Tensor t3 = Tensor::zeros({2, 3, 5}, DType::f32).transpose(-1, 0);
  EXPECT_EQ(t3.shape(), (Shape{5, 3, 2}));
  EXPECT_EQ(t3.strides(), (Shape{1, 5, 15}));
  EXPECT_EQ(t3.size(-1), 2);
  EXPECT_EQ(t3.stride(-1), 15);
  EXPECT_TRUE(throws_with_location([&] { t.transpose(0, 2); }, "tensor.cpp"));
  EXPECT_TRUE(throws_with_location([&] { (void)t.size(2); }, "tensor.cpp"));
}

TEST(Tensor, CopyFromStridedAcrossDtypes) {
  const tessel::testing::HostAccess host;  // the test reads and writes tensors in place: host code
  // Source: the transpose of a column slice (strides neither row- nor column-contiguous).
  Tensor base = iota2d(6, 9);
  Tensor src = base.slice(1, 2, 7).transpose(0, 1);  // [5, 6], (i, j) = 100 j + (2 + i)
  for (DType dt : {DType::f32, DType::bf16, DType::f16, DType::i32, DType::i64}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    Tensor dst = Tensor::zeros({5, 6}, dt);
    dst.copy_from(src);
    for (int64_t i = 0; i < 5; ++i)
      for (int64_t j = 0; j < 6; ++j) {
        const float v = float(100 * j + 2 + i);
        // Expected: the value rounded to nearest-even in the destination format.
        const double want = dt == DType::bf16 ? double(float(bf16(v))) : dt == DType::f16 ? double(float(f16(v))) : double(v);
        EXPECT_EQ(at(dst, i, j), want) << i << "," << j;
      }
    // And back to f32 into a strided destination.
    Tensor back_base = Tensor::zeros({6, 9}, DType::f32);
    Tensor back = back_base.slice(1, 2, 7).transpose(0, 1);
    back.copy_from(dst);
    for (int64_t i = 0; i < 5; ++i)
      for (int64_t j = 0; j < 6; ++j) EXPECT_EQ(at(back, i, j), at(dst, i, j));
    EXPECT_EQ(at(back_base, 0, 0), 0.0);  // outside the view untouched
    EXPECT_EQ(at(back_base, 5, 8), 0.0);
  }
  // bf16 rounding in the contiguous fast path: 257 is a tie between 256 and 258 -> 256 (even).
  Tensor f = Tensor::empty({3}, DType::f32);
  f.data<float>()[0] = 257.0f;
  f.data<float>()[1] = 259.0f;  // tie between 258 and 260 -> 260
  f.data<float>()[2] = -0.0f;
  Tensor b = Tensor::empty({3}, DType::bf16);
  b.copy_from(f);
  EXPECT_EQ(float(b.data<bf16>()[0]), 256.0f);
  EXPECT_EQ(float(b.data<bf16>()[1]), 260.0f);
  EXPECT_EQ(b.data<bf16>()[2].bits, 0x8000);
  // fp8 with saturation.
  Tensor big = Tensor::empty({2}, DType::f32);
  big.data<float>()[0] = 1000.0f;
  big.data<float>()[1] = -3.3f;
  Tensor e4 = big.to(DType::e4m3);
  EXPECT_EQ(float(e4.data<fp8_e4m3>()[0]), 448.0f);
  EXPECT_EQ(float(e4.data<fp8_e4m3>()[1]), -3.25f);
  EXPECT_TRUE(throws_with_location([&] { Tensor::zeros({6, 5}, DType::f32).copy_from(src); }, "tensor.cpp"));
}

// Copies whose rows are dense (column slices, a head's columns of a fused buffer) take one memcpy
// per row; checked element by element against the source, in 2-D and 3-D, same and other storage.
TEST(Tensor, CopyFromRowDenseSlices) {
  const tessel::testing::HostAccess host;  // the test reads and writes tensors in place: host code
  for (DType dt : {DType::f32, DType::bf16, DType::i64}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    Tensor src_base = Tensor::zeros({6, 9}, dt);
    src_base.copy_from(iota2d(6, 9));
    const Tensor src = src_base.slice(1, 2, 7);  // [6, 5], strides (9, 1): (i, j) = 100 i + 2 + j
    Tensor dst_base = Tensor::zeros({6, 11}, dt);
    Tensor dst = dst_base.slice(1, 3, 8);  // [6, 5], strides (11, 1)
    dst.copy_from(src);
    // The value in the dtype (bf16 rounds 303 to 304, nearest even).
    const auto value = [dt](double v) { return dt == DType::bf16 ? double(float(bf16(float(v)))) : v; };
    for (int64_t i = 0; i < 6; ++i) {
      for (int64_t j = 0; j < 5; ++j) EXPECT_EQ(at(dst, i, j), value(100.0 * i + 2 + j)) << i << "," << j;
      for (int64_t j : {0, 1, 2, 8, 9, 10}) EXPECT_EQ(at(dst_base, i, j), 0.0) << "outside the view: " << i << "," << j;
    }
    // Within one storage (no fast path: the views could overlap): columns 2..6 onto columns 0..4.
    src_base.slice(1, 0, 5).copy_from(src_base.slice(1, 2, 7));
    for (int64_t i = 0; i < 6; ++i)
      for (int64_t j = 0; j < 5; ++j) EXPECT_EQ(at(src_base, i, j), value(100.0 * i + 2 + j)) << i << "," << j;
  }
  // 3-D: [2, 3, 4] slices of [2, 3, 7] into [2, 3, 4] slices of [2, 5, 4] (the middle dimension strided).
  Tensor a = Tensor::empty({2, 3, 7}, DType::f32), b = Tensor::zeros({2, 5, 4}, DType::f32);
  for (int64_t i = 0; i < a.numel(); ++i) a.data<float>()[i] = float(i);
  b.slice(1, 1, 4).copy_from(a.slice(2, 3, 7));
  for (int64_t x = 0; x < 2; ++x)
    for (int64_t y = 0; y < 5; ++y)
      for (int64_t z = 0; z < 4; ++z) {
        const float want = y >= 1 && y < 4 ? float(x * 21 + (y - 1) * 7 + 3 + z) : 0.0f;
        EXPECT_EQ(b.data<float>()[(x * 5 + y) * 4 + z], want) << x << "," << y << "," << z;
      }
  // bf16 to f32, contiguous: exact.
  Tensor h = Tensor::empty({3}, DType::bf16);
  h.data<bf16>()[0] = bf16(1.5f);
  h.data<bf16>()[1] = bf16(-256.0f);
  h.data<bf16>()[2].bits = 0x0001;  // the smallest subnormal
  Tensor w = h.to(DType::f32);
  EXPECT_EQ(w.data<float>()[0], 1.5f);
  EXPECT_EQ(w.data<float>()[1], -256.0f);
  EXPECT_EQ(w.data<float>()[2], float(h.data<bf16>()[2]));
  EXPECT_GT(w.data<float>()[2], 0.0f);
}

// Two views of one buffer through distinct Storage objects (from_blob here; a strict-mode kernel's
// borrowed views likewise) whose rows overlap across rows: every destination row must get the
// source's values as they were before the copy, not values an earlier row has already written.
// Destination rows 1..5, columns 0..7 <- source rows 0..4, columns 1..8 of a [6, 9] buffer: row r
// (buffer row r + 1) reads source row r + 1's bytes shifted by one, after row r has written them.
template <class T>
void check_overlapping_copy(DType dtype, T first) {
  std::vector<T> buf(6 * 9);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = T(first + T(i));
  const std::vector<T> before = buf;
  const Tensor a = Tensor::from_blob(buf.data(), {6, 9}, dtype);
  Tensor b = Tensor::from_blob(buf.data(), {6, 9}, dtype);
  b.slice(0, 1, 6).slice(1, 0, 8).copy_from(a.slice(0, 0, 5).slice(1, 1, 9));
  for (int64_t r = 0; r < 5; ++r)
    for (int64_t c = 0; c < 8; ++c) EXPECT_EQ(buf[size_t((r + 1) * 9 + c)], before[size_t(r * 9 + c + 1)]) << r << "," << c;
  EXPECT_EQ(buf[8], before[8]);                  // row 0 untouched
  EXPECT_EQ(buf[1 * 9 + 8], before[1 * 9 + 8]);  // column 8 of the destination rows untouched
}

TEST(Tensor, CopyFromOverlappingViewsOfOneBufferReadsTheValuesBeforeTheCopy) {
  check_overlapping_copy<float>(DType::f32, 0.0f);
  // The staged copy of one dtype keeps every bit: i64 values above 2^53, which a double would round.
  check_overlapping_copy<int64_t>(DType::i64, int64_t(1) << 60);
}

TEST(Tensor, ToAndCloneAreIndependentCopies) {
  const tessel::testing::HostAccess host;  // the test reads and writes tensors in place: host code
  Tensor t = iota2d(3, 4);
  Tensor c = t.clone();
  EXPECT_NE(c.raw(), t.raw());
  EXPECT_EQ(c.shape(), t.shape());
  t.data<float>()[0] = 42.0f;
  EXPECT_EQ(c.data<float>()[0], 0.0f);
  c.data<float>()[1] = -5.0f;
  EXPECT_EQ(t.data<float>()[1], 1.0f);
  // Clone of a strided view is contiguous with the view's values.
  Tensor v = t.transpose(0, 1).clone();
  EXPECT_TRUE(v.is_contiguous());
  EXPECT_EQ(v.shape(), (Shape{4, 3}));
  EXPECT_EQ(at(v, 3, 2), 203.0);
  Tensor b = t.to(DType::bf16);
  EXPECT_EQ(b.dtype(), DType::bf16);
  EXPECT_NE(b.raw(), t.raw());
  EXPECT_EQ(at(b, 2, 3), 203.0);
  Tensor i64 = t.to(DType::i64);
  EXPECT_EQ(static_cast<const int64_t*>(i64.raw())[11], 203);
}

TEST(Tensor, FillItemAndTypedAccess) {
  const tessel::testing::HostAccess host;  // the test reads and writes tensors in place: host code
  Tensor t = Tensor::empty({2, 3}, DType::f16);
  t.fill(1.5);
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(at(t, i, j), 1.5);
  Tensor x = iota2d(4, 4);
  x.slice(1, 1, 2).fill(-7);  // one column of a strided view
  EXPECT_EQ(at(x, 2, 1), -7.0);
  EXPECT_EQ(at(x, 2, 2), 202.0);
  EXPECT_EQ(x.slice(0, 3, 4).slice(1, 2, 3).item(), 302.0);
  Tensor one = Tensor::zeros({1, 1}, DType::i64);
  static_cast<int64_t*>(one.raw())[0] = int64_t(1) << 40;
  EXPECT_EQ(one.item(), double(int64_t(1) << 40));
  EXPECT_TRUE(throws_with_location([&] { (void)x.item(); }, "tensor.cpp"));
  EXPECT_TRUE(throws_with_location([&] { (void)x.data<bf16>(); }, "tensor.h"));  // dtype check in the header
  EXPECT_TRUE(throws_with_location([&] { Tensor::empty({2, -3}, DType::f32); }, "tensor.cpp"));
}

TEST(Tensor, FromBlobIsANonOwningView) {
  std::vector<float> buf(12);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = float(i);
  {
    Tensor t = Tensor::from_blob(buf.data(), {3, 4}, DType::f32);
    EXPECT_EQ(t.raw(), buf.data());
    EXPECT_EQ(at(t, 2, 1), 9.0);
    t.data<float>()[0] = 99.0f;
  }  // destroying the view must not free buf
  EXPECT_EQ(buf[0], 99.0f);
  buf[5] = -1.0f;
  EXPECT_EQ(buf[5], -1.0f);
}

}  // namespace
}  // namespace tessel
