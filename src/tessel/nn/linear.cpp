#include "tessel/nn/linear.h"

#include "tessel/core/profiler.h"
#include "tessel/kernels/cast.h"
#include "tessel/kernels/fp8_quantize.h"
#include "tessel/kernels/gemm.h"
#include "tessel/nn/fp8.h"
#include "tessel/nn/sequence_parallel.h"

namespace tessel::nn {

Linear::Linear(ParamStore& ps, std::vector<Part> parts, int64_t in, bool bias, float init_std, TensorParallel tp)
    : ps_(&ps), tp_(tp), in_(in) {
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
      ps.mark_f32_compute(off);  // added to fp32 outputs
      if (b_offset_ < 0) b_offset_ = off;
    }
  key_x_ = parts[0].name + ".x";
  key_dy_ = parts[0].name + ".dy";
  fp8_ = ps.fp8();
  if (fp8_) {
    const std::string& n = parts[0].name;
    // A routed expert replicated over tensor parallelism may run on one rank and not on another
    // (each routes its own rows under sequence parallelism): no amax collective for it.
    const bool tp_amax = sharded() || !is_routed_expert_name(n);
    slot_x_ = fp8_->add(n + ".x", fp8_->recipe().forward, tp_amax);
    slot_w_ = fp8_->add(n + ".w", fp8_->recipe().forward, tp_amax);
    slot_dy_ = fp8_->add(n + ".dy", fp8_->recipe().backward, tp_amax);
  }
}

namespace {
// An Fp8Tensor kept in Activations as its two tensors.
void put_fp8(Activations& saved, const std::string& key, const kernels::Fp8Tensor& q) {
  saved.put(key + ".fp8", q.data);
  saved.put(key + ".scale_inv", q.scale_inv);
}
kernels::Fp8Tensor take_fp8(Activations& saved, const std::string& key, kernels::Fp8Scaling scaling) {
  kernels::Fp8Tensor q{saved.get(key + ".fp8"), saved.get(key + ".scale_inv"), scaling};
  saved.erase(key + ".fp8");
  saved.erase(key + ".scale_inv");
  return q;
}
}  // namespace

bool Linear::block_scaled() const { return fp8_ && fp8_->recipe().kind == Fp8Recipe::Kind::block; }

const kernels::Fp8Tensor& Linear::quantized_weight() {
  // Quantised once per parameter version and scaling step: every micro-batch of a step reuses it.
  // One quantised during an evaluation recorded no amax (Fp8State::Evaluation): the step's first
  // training use quantises it again, recording it, as it would have without the evaluation.
  const bool stale = wq_version_ != ps_->version() || wq_step_ != fp8_->steps() || !wq_.data.defined();
  if (stale || (wq_unrecorded_ && !fp8_->evaluating())) {
    // bf16 runs quantise the bf16 copy as it is (no fp32 copy of it: widening is exact), as
    // TransformerEngine quantises a bf16 model's weights (and as sharded fp32 masters require:
    // params.h); fp32 runs the fp32 weights.
    wq_ = fp8_->quantize_weight(ps_->compute_at(w_offset_, {out_, in_}), slot_w_);
    wq_version_ = ps_->version();
    wq_step_ = fp8_->steps();
    wq_unrecorded_ = fp8_->evaluating();
  }
  return wq_;
}

MemoryAmount Linear::cached_bytes() const {
  MemoryAmount a;
  for (const Tensor* t : {&wq_.data, &wq_.scale_inv})
    if (t->defined()) {
      a.blocks[size_t(t->memory_category())] += Allocator::accounted_bytes(t->nbytes());
      a.requested[size_t(t->memory_category())] += int64_t(t->nbytes());
    }
  return a;
}

void Linear::add_bias_rows(Tensor& y) const { kernels::add_row_vector(y, ps_->f32_at(b_offset_, {out_})); }

void Linear::accumulate_bias_grad(const Tensor& dy) {
  ProfileScope ps("bias_grad");
  // A row-parallel bias under sequence parallelism: this rank's rows only (summed over the group
  // with the other replicated parameters' gradients).
  const int64_t rows = row() && sequence() ? dy.size(0) / tp_.group->size() : dy.size(0);
  const int64_t first = row() && sequence() ? rows * tp_.group->rank() : 0;
  kernels::column_sum_accumulate(dy.slice(0, first, first + rows), ps_->grad_at(b_offset_, {out_}));
}

