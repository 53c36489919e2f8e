#include "tessel/core/tensor.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "tessel/core/device_queue.h"

namespace tessel {

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

Storage::Storage(size_t nbytes, Device d, MemoryCategory c) : bytes(nbytes), device(d), category(c) {
  block = allocator(d).allocate(nbytes, c);
  ptr = d == Device::meta ? nullptr : block;
}
Storage::Storage(void* external, size_t nbytes) : ptr(external), bytes(nbytes), owned(false) {}
Storage::~Storage() {
  if (owned) allocator(device).deallocate(block, bytes, category);
}

// Checked before anything is allocated or viewed for the shape.
void Tensor::check_dims(const Shape& shape) {
  TESSEL_CHECK(shape.size() <= kMaxDims, "tensor shape {} has {} dimensions; at most {} are supported",
               shape_str(shape), shape.size(), kMaxDims);
}

void Tensor::set_contiguous_strides() {
  check_dims(shape_);
  int64_t s = 1;
  for (size_t i = shape_.size(); i-- > 0;) {
    strides_[i] = s;
    s *= shape_[i];
  }
}

Tensor Tensor::empty(const Shape& shape, DType dtype) { return empty(shape, dtype, default_device()); }

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  check_dims(shape);
  for (int64_t d : shape) TESSEL_CHECK(d >= 0, "negative dimension in shape {}", shape_str(shape));
  Tensor t;
  t.storage_ = std::make_shared<Storage>(size_t(shape_numel(shape)) * dtype_size(dtype), device,
                                         current_memory_category());
  t.shape_ = shape;
  t.set_contiguous_strides();
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype) { return zeros(shape, dtype, default_device()); }

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  if (device != Device::meta) launch_on_cpu([z = t.borrow()] { std::memset(z.raw(), 0, z.nbytes()); });  // a memset
  return t;
}

void Tensor::refuse_meta_access() const {
  TESSEL_FAIL("{} is on the meta device, which holds no data: it cannot be read or written (a dry run "
              "computes nothing)",
              str());
}

void Tensor::refuse_host_access() const {
  TESSEL_FAIL("{} was read or written by host code outside a kernel (strict cpu mode, TESSEL_DEVICE=cpu-strict): "
              "device memory is reached through a kernel's dispatch point or an explicit copy",
              str());
}

Tensor Tensor::borrow() const {
  if (!storage_ || !storage_->owned) return *this;
  Tensor t = *this;
  t.storage_ = std::make_shared<Storage>(storage_->ptr, storage_->bytes);
  t.storage_->device = storage_->device;
  t.storage_->category = storage_->category;
  return t;
}

Tensor Tensor::from_blob(void* data, const Shape& shape, DType dtype) {
  check_dims(shape);
  Tensor t;
  t.storage_ = std::make_shared<Storage>(data, size_t(shape_numel(shape)) * dtype_size(dtype));
  t.shape_ = shape;
  t.set_contiguous_strides();
  t.dtype_ = dtype;
  return t;
}

int64_t Tensor::size(int64_t d) const {
  if (d < 0) d += dim();
  TESSEL_CHECK(d >= 0 && d < dim(), "dimension {} out of range for {}", d, str());
  return shape_[size_t(d)];
}

int64_t Tensor::stride(int64_t d) const {
  if (d < 0) d += dim();
  TESSEL_CHECK(d >= 0 && d < dim(), "dimension {} out of range for {}", d, str());
  return strides_[size_t(d)];
}

Shape Tensor::strides() const { return Shape(strides_.begin(), strides_.begin() + long(shape_.size())); }

bool Tensor::is_contiguous() const {
  int64_t s = 1;
  for (size_t i = shape_.size(); i-- > 0;) {
    if (strides_[i] != s) return false;
    s *= shape_[i];
  }
  return true;
}

Tensor Tensor::reshape(const Shape& shape) const {
  TESSEL_CHECK(is_contiguous(), "reshape of a non-contiguous tensor {}", str());
  Shape s = shape;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      TESSEL_CHECK(infer < 0, "reshape {} has more than one -1", shape_str(shape));
      infer = int64_t(i);
    } else {
      known *= s[i];
    }
  }
  if (infer >= 0) s[size_t(infer)] = known ? numel() / known : 0;
  TESSEL_CHECK(shape_numel(s) == numel(), "cannot reshape {} to {}", str(), shape_str(shape));
  Tensor t = *this;
  t.shape_ = std::move(s);
  t.set_contiguous_strides();
  return t;
}

