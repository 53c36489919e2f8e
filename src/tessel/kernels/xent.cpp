// The cross-entropy family's dispatch points: device-neutral checks and the op record, then the
// device's kernel. The loss leaves the device as one explicit host copy per call.
#include "tessel/kernels/xent.h"

#include "tessel/kernels/launch.h"
#include "tessel/kernels/op_log.h"

namespace tessel::kernels {

namespace {

void check_logits(const char* op, const Tensor& logits, const Tensor& targets) {
  TESSEL_CHECK(logits.dim() == 2 && logits.dtype() == DType::f32 && logits.is_contiguous(),
               "{}: logits must be contiguous f32 [rows, vocabulary], got {}", op, logits.str());
  TESSEL_CHECK(targets.dtype() == DType::i64 && targets.is_contiguous() && targets.numel() == logits.size(0),
               "{}: targets must be {} contiguous i64 (one per row), got {}", op, logits.size(0), targets.str());
}

void check_rows(const char* op, const Tensor& logits, const Tensor& v, const char* what) {
  TESSEL_CHECK(v.dtype() == DType::f32 && v.is_contiguous() && v.numel() == logits.size(0),
               "{}: {} must be {} contiguous f32 (one per row), got {}", op, what, logits.size(0), v.str());
}

// Exponentials, a sum and a scale per element: the FLOPs a record counts for a pass over the logits.
double per_logit(const Tensor& logits, double ops) { return ops * double(logits.numel()); }

}  // namespace

double cross_entropy(const Tensor& logits, const Tensor& targets, float grad_scale, const Tensor& dlogits) {
  check_logits("cross_entropy", logits, targets);
  if (dlogits.defined())
    TESSEL_CHECK(dlogits.shape() == logits.shape() && dlogits.is_contiguous() &&
                     (dlogits.dtype() == DType::f32 || dlogits.dtype() == DType::bf16),
                 "cross_entropy: dlogits must be contiguous f32 or bf16 {}, got {}", logits.str(), dlogits.str());
  const Device device = common_device("cross_entropy", {&logits, &targets, &dlogits});
  record_op("cross_entropy", {&logits, &targets}, {&dlogits}, per_logit(logits, dlogits.defined() ? 4.0 : 2.0));
  if (device == Device::meta) return 0.0;
  return run_cpu_kernel_now([&] {
    const int64_t N = logits.size(0), V = logits.size(1);
    const float* x = logits.data<float>();
    const int64_t* t = targets.data<int64_t>();
    if (!dlogits.defined()) return softmax_xent<float>(N, V, x, t, 0.0f, nullptr);
    if (dlogits.dtype() == DType::bf16) return softmax_xent(N, V, x, t, grad_scale, dlogits.data<bf16>());
    return softmax_xent(N, V, x, t, grad_scale, dlogits.data<float>());
  });
}

void xent_local_max_and_target(const Tensor& logits, const Tensor& targets, int64_t vocab_begin,
                               const Tensor& row_max, const Tensor& target_logit) {
  check_logits("xent_local_max_and_target", logits, targets);
  check_rows("xent_local_max_and_target", logits, row_max, "row_max");
  check_rows("xent_local_max_and_target", logits, target_logit, "target_logit");
  const Device device = common_device("xent_local_max_and_target", {&logits, &targets, &row_max, &target_logit});
  record_op("xent_local_max_and_target", {&logits, &targets}, {&row_max, &target_logit}, per_logit(logits, 1.0));
  if (device == Device::meta) return;
  launch_cpu_kernel(
      [=](const Tensor& logits, const Tensor& targets, const Tensor& row_max, const Tensor& target_logit) {
      xent_local_max_and_target(logits.size(0), logits.size(1), logits.data<float>(), targets.data<int64_t>(), vocab_begin,
                                row_max.data<float>(), target_logit.data<float>());
      },
      logits, targets, row_max, target_logit);
}

void xent_local_sum_exp(const Tensor& logits, const Tensor& row_max, const Tensor& sum_exp) {
  TESSEL_CHECK(logits.dim() == 2 && logits.dtype() == DType::f32 && logits.is_contiguous(),
               "xent_local_sum_exp: logits must be contiguous f32 [rows, vocabulary], got {}", logits.str());
  check_rows("xent_local_sum_exp", logits, row_max, "row_max");
  check_rows("xent_local_sum_exp", logits, sum_exp, "sum_exp");
  const Device device = common_device("xent_local_sum_exp", {&logits, &row_max, &sum_exp});
  record_op("xent_local_sum_exp", {&logits, &row_max}, {&sum_exp}, per_logit(logits, 2.0));
  if (device == Device::meta) return;
  launch_cpu_kernel(
      [=](const Tensor& logits, const Tensor& row_max, const Tensor& sum_exp) {
      xent_local_sum_exp(logits.size(0), logits.size(1), logits.data<float>(), row_max.data<float>(), sum_exp.data<float>());
      },
      logits, row_max, sum_exp);
}

double xent_vocab_parallel_finish(const Tensor& logits, const Tensor& targets, int64_t vocab_begin,
                                  const Tensor& row_max, const Tensor& sum_exp, const Tensor& target_logit,
                                  float grad_scale, const Tensor& dlogits) {
  const char* op = "xent_vocab_parallel_finish";
  check_logits(op, logits, targets);
  check_rows(op, logits, row_max, "row_max");
  check_rows(op, logits, sum_exp, "sum_exp");
  check_rows(op, logits, target_logit, "target_logit");
  if (dlogits.defined())
    TESSEL_CHECK(dlogits.shape() == logits.shape() && dlogits.dtype() == DType::f32 && dlogits.is_contiguous(),
                 "{}: dlogits must be contiguous f32 {}, got {}", op, logits.str(), dlogits.str());
  const Device device = common_device(op, {&logits, &targets, &row_max, &sum_exp, &target_logit, &dlogits});
  record_op(op, {&logits, &targets, &row_max, &sum_exp, &target_logit}, {&dlogits},
            dlogits.defined() ? per_logit(logits, 3.0) : 0.0);
  if (device == Device::meta) return 0.0;
  return run_cpu_kernel_now([&] {
    return xent_vocab_parallel_finish(logits.size(0), logits.size(1), logits.data<float>(), targets.data<int64_t>(),
                                      vocab_begin, row_max.data<float>(), sum_exp.data<float>(),
                                      target_logit.data<float>(), grad_scale,
                                      dlogits.defined() ? dlogits.data<float>() : nullptr);
  });
}

}  // namespace tessel::kernels