Tensor Linear::forward(const LinearInput& in, Activations& saved) {
  const bool bias = b_offset_ >= 0, fused_bias = bias && !row() && !fp8_;
  Tensor y;
  if (in.quantized()) {  // written as FP8 by the producing kernel
    const Fp8Input& q = in.q;
    TESSEL_CHECK(takes_fp8_input() && q.slot == slot_x_ && q.rows.cols() == in_,
                 "Linear '{}': an FP8 input made for another Linear or recipe", key_x_);
    if (q.amax.defined()) fp8_->record_amax(slot_x_, kernels::read_scalar(q.amax));
    y = Tensor::empty({q.rows.rows(), out_}, DType::f32);
    ProfileScope ps("gemm_fwd", 2.0 * double(q.rows.rows()) * double(in_) * double(out_));
    kernels::fp8_gemm(q.rows, false, quantized_weight(), true, y, false);
    put_fp8(saved, key_x_, block_scaled() ? q.cols_t : q.rows);
  } else {
    const Tensor& x = in.x;
    TESSEL_CHECK(x.dim() == 2 && x.size(1) == in_, "Linear '{}': input {} does not have {} features", key_x_, x.str(),
                 in_);
    const DType cd = ps_->compute_dtype();
    Tensor xc = x.dtype() == cd ? x : x.to(cd);
    if (column() && sequence()) xc = sequence_all_gather(xc, *tp_.group);  // this rank's rows -> all rows
    y = Tensor::empty({xc.size(0), out_}, DType::f32);
    ProfileScope ps("gemm_fwd", 2.0 * double(xc.size(0)) * double(in_) * double(out_));
    if (fp8_) {
      const kernels::Fp8Tensor xq = fp8_->quantize_rows(xc, slot_x_, fp8_->recipe().forward);
      kernels::fp8_gemm(xq, false, quantized_weight(), true, y, false);
      // Saved for wgrad in FP8: the same codes (per tensor) or column tiles along the tokens (block).
      put_fp8(saved, key_x_, block_scaled() ? fp8_->quantize_cols_transposed(xc, slot_x_, fp8_->recipe().forward) : xq);
    } else {
      kernels::matmul(xc, false, ps_->compute_at(w_offset_, {out_, in_}), true, y, false,
                      fused_bias ? ps_->f32_at(b_offset_, {out_}) : Tensor());
      saved.put(key_x_, xc);
    }
  }
  if (row()) {  // partial sums over this rank's input columns; the replicated bias once, after
    if (sequence()) {
      y = sequence_reduce_scatter(y, *tp_.group);
    } else {
      ProfileScope ps("tp_all_reduce");
      tp_.group->all_reduce(y.device_ptr(), y.numel(), DType::f32, comm::ReduceOp::sum);
    }
  }
  if (bias && !fused_bias) add_bias_rows(y);
  return y;
}

Tensor Linear::backward_input(const Tensor& dy, Activations& saved) {
  // FP8 quantises the fp32 gradient directly (one rounding, no compute-dtype copy), unless it is
  // all-gathered first (sequence parallelism: the exchange stays in the compute dtype).
  const DType cd = fp8_ && !(row() && sequence()) ? dy.dtype() : ps_->compute_dtype();
  Tensor dyc = dy;
  if (dy.dtype() != cd) {
    ProfileScope ps("cast");
    dyc = Tensor::empty(dy.shape(), cd);
    kernels::cast(dy, dyc);
  }
  if (row() && sequence()) dyc = sequence_all_gather(dyc, *tp_.group);  // this rank's rows -> all rows
  Tensor dx = Tensor::empty({dyc.size(0), in_}, DType::f32);
  {
    ProfileScope ps("gemm_dgrad", 2.0 * double(dyc.size(0)) * double(in_) * double(out_));
    if (fp8_) {
      const DType fmt = fp8_->recipe().backward;
      const kernels::Fp8Tensor dyq = fp8_->quantize_rows(dyc, slot_dy_, fmt);
      kernels::fp8_gemm(dyq, false, quantized_weight(), false, dx, false);
      put_fp8(saved, key_dy_, block_scaled() ? fp8_->quantize_cols_transposed(dyc, slot_dy_, fmt) : dyq);
      if (b_offset_ >= 0) accumulate_bias_grad(dyc);  // from the unquantised gradient, now
    } else {
      kernels::matmul(dyc, false, ps_->compute_at(w_offset_, {out_, in_}), false, dx, false);
      saved.put(key_dy_, dyc);
    }
  }
  if (column()) {  // each rank's output columns contribute to dx
    if (sequence()) {
      dx = sequence_reduce_scatter(dx, *tp_.group);
    } else {
      ProfileScope ps("tp_all_reduce");
      tp_.group->all_reduce(dx.device_ptr(), dx.numel(), DType::f32, comm::ReduceOp::sum);
    }
  }
  return dx;
}

void Linear::backward_weight(Activations& saved) {
  const Tensor dw = ps_->grad_at(w_offset_, {out_, in_});
  if (fp8_) {
    // block: dy^T [out, N] @ (x^T [in, N])^T, both tiled along the tokens; per tensor: dy^T @ x.
    const auto scaling = block_scaled() ? kernels::Fp8Scaling::row_tiles : kernels::Fp8Scaling::tensor;
    const kernels::Fp8Tensor dyq = take_fp8(saved, key_dy_, scaling), xq = take_fp8(saved, key_x_, scaling);
    ProfileScope ps("gemm_wgrad", 2.0 * double(xq.data.numel()) * double(out_));
    if (block_scaled())
      kernels::fp8_gemm(dyq, false, xq, true, dw, true);
    else
      kernels::fp8_gemm(dyq, true, xq, false, dw, true);
    return;
  }
  const Tensor& x = saved.get(key_x_);
  const Tensor& dy = saved.get(key_dy_);
  {
    ProfileScope ps("gemm_wgrad", 2.0 * double(dy.size(0)) * double(in_) * double(out_));
    kernels::matmul(dy, true, x, false, dw, true);
  }
  if (b_offset_ >= 0) accumulate_bias_grad(dy);
  saved.erase(key_x_);
  saved.erase(key_dy_);
}

}  // namespace tessel::nn
