#include "tessel/nn/params.h"

#include <algorithm>
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

void ParamStore::mark_f32_compute(int64_t offset) {
  TESSEL_CHECK(!finalized_, "mark_f32_compute after the store was finalized");
  spec_at_offset(offset, "mark_f32_compute").f32_compute = true;
}

std::vector<int64_t> ParamStore::shard_counts(int64_t numel, int parts) {
  TESSEL_CHECK(parts >= 1, "shard_counts: {} parts", parts);
  const int64_t d = parts, per = (numel + d - 1) / d;
  std::vector<int64_t> c;
  for (int64_t r = 0; r < d; ++r) c.push_back(std::max<int64_t>(0, std::min(numel, (r + 1) * per) - r * per));
  return c;
}

int64_t ParamStore::f32_copy_unit_begin(size_t unit) const {
  TESSEL_CHECK(sharded_, "f32_copy_unit_begin: the masters are not sharded (there is no packed fp32 copy)");
  TESSEL_CHECK(unit < f32_unit_begin_.size(), "f32_copy_unit_begin: no unit {}", unit);
  return f32_unit_begin_[unit];
}

std::vector<int64_t> ParamStore::f32_copy_counts(size_t unit) const {
  TESSEL_CHECK(sharded_, "f32_copy_counts: the masters are not sharded (there is no packed fp32 copy)");
  TESSEL_CHECK(unit < f32_counts_.size(), "f32_copy_counts: no unit {}", unit);
  return f32_counts_[unit];
}

void ParamStore::refuse_whole_masters(int64_t offset, const char* what) const {
  const auto it = offset >= 0 ? by_offset_.find(offset) : by_offset_.end();
  TESSEL_FAIL("{}{}: the fp32 master weights are sharded over the distributed optimizer's ranks (this rank holds "
              "elements {}): read masters() for them, f32_at() for a parameter computed in fp32",
              what, it == by_offset_.end() ? std::string() : " of '" + specs_[it->second].name + "'",
              shard_.describe());
}

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

