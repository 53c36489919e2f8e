#include "tessel/nn/params.h"

#include <cstring>

#include "tessel/core/machine_memory.h"
#include "tessel/core/rng.h"
#include "tessel/kernels/cast.h"

namespace tessel::nn {

int64_t ParamStore::add(const std::string& name, const Shape& shape, Init init, float std, bool weight_decay) {
  TESSEL_CHECK(!finalized_, "parameter '{}' registered after the store was finalized", name);
  TESSEL_CHECK(by_name_.emplace(name, specs_.size()).second, "parameter '{}' registered twice", name);
  by_offset_.emplace(total_, specs_.size());
  const int64_t n = shape_numel(shape);
  specs_.push_back({name, shape, init, std, weight_decay, total_, n, shape, Shape(shape.size(), 0)});
  total_ += n;
  return total_ - n;
}

ParamSpec& ParamStore::spec_at_offset(int64_t offset, const char* caller) {
  const auto it = by_offset_.find(offset);
  TESSEL_CHECK(it != by_offset_.end(), "{}: no parameter at offset {}", caller, offset);
  return specs_[it->second];
}

void ParamStore::set_replica(int64_t offset, int replicas, int replica) {
  ParamSpec& s = spec_at_offset(offset, "set_replica");
  s.replicas = replicas;
  s.replica = replica;
}

void ParamStore::mark_expert_range(int64_t begin, int64_t end) {
  for (auto& s : specs_)
    if (s.offset >= begin && s.offset < end) s.expert = true;
}

void ParamStore::mark_tied_copy(int64_t offset) { spec_at_offset(offset, "mark_tied_copy").tied_copy = true; }

int64_t ParamStore::add_shard(const std::string& name, const Shape& global_shape, int dim, int part, int parts,
                              Init init, float std, bool weight_decay) {
  TESSEL_CHECK(dim >= 0 && dim < int(global_shape.size()) && parts > 0 && part >= 0 && part < parts,
               "parameter '{}': shard {} of {} along dimension {} of {}", name, part, parts, dim, shape_str(global_shape));
  TESSEL_CHECK(global_shape[size_t(dim)] % parts == 0,
               "parameter '{}': dimension {} of {} is not divisible by the tensor-parallel size {}", name, dim,
               shape_str(global_shape), parts);
  Shape local = global_shape;
  local[size_t(dim)] /= parts;
  const int64_t off = add(name, local, init, std, weight_decay);
  specs_.back().global_shape = global_shape;
  specs_.back().slice_begin[size_t(dim)] = local[size_t(dim)] * part;
  return off;
}

void ParamStore::finalize() {
  TESSEL_CHECK(!finalized_, "ParamStore finalized twice");
  const int64_t bytes_per_param = 2 * 4 + (compute_ == DType::f32 ? 0 : int64_t(dtype_size(compute_)));
  // On the meta device nothing is allocated: a dry run reports what would not fit instead.
  if (default_device() != Device::meta)
    check_fits_in_memory(double(total_) * double(bytes_per_param), "the model",
                       fmt::format("{} parameters x {} bytes: fp32 weights and gradients{}, before optimizer state "
                                   "and activations", total_, bytes_per_param,
                                   compute_ == DType::f32 ? "" : ", the compute copy"),
                       "reduce the model sizes or split the model over more ranks (tensor / pipeline parallelism)");
  finalized_ = true;
  {
    MemoryCategoryScope tag(MemoryCategory::parameters);
    params_ = Tensor::zeros({total_}, DType::f32);
    if (compute_ != DType::f32) compute_copy_ = Tensor::zeros({total_}, compute_);
  }
  MemoryCategoryScope tag(MemoryCategory::gradients);
  grads_ = Tensor::zeros({total_}, DType::f32);
}

const ParamSpec& ParamStore::spec(const std::string& name) const {
  const auto it = by_name_.find(name);
  TESSEL_CHECK(it != by_name_.end(), "no parameter named '{}'", name);
  return specs_[it->second];
}

void init_param_slice(const ParamSpec& spec, uint64_t seed, int64_t row_begin, int64_t rows, int64_t col_begin,
                      int64_t cols, float* out) {
  const int64_t global_cols = spec.global_shape.empty() ? 1 : spec.global_shape.back();
  switch (spec.init) {
    case Init::ones: std::fill_n(out, rows * cols, 1.0f); break;
    case Init::zeros: std::fill_n(out, rows * cols, 0.0f); break;
    case Init::normal:
      fill_normal_slice(seed, stream_id(spec.name), global_cols, row_begin, rows, col_begin, cols, 0.0f, spec.std,
                        out);
      break;
  }
}

void ParamStore::initialize(uint64_t seed) {
  TESSEL_CHECK(finalized_, "ParamStore::initialize before finalize");
  {
    // Drawn on the host and written to the device (an upload; a device would draw them in a kernel).
    const DeviceAccessScope copy_to_device;
    for (const auto& s : specs_) {
      if (params_.is_meta()) break;  // no values to draw (the compute copy's refresh below is still a kernel call)
      // Rows and columns of this (possibly sharded) tensor inside the global [R, C] (1-D: [1, C]).
      const bool two_d = s.shape.size() == 2;
      const int64_t cols = s.shape.empty() ? 1 : s.shape.back();
      const int64_t row0 = two_d ? s.slice_begin[0] : 0;
      const int64_t col0 = s.slice_begin.empty() ? 0 : s.slice_begin.back();
      init_param_slice(s, seed, row0, s.numel / cols, col0, cols, params_data() + s.offset);
    }
  }
  refresh_compute_copy();
}

// A view of `shape` at an element offset of a flat buffer: shares its storage, so it keeps the
// buffer's device (a meta parameter's view is meta) and keeps the buffer alive.
static Tensor view_of(const Tensor& flat, int64_t offset, const Shape& shape, int64_t total) {
  TESSEL_CHECK(offset >= 0 && offset + shape_numel(shape) <= total, "parameter view {} at {} exceeds the {} elements",
               shape_str(shape), offset, total);
  return flat.slice(0, offset, offset + shape_numel(shape)).reshape(shape);
}

Tensor ParamStore::param_at(int64_t offset, const Shape& shape) const { return view_of(params_, offset, shape, total_); }
Tensor ParamStore::grad_at(int64_t offset, const Shape& shape) const { return view_of(grads_, offset, shape, total_); }
Tensor ParamStore::compute_at(int64_t offset, const Shape& shape) const {
  return view_of(compute_ == DType::f32 ? params_ : compute_copy_, offset, shape, total_);
}
Tensor ParamStore::param(const std::string& name) const {
  const auto& s = spec(name);
  return param_at(s.offset, s.shape);
}
Tensor ParamStore::grad(const std::string& name) const {
  const auto& s = spec(name);
  return grad_at(s.offset, s.shape);
}

void ParamStore::zero_grads() {
  const DeviceAccessScope device_op;  // a memset on the device
  if (!grads_.is_meta()) std::memset(grads_.raw(), 0, grads_.nbytes());
}

void ParamStore::refresh_compute_copy() {
  mark_updated();
  if (compute_ == DType::bf16) kernels::cast(params_, compute_copy_);
}

}  // namespace tessel::nn