Tensor Tensor::slice(int64_t d, int64_t begin, int64_t end) const {
  if (d < 0) d += dim();
  TESSEL_CHECK(d >= 0 && d < dim(), "slice dimension {} out of range for {}", d, str());
  TESSEL_CHECK(0 <= begin && begin <= end && end <= shape_[size_t(d)], "slice [{}, {}) out of range for dim {} of {}",
               begin, end, d, str());
  Tensor t = *this;
  t.offset_ += size_t(begin * strides_[size_t(d)]) * dtype_size(dtype_);
  t.shape_[size_t(d)] = end - begin;
  return t;
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  if (d0 < 0) d0 += dim();
  if (d1 < 0) d1 += dim();
  TESSEL_CHECK(d0 >= 0 && d0 < dim() && d1 >= 0 && d1 < dim(), "transpose({}, {}) out of range for {}", d0, d1,
               str());
  Tensor t = *this;
  std::swap(t.shape_[size_t(d0)], t.shape_[size_t(d1)]);
  std::swap(t.strides_[size_t(d0)], t.strides_[size_t(d1)]);
  return t;
}

namespace {

double load_as_double(const void* p, DType t) {
  switch (t) {
    case DType::f32: return *static_cast<const float*>(p);
    case DType::bf16: return float(*static_cast<const bf16*>(p));
    case DType::f16: return float(*static_cast<const f16*>(p));
    case DType::e4m3: return float(*static_cast<const fp8_e4m3*>(p));
    case DType::e5m2: return float(*static_cast<const fp8_e5m2*>(p));
    case DType::i32: return *static_cast<const int32_t*>(p);
    case DType::i64: return double(*static_cast<const int64_t*>(p));
  }
  return 0;
}

void store_from_double(void* p, DType t, double v) {
  switch (t) {
    case DType::f32: *static_cast<float*>(p) = float(v); break;
    case DType::bf16: *static_cast<bf16*>(p) = bf16(float(v)); break;
    case DType::f16: *static_cast<f16*>(p) = f16(float(v)); break;
    case DType::e4m3: *static_cast<fp8_e4m3*>(p) = fp8_e4m3(float(v)); break;
    case DType::e5m2: *static_cast<fp8_e5m2*>(p) = fp8_e5m2(float(v)); break;
    case DType::i32: *static_cast<int32_t*>(p) = int32_t(v); break;
    case DType::i64: *static_cast<int64_t*>(p) = int64_t(v); break;
  }
}

// Visits every element of a strided tensor in row-major order, calling f(element_pointer, linear_index).
template <class F>
void for_each_element(const Tensor& t, F&& f) {
  const int64_t n = t.numel(), nd = t.dim();
  const size_t es = dtype_size(t.dtype());
  std::vector<int64_t> idx(size_t(nd), 0);
  const Shape strides = t.strides();
  char* base = static_cast<char*>(t.raw());
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = 0;
    for (int64_t d = 0; d < nd; ++d) off += idx[size_t(d)] * strides[size_t(d)];
    f(base + off * int64_t(es), i);
    for (int64_t d = nd - 1; d >= 0; --d) {
      if (++idx[size_t(d)] < t.shape()[size_t(d)]) break;
      idx[size_t(d)] = 0;
    }
  }
}

// Whether two views' elements can share bytes: their spans [first, last element] meet. Storage
// identity cannot tell: a borrowed view (a strict-mode kernel's) and two from_blob tensors over one
// buffer each have a Storage of their own. Strides are never negative; both views are non-empty.
bool spans_meet(const Tensor& a, const Tensor& b) {
  const auto span = [](const Tensor& t) {  // as integers: pointers into unrelated buffers do not compare
    const auto first = reinterpret_cast<std::uintptr_t>(t.raw());
    int64_t last = 0;
    for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
    return std::make_pair(first, first + std::uintptr_t(last + 1) * dtype_size(t.dtype()));
  };
  const auto [a0, a1] = span(a);
  const auto [b0, b1] = span(b);
  return a0 < b1 && b0 < a1;
}

}  // namespace

void Tensor::copy_from(const Tensor& src) {
  TESSEL_CHECK(src.shape_ == shape_, "copy_from: shape {} into {}", src.str(), str());
  TESSEL_CHECK(src.device() == device(), "copy_from: {} into {} (copies stay on one device)",
               src.is_meta() ? src.str() : src.str() + " on cpu", is_meta() ? str() : str() + " on cpu");
  if (is_meta()) return;
  if (!cpu_launches_queued() || is_host_memory() || src.is_host_memory()) {
    // Host memory of someone else's: copied before the call returns, as a GPU copies pageable memory.
    const DeviceAccessScope host_copy;
    copy_elements_from(src);
    return;
  }
  launch_on_cpu([dst = borrow(), src = src.borrow()]() mutable { dst.copy_elements_from(src); });  // a device copy
}

