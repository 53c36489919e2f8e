#include "tessel/nn/linear.h"

#include "tessel/core/profiler.h"
#include "tessel/kernels/cast.h"
#include "tessel/kernels/gemm.h"
#include "tessel/nn/sequence_parallel.h"

namespace tessel::nn {

Linear::Linear(ParamStore& ps, std::vector<Part> parts, int64_t in, bool bias, float init_std, TensorParallel tp)
    : ps_(ps), tp_(tp), in_(in) {
  TESSEL_CHECK(!parts.empty(), "Linear needs at least one part");
  const bool column = this->column();
  const bool row = this->row();
  const int r = sharded() ? tp.group->rank() : 0, n = sharded() ? tp.group->size() : 1;
  if (row) {
    TESSEL_CHECK(in % n == 0, "row-parallel '{}': {} input features do not split over {} ranks", parts[0].name, in, n);
    in_ = in / n;
  }
  // Part p is cut into `shards` slices; this rank holds slice r / (n / shards) (replicated when shards < n).
  auto shards_of = [&](const Part& p) { return column && p.max_shards > 0 && p.max_shards < n ? int(p.max_shards) : n; };
  auto add = [&](const Part& p, const std::string& name, const Shape& global, int dim, Init init, float std, bool wd) {
    if (!column && !(row && dim == 1)) return ps.add(name, global, init, std, wd);
    const int shards = shards_of(p), per = n / shards;
    TESSEL_CHECK(n % shards == 0, "'{}': {} shards do not spread evenly over {} tensor-parallel ranks", name, shards, n);
    const int64_t off = ps.add_shard(name, global, dim, r / per, shards, init, std, wd);
    if (per > 1) ps.set_replica(off, per, r % per);
    return off;
  };
  for (const auto& p : parts) {
    // Shards of adjacent parts stay adjacent: the local fused weight is [part0 rows; part1 rows; ...].
    const int64_t off = add(p, p.name + ".weight", {p.out, in}, row ? 1 : 0, Init::normal, init_std, true);
    if (w_offset_ < 0) w_offset_ = off;
    out_ += column ? p.out / shards_of(p) : p.out;
  }
  if (bias)
    for (const auto& p : parts) {
      const int64_t off = add(p, p.name + ".bias", {p.out}, 0, Init::zeros, 0.0f, false);
      if (b_offset_ < 0) b_offset_ = off;
    }
  key_x_ = parts[0].name + ".x";
  key_dy_ = parts[0].name + ".dy";
}

Tensor Linear::forward(const Tensor& x, Activations& saved) const {
  TESSEL_CHECK(x.dim() == 2 && x.size(1) == in_, "Linear '{}': input {} does not have {} features", key_x_, x.str(),
               in_);
  const DType cd = ps_.compute_dtype();
  Tensor xc = x.dtype() == cd ? x : x.to(cd);
  if (column() && sequence()) xc = sequence_all_gather(xc, *tp_.group);  // this rank's rows -> all rows
  Tensor y = Tensor::empty({xc.size(0), out_}, DType::f32);
  const float* bias = b_offset_ >= 0 ? ps_.params_data() + b_offset_ : nullptr;
  {
    ProfileScope ps("gemm_fwd", 2.0 * double(xc.size(0)) * double(in_) * double(out_));
    kernels::matmul(xc, false, ps_.compute_at(w_offset_, {out_, in_}), true, y, false, row() ? nullptr : bias);
  }
  if (row()) {  // partial sums over this rank's input columns; the replicated bias once, after
    if (sequence()) {
      y = sequence_reduce_scatter(y, *tp_.group);
    } else {
      ProfileScope ps("tp_all_reduce");
      tp_.group->all_reduce(y.raw(), y.numel(), DType::f32, comm::ReduceOp::sum);
    }
    if (bias) {
      float* yp = y.data<float>();
      for (int64_t i = 0; i < y.size(0); ++i)
        for (int64_t j = 0; j < out_; ++j) yp[i * out_ + j] += bias[j];
    }
  }
  saved.put(key_x_, xc);
  return y;
}

Tensor Linear::backward_input(const Tensor& dy, Activations& saved) const {
  const DType cd = ps_.compute_dtype();
  Tensor dyc = dy;
  if (dy.dtype() != cd) {
    ProfileScope ps("cast");
    dyc = Tensor::empty(dy.shape(), cd);
    kernels::cast_f32_to_bf16(dy.numel(), dy.data<float>(), dyc.data<bf16>());
  }
  if (row() && sequence()) dyc = sequence_all_gather(dyc, *tp_.group);  // this rank's rows -> all rows
  Tensor dx = Tensor::empty({dyc.size(0), in_}, DType::f32);
  {
    ProfileScope ps("gemm_dgrad", 2.0 * double(dyc.size(0)) * double(in_) * double(out_));
    kernels::matmul(dyc, false, ps_.compute_at(w_offset_, {out_, in_}), false, dx, false);
  }
  if (column()) {  // each rank's output columns contribute to dx
    if (sequence()) {
      dx = sequence_reduce_scatter(dx, *tp_.group);
    } else {
      ProfileScope ps("tp_all_reduce");
      tp_.group->all_reduce(dx.raw(), dx.numel(), DType::f32, comm::ReduceOp::sum);
    }
  }
  saved.put(key_dy_, dyc);
  return dx;
}

void Linear::backward_weight(Activations& saved) const {
  const Tensor& x = saved.get(key_x_);
  const Tensor& dy = saved.get(key_dy_);
  {
    ProfileScope ps("gemm_wgrad", 2.0 * double(dy.size(0)) * double(in_) * double(out_));
    kernels::matmul(dy, true, x, false, ps_.grad_at(w_offset_, {out_, in_}), true);
  }
  if (b_offset_ >= 0) {
    ProfileScope ps("bias_grad");
    float* db = ps_.grads_data() + b_offset_;
    // A row-parallel bias under sequence parallelism: this rank's rows only (summed over the group
    // with the other replicated parameters' gradients).
    const int64_t rows = row() && sequence() ? dy.size(0) / tp_.group->size() : dy.size(0);
    const int64_t first = row() && sequence() ? rows * tp_.group->rank() : 0;
    if (dy.dtype() == DType::f32)
      kernels::column_sum_accumulate(rows, out_, dy.data<float>() + first * out_, db);
    else
      kernels::column_sum_accumulate(rows, out_, dy.data<bf16>() + first * out_, db);
  }
  saved.erase(key_x_);
  saved.erase(key_dy_);
}

}  // namespace tessel::nn
