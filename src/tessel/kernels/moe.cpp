// The MoE family's dispatch points: device-neutral checks and the op record, then the device's kernel.
#include "tessel/kernels/moe.h"

#include <vector>

#include "tessel/kernels/launch.h"
#include "tessel/kernels/op_log.h"

namespace tessel::kernels {

namespace {

void check(const char* op, const Tensor& t, DType d, const Shape& shape, const char* what) {
  TESSEL_CHECK(t.dtype() == d && t.is_contiguous() && t.shape() == shape, "{}: {} must be contiguous {} {}, got {}", op,
               what, dtype_name(d), shape_str(shape), t.str());
}

void check_index(const char* op, const Tensor& index, const char* what) {
  TESSEL_CHECK(index.dim() == 1 && index.dtype() == DType::i64 && index.is_contiguous(),
               "{}: {} must be a contiguous i64 vector, got {}", op, what, index.str());
}

// Per-element arithmetic counts below are estimates of what each loop does (exp, compare, divide as
// one operation each): the op log's FLOPs for these small kernels, next to the GEMMs' exact ones.
double ops(const Tensor& t, double per_element) { return per_element * double(t.numel()); }

}  // namespace

void router_forward(const RouterConfig& c, const Tensor& logits, const float* host_bias, const Tensor& scores,
                    const Tensor& chosen, const Tensor& weights) {
  const char* op = "router_forward";
  const int64_t N = logits.size(0), E = c.experts, k = c.topk;
  check(op, logits, DType::f32, {N, E}, "logits");
  check(op, scores, DType::f32, {N, E}, "scores");
  check(op, chosen, DType::i32, {N, k}, "chosen");
  check(op, weights, DType::f32, {N, k}, "weights");
  const Device device = common_device(op, {&logits, &scores, &chosen, &weights});
  record_op(op, {&logits}, {&scores, &chosen, &weights}, ops(logits, 4.0 + double(k)));
  if (device == Device::meta) return;
  // The bias is copied at launch: the host may change it (the balancing update) before the kernel runs.
  std::vector<float> bias = host_bias ? std::vector<float>(host_bias, host_bias + c.experts) : std::vector<float>();
  launch_cpu_kernel(
      [c, N, bias = std::move(bias)](const Tensor& logits, const Tensor& scores, const Tensor& chosen,
                                     const Tensor& weights) {
        router_forward(c, N, logits.data<float>(), bias.empty() ? nullptr : bias.data(), scores.data<float>(),
                       chosen.data<int32_t>(), weights.data<float>());
      },
      logits, scores, chosen, weights);
}

void router_weights_backward(const RouterConfig& c, const Tensor& scores, const Tensor& chosen, const Tensor& dweights,
                             const Tensor& dscores) {
  const char* op = "router_weights_backward";
  const int64_t N = scores.size(0), E = c.experts, k = c.topk;
  check(op, scores, DType::f32, {N, E}, "scores");
  check(op, chosen, DType::i32, {N, k}, "chosen");
  check(op, dweights, DType::f32, {N, k}, "dweights");
  check(op, dscores, DType::f32, {N, E}, "dscores");
  const Device device = common_device(op, {&scores, &chosen, &dweights, &dscores});
  record_op(op, {&scores, &chosen, &dweights}, {&dscores}, ops(dweights, 4.0 * double(k)));
  if (device == Device::meta) return;
  launch_cpu_kernel(
      [=](const Tensor& scores, const Tensor& chosen, const Tensor& dweights, const Tensor& dscores) {
      router_weights_backward(c, N, scores.data<float>(), chosen.data<int32_t>(), dweights.data<float>(),
                              dscores.data<float>());
      },
      scores, chosen, dweights, dscores);
}

void router_scores_backward(const RouterConfig& c, const Tensor& scores, const Tensor& dscores, const Tensor& dlogits) {
  const char* op = "router_scores_backward";
  const int64_t N = scores.size(0), E = c.experts;
  check(op, scores, DType::f32, {N, E}, "scores");
  check(op, dscores, DType::f32, {N, E}, "dscores");
  check(op, dlogits, DType::f32, {N, E}, "dlogits");
  const Device device = common_device(op, {&scores, &dscores, &dlogits});
  record_op(op, {&scores, &dscores}, {&dlogits}, ops(scores, 4.0));
  if (device == Device::meta) return;
  launch_cpu_kernel(
      [=](const Tensor& scores, const Tensor& dscores, const Tensor& dlogits) {
      router_scores_backward(c, N, scores.data<float>(), dscores.data<float>(), dlogits.data<float>());
      },
      scores, dscores, dlogits);
}

void balance_counts(const RouterConfig& c, const Tensor& row_seq, const Tensor& chosen, const Tensor& counts) {
  const char* op = "balance_counts";
  const int64_t N = chosen.size(0);
  check_index(op, row_seq, "row_seq");
  check(op, chosen, DType::i32, {N, c.topk}, "chosen");
  TESSEL_CHECK(row_seq.numel() == N && counts.dtype() == DType::f32 && counts.is_contiguous() &&
                   counts.numel() % c.experts == 0,
               "{}: {} rows' sequences, counts f32 [S x {}], got {} and {}", op, N, c.experts, row_seq.str(), counts.str());
  const Device device = common_device(op, {&row_seq, &chosen, &counts});
  record_op(op, {&row_seq, &chosen}, {&counts}, ops(chosen, 1.0));
  if (device == Device::meta) return;
  launch_cpu_kernel(
      [=](const Tensor& row_seq, const Tensor& chosen, const Tensor& counts) {
      balance_counts(c, N, row_seq.data<int64_t>(), chosen.data<int32_t>(), counts.data<float>());
      },
      row_seq, chosen, counts);
}

double balance_loss_rows(const RouterConfig& c, const Tensor& row_seq, int64_t T, float alpha, const Tensor& scores,
                         const Tensor& counts, float grad_scale, const Tensor& dscores) {
  const char* op = "balance_loss_rows";
  const int64_t N = scores.size(0), E = c.experts;
  check_index(op, row_seq, "row_seq");
  check(op, scores, DType::f32, {N, E}, "scores");
  check(op, dscores, DType::f32, {N, E}, "dscores");
  TESSEL_CHECK(row_seq.numel() == N && counts.dtype() == DType::f32 && counts.is_contiguous() && counts.numel() % E == 0,
               "{}: {} rows' sequences, counts f32 [S x {}], got {} and {}", op, N, E, row_seq.str(), counts.str());
  const Device device = common_device(op, {&row_seq, &scores, &counts, &dscores});
  record_op(op, {&row_seq, &scores, &counts}, {&dscores}, ops(scores, 6.0));
  if (device == Device::meta) return 0.0;
  return run_cpu_kernel_now([&] {
    return balance_loss_rows(c, N, row_seq.data<int64_t>(), T, alpha, scores.data<float>(), counts.data<float>(),
                             grad_scale, dscores.data<float>());
  });
}

double router_z_loss(const Tensor& logits, float coeff, float grad_scale, const Tensor& daux) {
  const char* op = "router_z_loss";
  TESSEL_CHECK(logits.dim() == 2, "{}: logits must be [N, E], got {}", op, logits.str());
  check(op, logits, DType::f32, logits.shape(), "logits");
  check(op, daux, DType::f32, logits.shape(), "daux");
  const Device device = common_device(op, {&logits, &daux});
  record_op(op, {&logits, &daux}, {&daux}, ops(logits, 6.0));
  if (device == Device::meta) return 0.0;
  return run_cpu_kernel_now(
      [&] { return router_z_loss(logits.size(0), logits.size(1), logits.data<float>(), coeff, grad_scale, daux.data<float>()); });
}

void gather_rows(const Tensor& src, const Tensor& index, const Tensor& out) {
  const char* op = "gather_rows";
  check_index(op, index, "the index");
  TESSEL_CHECK(src.dim() == 2 && src.is_contiguous() && out.dtype() == src.dtype() && out.is_contiguous() &&
                   out.shape() == Shape({index.numel(), src.size(1)}),
               "{}: rows of {} at {} indices into {}", op, src.str(), index.numel(), out.str());
  const Device device = common_device(op, {&src, &index, &out});
  record_op(op, {&index}, {&out}, 0.0);  // reads the indexed rows only: as many bytes as it writes
  if (device == Device::meta) return;
  launch_cpu_kernel(
      [=](const Tensor& src, const Tensor& index, const Tensor& out) {
      const int64_t* idx = index.data<int64_t>();
      for (int64_t p = 0; p < index.numel(); ++p)
        TESSEL_CHECK(idx[p] >= 0 && idx[p] < src.size(0), "{}: index {} at {} outside the {} rows", op, idx[p], p, src.size(0));
      gather_rows(index.numel(), size_t(src.size(1)) * dtype_size(src.dtype()), src.raw(), idx, out.raw());
      },
      src, index, out);
}

void scatter_add_rows(const Tensor& src, const Tensor& index, const Tensor& out) {
  const char* op = "scatter_add_rows";
  check_index(op, index, "the index");
  TESSEL_CHECK(out.dim() == 2 && out.dtype() == DType::f32 && out.is_contiguous() && src.dtype() == DType::f32 &&
                   src.is_contiguous() && src.shape() == Shape({index.numel(), out.size(1)}),
               "{}: f32 rows {} at {} indices into f32 {}", op, src.str(), index.numel(), out.str());
  const Device device = common_device(op, {&src, &index, &out});
  record_op(op, {&src, &index}, {&src}, double(src.numel()));  // read-modify-write of as many rows
  if (device == Device::meta) return;
  launch_cpu_kernel(
      [=](const Tensor& src, const Tensor& index, const Tensor& out) {
      const int64_t* idx = index.data<int64_t>();
      for (int64_t p = 0; p < index.numel(); ++p)
        TESSEL_CHECK(idx[p] >= 0 && idx[p] < out.size(0), "{}: index {} at {} outside the {} rows", op, idx[p], p, out.size(0));
      scatter_add_rows(index.numel(), out.size(1), src.data<float>(), idx, out.data<float>());
      },
      src, index, out);
}

namespace {
void check_weighted(const char* op, const Tensor& outputs, const Tensor& copies, const Tensor& weights, int64_t N,
                    int64_t d) {
  check_index(op, copies, "the copies");
  check(op, outputs, DType::f32, {copies.numel(), d}, "the expert outputs");
  TESSEL_CHECK(weights.dim() == 2 && weights.size(0) == N && weights.dtype() == DType::f32 && weights.is_contiguous(),
               "{}: weights must be contiguous f32 [{}, k], got {}", op, N, weights.str());
}
}  // namespace

void moe_weighted_sum(const Tensor& outputs, const Tensor& copies, const Tensor& weights, const Tensor& out) {
  const char* op = "moe_weighted_sum";
  TESSEL_CHECK(out.dim() == 2 && out.dtype() == DType::f32 && out.is_contiguous(), "{}: out must be f32 [N, d], got {}",
               op, out.str());
  check_weighted(op, outputs, copies, weights, out.size(0), out.size(1));
  const Device device = common_device(op, {&outputs, &copies, &weights, &out});
  record_op(op, {&outputs, &copies, &weights}, {&outputs}, 2.0 * double(outputs.numel()));
  if (device == Device::meta) return;
  launch_cpu_kernel(
      [=](const Tensor& outputs, const Tensor& copies, const Tensor& weights, const Tensor& out) {
      moe_weighted_sum(copies.numel(), out.size(1), weights.size(1), outputs.data<float>(), copies.data<int64_t>(),
                       weights.data<float>(), out.data<float>());
      },
      outputs, copies, weights, out);
}

void moe_weighted_sum_backward(const Tensor& dout, const Tensor& outputs, const Tensor& copies, const Tensor& weights,
                               const Tensor& dweights, const Tensor& dcopy) {
  const char* op = "moe_weighted_sum_backward";
  TESSEL_CHECK(dout.dim() == 2 && dout.dtype() == DType::f32 && dout.is_contiguous(), "{}: dout must be f32 [N, d], got {}",
               op, dout.str());
  check_weighted(op, outputs, copies, weights, dout.size(0), dout.size(1));
  check(op, dweights, DType::f32, weights.shape(), "dweights");
  check(op, dcopy, DType::f32, outputs.shape(), "dcopy");
  const Device device = common_device(op, {&dout, &outputs, &copies, &weights, &dweights, &dcopy});
  record_op(op, {&dout, &outputs, &copies, &weights}, {&dweights, &dcopy}, 3.0 * double(outputs.numel()));
  if (device == Device::meta) return;
  launch_cpu_kernel(
      [=](const Tensor& dout, const Tensor& outputs, const Tensor& copies, const Tensor& weights, const Tensor& dweights, const Tensor& dcopy) {
      moe_weighted_sum_backward(copies.numel(), dout.size(1), weights.size(1), dout.data<float>(), outputs.data<float>(),
                                copies.data<int64_t>(), weights.data<float>(), dweights.data<float>(), dcopy.data<float>());
      },
      dout, outputs, copies, weights, dweights, dcopy);
}

}  // namespace tessel::kernels
