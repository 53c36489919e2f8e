#pragma once
// Tensor: a typed, strided view over reference-counted, 64-byte aligned host storage.
// Owning tensors allocate their storage; views (slice, transpose, reshape, from_blob) share it.
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "tessel/core/check.h"
#include "tessel/core/dtype.h"

namespace tessel {

using Shape = std::vector<int64_t>;

std::string shape_str(const Shape& s);
int64_t shape_numel(const Shape& s);

// 64-byte aligned allocation (one cache line, one AVX-512 register).
struct Storage {
  explicit Storage(size_t bytes);
  Storage(void* external, size_t bytes);  // non-owning
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* ptr = nullptr;
  size_t bytes = 0;
  bool owned = true;
};

class Tensor {
 public:
  Tensor() = default;
  static Tensor empty(const Shape& shape, DType dtype);
  static Tensor zeros(const Shape& shape, DType dtype);
  // A view over memory owned by someone else (e.g. a slice of a flat parameter buffer).
  static Tensor from_blob(void* data, const Shape& shape, DType dtype);

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int64_t dim() const { return int64_t(shape_.size()); }
  int64_t size(int64_t d) const;
  int64_t stride(int64_t d) const;
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype_); }
  bool is_contiguous() const;

  void* raw() const { return static_cast<char*>(storage_->ptr) + offset_; }
  template <class T>
  T* data() const {
    TESSEL_CHECK(dtype_of<T>() == dtype_, "tensor holds {}, accessed as {}", dtype_name(dtype_),
                 dtype_name(dtype_of<T>()));
    return static_cast<T*>(raw());
  }

  // Views (no copy).
  Tensor reshape(const Shape& shape) const;                  // contiguous tensors only; one -1 allowed
  Tensor slice(int64_t d, int64_t begin, int64_t end) const;  // [begin, end) along dimension d
  Tensor transpose(int64_t d0, int64_t d1) const;

  Tensor clone() const;       // contiguous deep copy
  Tensor to(DType t) const;   // converting contiguous copy (RNE for narrowing floats)
  void copy_from(const Tensor& src);  // same shape; converts dtype
  void fill(double v);

  double item() const;  // one-element tensor as double
  std::string str() const;  // "f32[2, 3]"

 private:
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;  // bytes
  Shape shape_;
  Shape strides_;  // in elements
  DType dtype_ = DType::f32;
};

}  // namespace tessel