void Tensor::copy_elements_from(const Tensor& src) {
  if (numel() == 0) return;
  if (src.dtype_ == dtype_ && is_contiguous() && src.is_contiguous()) {
    std::memmove(raw(), src.raw(), nbytes());
    return;
  }
  if (src.dtype_ == DType::f32 && dtype_ == DType::bf16 && is_contiguous() && src.is_contiguous()) {
    const float* s = src.data<float>();
    bf16* d = data<bf16>();
    for (int64_t i = 0, n = numel(); i < n; ++i) d[i] = bf16(s[i]);
    return;
  }
  if (src.dtype_ == DType::bf16 && dtype_ == DType::f32 && is_contiguous() && src.is_contiguous()) {
    const bf16* s = src.data<bf16>();
    float* d = data<float>();
    for (int64_t i = 0, n = numel(); i < n; ++i) d[i] = float(s[i]);
    return;
  }
  // Same dtype, no byte shared, rows dense in both (a column slice, a head's columns): one memcpy
  // per innermost row instead of element by element through doubles.
  const int64_t nd = dim();
  const bool apart = !spans_meet(*this, src);
  if (src.dtype_ == dtype_ && apart && nd >= 1 && strides_[size_t(nd - 1)] == 1 && src.strides_[size_t(nd - 1)] == 1) {
    const int64_t inner = shape_[size_t(nd - 1)], n = numel();
    const size_t es = dtype_size(dtype_), row_bytes = size_t(inner) * es;
    char* d = static_cast<char*>(raw());
    const char* s = static_cast<const char*>(src.raw());
    std::array<int64_t, kMaxDims> idx{};  // the row's index over the outer dimensions
    for (int64_t row = 0, rows = n / inner; row < rows; ++row) {
      int64_t od = 0, os = 0;
      for (int64_t k = 0; k + 1 < nd; ++k) {
        od += idx[size_t(k)] * strides_[size_t(k)];
        os += idx[size_t(k)] * src.strides_[size_t(k)];
      }
      std::memcpy(d + size_t(od) * es, s + size_t(os) * es, row_bytes);
      for (int64_t k = nd - 2; k >= 0; --k) {
        if (++idx[size_t(k)] < shape_[size_t(k)]) break;
        idx[size_t(k)] = 0;
      }
    }
    return;
  }
  // Widening and strided copies element by element. Views whose bytes may meet are staged first.
  if (apart && (is_contiguous() || src.is_contiguous())) {
    if (is_contiguous()) {
      char* d = static_cast<char*>(raw());
      const size_t es = dtype_size(dtype_);
      for_each_element(src, [&](void* p, int64_t i) {
        store_from_double(d + size_t(i) * es, dtype_, load_as_double(p, src.dtype_));
      });
    } else {
      const char* s = static_cast<const char*>(src.raw());
      const size_t es = dtype_size(src.dtype_);
      for_each_element(*this, [&](void* p, int64_t i) {
        store_from_double(p, dtype_, load_as_double(s + size_t(i) * es, src.dtype_));
      });
    }
    return;
  }
  if (src.dtype_ == dtype_) {  // staged as bytes: exact for every dtype (i64 above 2^53 included)
    const size_t es = dtype_size(dtype_);
    std::vector<std::byte> staged(size_t(src.numel()) * es);
    for_each_element(src, [&](void* p, int64_t i) { std::memcpy(staged.data() + size_t(i) * es, p, es); });
    for_each_element(*this, [&](void* p, int64_t i) { std::memcpy(p, staged.data() + size_t(i) * es, es); });
    return;
  }
  std::vector<double> vals(size_t(src.numel()));
  for_each_element(src, [&](void* p, int64_t i) { vals[size_t(i)] = load_as_double(p, src.dtype_); });
  for_each_element(*this, [&](void* p, int64_t i) { store_from_double(p, dtype_, vals[size_t(i)]); });
}

Tensor Tensor::clone() const { return to(dtype_); }

Tensor Tensor::to(DType t) const {
  Tensor out = empty(shape_, t, device());
  out.copy_from(*this);
  return out;
}

void Tensor::fill(double v) {
  if (is_meta()) return;
  const auto fill_elements = [v](const Tensor& t) {
    for_each_element(t, [&](void* p, int64_t) { store_from_double(p, t.dtype_, v); });
  };
  if (!cpu_launches_queued() || is_host_memory()) {
    const DeviceAccessScope on_device;
    fill_elements(*this);
    return;
  }
  launch_on_cpu([t = borrow(), fill_elements] { fill_elements(t); });  // a fill on the device
}

double Tensor::item() const {
  TESSEL_CHECK(numel() == 1, "item() on {} (needs exactly one element)", str());
  const DeviceAccessScope copy_to_host;  // an explicit device-to-host copy of one value
  return load_as_double(raw(), dtype_);
}

std::string Tensor::str() const {
  std::string s = std::string(dtype_name(dtype_)) + shape_str(shape_);
  return is_meta() ? s + " on meta" : s;
}

}  // namespace tessel
