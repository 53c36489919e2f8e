#pragma once
// Tensor: a typed, strided view over reference-counted storage on a device (core/device.h).
// Owning tensors allocate their storage from the device's allocator, accounted under the calling
// thread's memory category (core/memory.h); views (slice, transpose, reshape) share it; from_blob
// wraps host memory owned by someone else. Storage on `cpu` is 64-byte aligned host memory; on
// `meta` there is none, and every access to the data is refused.
#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "tessel/core/check.h"
#include "tessel/core/device.h"
#include "tessel/core/dtype.h"
#include "tessel/core/memory.h"

namespace tessel {

using Shape = std::vector<int64_t>;

std::string shape_str(const Shape& s);
int64_t shape_numel(const Shape& s);

// One allocation of a device (64-byte aligned on the cpu: one cache line, one AVX-512 register).
struct Storage {
  Storage(size_t bytes, Device device, MemoryCategory category);
  Storage(void* external, size_t bytes);  // non-owning host memory
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* ptr = nullptr;    // the data; nullptr on meta
  void* block = nullptr;  // the allocator's block: ptr, or on meta the address the meta pool made up
                          // (null under a MetaPoolOffScope)
  size_t bytes = 0;
  bool owned = true;
  Device device = Device::cpu;
  MemoryCategory category = MemoryCategory::activations;
};

class Tensor {
 public:
  Tensor() = default;
  // On `device`, or on default_device() when none is named.
  static Tensor empty(const Shape& shape, DType dtype);
  static Tensor empty(const Shape& shape, DType dtype, Device device);
  static Tensor zeros(const Shape& shape, DType dtype);
  static Tensor zeros(const Shape& shape, DType dtype, Device device);
  // A view over memory owned by someone else (e.g. a slice of a flat parameter buffer).
  static Tensor from_blob(void* data, const Shape& shape, DType dtype);

  bool defined() const { return storage_ != nullptr; }
  Device device() const { return storage_ ? storage_->device : Device::cpu; }
  bool is_meta() const { return device() == Device::meta; }
  // Memory owned by someone else (from_blob, borrow): host memory, reachable from host code.
  bool is_host_memory() const { return storage_ && !storage_->owned; }
  MemoryCategory memory_category() const { return storage_ ? storage_->category : MemoryCategory::activations; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  Shape strides() const;
  int64_t dim() const { return int64_t(shape_.size()); }
  int64_t size(int64_t d) const;
  int64_t stride(int64_t d) const;
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype_); }
  bool is_contiguous() const;

  // The data, for host code and cpu kernels. A meta tensor has none: refused with the tensor named.
  // In strict cpu mode (core/device.h) only inside a DeviceAccessScope, for memory the allocator owns.
  void* raw() const {
    if (storage_->device == Device::meta) refuse_meta_access();
    if (storage_->owned && strict_cpu() && !in_device_access()) refuse_host_access();
    return static_cast<char*>(storage_->ptr) + offset_;
  }
  // Where the data lives in its device's memory, for a kernel or a collective to use (a CUDA
  // pointer on a GPU; null on meta, whose collectives move nothing). Host code never reads through it.
  void* device_ptr() const { return storage_ && storage_->ptr ? static_cast<char*>(storage_->ptr) + offset_ : nullptr; }
  template <class T>
  T* data() const {
    TESSEL_CHECK(dtype_of<T>() == dtype_, "tensor holds {}, accessed as {}", dtype_name(dtype_),
                 dtype_name(dtype_of<T>()));
    return static_cast<T*>(raw());
  }

  // Views (no copy).
  // The same view without ownership of the memory: what a kernel launched on the cpu queue
  // (core/device_queue.h) captures, so that freeing stays where the host frees (and its accounting
  // with it); the memory itself goes back to the pool in queue order, after the kernel.
  Tensor borrow() const;
  Tensor reshape(const Shape& shape) const;                  // contiguous tensors only; one -1 allowed
  Tensor slice(int64_t d, int64_t begin, int64_t end) const;  // [begin, end) along dimension d
  Tensor transpose(int64_t d0, int64_t d1) const;

  // Copies on the same device (on meta: the new storage is accounted, nothing is copied).
  Tensor clone() const;       // contiguous deep copy
  Tensor to(DType t) const;   // converting contiguous copy (RNE for narrowing floats)
  void copy_from(const Tensor& src);  // same shape and device; converts dtype
  void fill(double v);

  double item() const;  // one-element tensor as double (cpu only)
  std::string str() const;  // "f32[2, 3]", "f32[2, 3] on meta"

 private:
  void copy_elements_from(const Tensor& src);  // copy_from's work, on the device
  [[noreturn]] void refuse_meta_access() const;
  [[noreturn]] void refuse_host_access() const;
  static void check_dims(const Shape& shape);  // at most kMaxDims, or an error naming the shape
  void set_contiguous_strides();  // of shape_ (at most kMaxDims dimensions)

  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;  // bytes
  Shape shape_;
  // In elements; the first dim() are the tensor's. Held in the tensor, not on the heap: a tensor is
  // copied for every view and kernel argument, and a dry run makes millions of them.
  static constexpr size_t kMaxDims = 8;
  std::array<int64_t, kMaxDims> strides_{};
  DType dtype_ = DType::f32;
};

}  // namespace tessel