void ParamStore::finalize(MasterShard shard, MasterShard expert_shard) {
  TESSEL_CHECK(!finalized_, "ParamStore finalized twice");
  shard_ = FlatShard(specs_, total_, shard, expert_shard);
  // fp32 runs compute with the masters themselves: they stay whole.
  sharded_ = (shard.size > 1 || expert_shard.size > 1) && compute_ != DType::f32;
  if (sharded_) {
    for (auto& sp : specs_)
      if (sp.f32_compute) {
        sp.f32_offset = f32_total_;
        f32_total_ += sp.numel;
      }
    // Per unit: where its f32_compute elements start in the packed copy, and each rank's of them
    // (contiguous in the packed copy, which is in flat order: the unit's fp32 all-gather blocks).
    // f32_before(x): f32_compute elements at flat indices below x, by binary search over them (a
    // model of thousands of parameters, a unit per run of experts and a block per rank).
    std::vector<const ParamSpec*> f32_specs;
    for (const auto& sp : specs_)
      if (sp.f32_compute) f32_specs.push_back(&sp);
    const auto f32_before = [&](int64_t x) -> int64_t {
      const auto it = std::upper_bound(f32_specs.begin(), f32_specs.end(), x,
                                       [](int64_t at, const ParamSpec* sp) { return at < sp->offset; });
      if (it == f32_specs.begin()) return 0;
      const ParamSpec& last = **std::prev(it);
      return last.f32_offset + std::min(last.numel, x - last.offset);
    };
    const auto f32_in = [&](int64_t fb, int64_t fe) { return f32_before(fe) - f32_before(fb); };
    for (const FlatShard::Unit& u : shard_.units()) {
      f32_unit_begin_.push_back(f32_in(0, u.flat_begin));
      std::vector<int64_t> counts;
      int64_t begin = u.flat_begin;
      for (const int64_t c : u.counts) {
        counts.push_back(f32_in(begin, begin + c));
        begin += c;
      }
      f32_counts_.push_back(std::move(counts));
    }
  }
  const double copy_bytes = compute_ == DType::f32 ? 0.0 : double(dtype_size(compute_));
  const double bytes = sharded_ ? double(total_) * (4 + copy_bytes) + 4.0 * double(shard_.local_numel() + f32_total_)
                                : double(total_) * (8 + copy_bytes);
  // On the meta device nothing is allocated: a dry run reports what would not fit instead.
  if (default_device() != Device::meta)
    check_fits_in_memory(bytes, "the model",
                         fmt::format("{} parameters x {:.3g} bytes: {}fp32 gradients{}, before optimizer "
                                     "state and activations", total_, bytes / double(std::max<int64_t>(1, total_)),
                                     sharded_ ? "this rank's shard of the fp32 masters, the fp32 copy of what computes "
                                                "in fp32, "
                                              : "fp32 weights, ",
                                     compute_ == DType::f32 ? "" : ", the compute copy"),
                         sharded_ ? "reduce the model sizes, split the model over more ranks (tensor / pipeline "
                                    "parallelism) or shard the masters over more data-parallel ranks"
                                  : "reduce the model sizes or split the model over more ranks (tensor / pipeline "
                                    "parallelism)");
  finalized_ = true;
  {
    MemoryCategoryScope tag(MemoryCategory::parameters);
    if (sharded_) {
      masters_ = Tensor::zeros({shard_.local_numel()}, DType::f32);
      f32_copy_ = Tensor::zeros({f32_total_}, DType::f32);
    } else {
      params_ = Tensor::zeros({total_}, DType::f32);
    }
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

// Where (possibly sharded) tensor `s` lies inside its global [R, C] (1-D: [1, C]): rows and columns.
static void draw_initial_values(const ParamSpec& s, uint64_t seed, float* out) {
  const bool two_d = s.shape.size() == 2;
  const int64_t cols = s.shape.empty() ? 1 : s.shape.back();
  const int64_t row0 = two_d ? s.slice_begin[0] : 0;
  const int64_t col0 = s.slice_begin.empty() ? 0 : s.slice_begin.back();
  init_param_slice(s, seed, row0, s.numel / cols, col0, cols, out);
}

void ParamStore::initialize(uint64_t seed) {
  TESSEL_CHECK(finalized_, "ParamStore::initialize before finalize");
  if (sharded_) {
    // Each parameter drawn whole into a staging buffer, then its master part and copies written.
    for (const auto& s : specs_) {
      Tensor values;
      {
        MemoryCategoryScope tag(MemoryCategory::workspace);
        values = Tensor::empty(s.shape, DType::f32);
      }
      if (!values.is_meta()) {
        const DeviceAccessScope copy_to_device;  // drawn on the host (a device would draw them in a kernel)
        draw_initial_values(s, seed, values.data<float>());
      }
      set_values(s, values);
    }
    mark_updated();
    return;
  }
  {
    // Drawn on the host and written to the device (an upload; a device would draw them in a kernel).
    const DeviceAccessScope copy_to_device;
    for (const auto& s : specs_) {
      if (params_.is_meta()) break;  // no values to draw (the compute copy's refresh below is still a kernel call)
      draw_initial_values(s, seed, params_data() + s.offset);
    }
  }
  refresh_compute_copy();
}

void ParamStore::set_values(const ParamSpec& s, const Tensor& values) {
  TESSEL_CHECK(values.shape() == s.shape && values.dtype() == DType::f32, "set_values '{}': {} for f32{}", s.name,
               values.str(), shape_str(s.shape));
  const Tensor flat = values.reshape({s.numel});
  if (!sharded_) {
    params_.slice(0, s.offset, s.offset + s.numel).copy_from(flat);
    if (compute_ != DType::f32) kernels::cast(flat, compute_copy_.slice(0, s.offset, s.offset + s.numel));
    return;
  }
  if (const auto part = shard_.part_of(s))
    masters_.slice(0, part->local_begin, part->local_begin + (part->flat_end - part->flat_begin))
        .copy_from(flat.slice(0, part->flat_begin - s.offset, part->flat_end - s.offset));
  kernels::cast(flat, compute_copy_.slice(0, s.offset, s.offset + s.numel));
  if (s.f32_compute) f32_copy_.slice(0, s.f32_offset, s.f32_offset + s.numel).copy_from(flat);
}

// A view of `shape` at an element offset of a flat buffer: shares its storage, so it keeps the
// buffer's device (a meta parameter's view is meta) and keeps the buffer alive.
static Tensor view_of(const Tensor& flat, int64_t offset, const Shape& shape, int64_t total) {
  TESSEL_CHECK(offset >= 0 && offset + shape_numel(shape) <= total, "parameter view {} at {} exceeds the {} elements",
               shape_str(shape), offset, total);
  return flat.slice(0, offset, offset + shape_numel(shape)).reshape(shape);
}

Tensor ParamStore::param_at(int64_t offset, const Shape& shape) const {
  if (sharded_) refuse_whole_masters(offset, "param_at");
  return view_of(params_, offset, shape, total_);
}
Tensor ParamStore::f32_at(int64_t offset, const Shape& shape) const {
  // The packed copy holds the f32_compute parameters in flat order: a view over several adjacent
  // ones (fused biases) is a view there too when every one of them is f32_compute. Checked unsharded
  // as well, so a reader that was not marked fails in every run, not only in sharded ones.
  const auto it = by_offset_.find(offset);
  TESSEL_CHECK(it != by_offset_.end(), "f32_at: offset {} is not where a parameter starts (views of the fp32 "
               "copy start at a parameter)", offset);
  const ParamSpec& first = specs_[it->second];
  const int64_t n = shape_numel(shape);
  for (size_t i = it->second; i < specs_.size() && specs_[i].offset < offset + n; ++i)
    TESSEL_CHECK(specs_[i].f32_compute, "f32_at: '{}' is not marked f32_compute (mark_f32_compute): with sharded "
                 "masters only marked parameters keep their whole fp32 values", specs_[i].name);
  if (!sharded_) return view_of(params_, offset, shape, total_);
  return view_of(f32_copy_, first.f32_offset, shape, f32_total_);
}
Tensor ParamStore::grad_at(int64_t offset, const Shape& shape) { return view_of(grads_, offset, shape, total_); }
Tensor ParamStore::compute_at(int64_t offset, const Shape& shape) const {
  return view_of(compute_ == DType::f32 ? params_ : compute_copy_, offset, shape, total_);
}
Tensor ParamStore::param(const std::string& name) const {
  const auto& s = spec(name);
  return param_at(s.offset, s.shape);
}
Tensor ParamStore::grad(const std::string& name) {
  const auto& s = spec(name);
  return grad_at(s.offset, s.shape);
}

void ParamStore::zero_grads() {
  const DeviceAccessScope device_op;  // a memset on the device
  if (!grads_.is_meta()) std::memset(grads_.raw(), 0, grads_.nbytes());
}

void ParamStore::refresh_compute_copy() {
  TESSEL_CHECK(!sharded_, "refresh_compute_copy: the masters are sharded; the trainer gathers the copies instead");
  mark_updated();
  if (compute_ == DType::bf16) kernels::cast(params_, compute_copy_);
}

}  // namespace tessel::nn
