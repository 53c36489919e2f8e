// The attention family's dispatch point: device-neutral checks and the op record, then the device's kernel.
#include "tessel/kernels/attention.h"

#include <algorithm>

#include "tessel/kernels/launch.h"
#include "tessel/kernels/op_log.h"

namespace tessel::kernels {

namespace {

void check_heads(const char* op, const Tensor& t, int64_t rows, int64_t cols, bool any_float, const char* what) {
  TESSEL_CHECK(t.dim() == 2 && t.size(0) == rows && t.size(1) == cols && t.stride(1) == 1 &&
                   (t.dtype() == DType::f32 || (any_float && t.dtype() == DType::bf16)),
               "{}: {} must be {} [{}, {}] with unit column stride, got {}", op, what, any_float ? "f32 or bf16" : "f32",
               rows, cols, t.str());
}

void check_operands(const char* op, const AttentionShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                    const Tensor& out, const Tensor& lse) {
  TESSEL_CHECK(s.G > 0 && s.H % s.G == 0, "{}: {} query heads do not split into {} key/value groups", op, s.H, s.G);
  TESSEL_CHECK(s.Dv >= 0, "{}: value heads of {} columns (0 for the query/key width)", op, s.Dv);
  const int64_t N = s.B * s.T;
  check_heads(op, q, N, s.H * s.Dh, false, "q");
  check_heads(op, k, N, s.G * s.Dh, false, "k");
  check_heads(op, v, N, s.G * s.dv(), false, "v");
  check_heads(op, out, N, s.H * s.dv(), true, "out");
  TESSEL_CHECK(lse.dtype() == DType::f32 && lse.shape() == Shape({s.B, s.H, s.T}) && lse.is_contiguous(),
               "{}: lse must be a contiguous f32 [{}, {}, {}], got {}", op, s.B, s.H, s.T, lse.str());
}

}  // namespace

double attention_forward_flops(const AttentionShape& s) {
  const double full = 2.0 * double(s.B) * double(s.H) * double(s.T) * double(s.T) * double(s.Dh + s.dv());
  return s.causal ? full / 2 : full;
}

void attention_forward(const AttentionShape& s, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                       const Tensor& lse) {
  check_operands("attention_fwd", s, q, k, v, out, lse);
  const Device device = common_device("attention_fwd", {&q, &k, &v, &out, &lse});
  record_op("attention_fwd", {&q, &k, &v}, {&out, &lse}, attention_forward_flops(s));
  if (device == Device::meta) return;
  launch_cpu_kernel(
      [=](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse) {
      if (out.dtype() == DType::bf16)
        attention_fwd(s, q.data<float>(), q.stride(0), k.data<float>(), k.stride(0), v.data<float>(), v.stride(0),
                      out.data<bf16>(), out.stride(0), lse.data<float>());
      else
        attention_fwd(s, q.data<float>(), q.stride(0), k.data<float>(), k.stride(0), v.data<float>(), v.stride(0),
                      out.data<float>(), out.stride(0), lse.data<float>());
      },
      q, k, v, out, lse);
}

void attention_backward(const AttentionShape& s, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& dout, const Tensor& lse, const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  const char* op = "attention_bwd";
  check_operands(op, s, q, k, v, out, lse);
  check_heads(op, dout, s.B * s.T, s.H * s.dv(), false, "dout");
  check_heads(op, dq, s.B * s.T, s.H * s.Dh, false, "dq");
  check_heads(op, dk, s.B * s.T, s.G * s.Dh, false, "dk");
  check_heads(op, dv, s.B * s.T, s.G * s.dv(), false, "dv");
  const Device device = common_device(op, {&q, &k, &v, &out, &dout, &lse, &dq, &dk, &dv});
  // The probabilities are recomputed (one more QK^T), then dV, dP, dQ, dK: 2.5 forwards.
  record_op(op, {&q, &k, &v, &out, &dout, &lse}, {&dq, &dk, &dv}, 2.5 * attention_forward_flops(s));
  if (device == Device::meta) return;
  launch_cpu_kernel(
      [=](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout, const Tensor& lse, const Tensor& dq, const Tensor& dk, const Tensor& dv) {
      const auto run = [&](const auto* o) {
        attention_bwd(s, q.data<float>(), q.stride(0), k.data<float>(), k.stride(0), v.data<float>(), v.stride(0), o,
                      out.stride(0), dout.data<float>(), dout.stride(0), lse.data<float>(), dq.data<float>(), dq.stride(0),
                      dk.data<float>(), dk.stride(0), dv.data<float>(), dv.stride(0));
      };
      if (out.dtype() == DType::bf16)
        run(out.data<bf16>());
      else
        run(out.data<float>());
      },
      q, k, v, out, dout, lse, dq, dk, dv);
}

void kv_cache_append(const Tensor& k, const Tensor& v, int64_t pos0, const Tensor& k_cache, const Tensor& v_cache) {
  const char* op = "kv_cache_append";
  const int64_t n = k.dim() == 2 ? k.size(0) : 0, width = k_cache.dim() == 2 ? k_cache.size(1) : 0;
  check_heads(op, k, n, width, false, "k");
  check_heads(op, v, n, width, false, "v");
  TESSEL_CHECK(k_cache.is_contiguous() && v_cache.is_contiguous() && v_cache.shape() == k_cache.shape() &&
                   k_cache.dtype() == DType::f32 && v_cache.dtype() == DType::f32,
               "{}: the caches must be contiguous f32 of one shape, got {} and {}", op, k_cache.str(), v_cache.str());
  TESSEL_CHECK(pos0 >= 0 && pos0 + n <= k_cache.size(0), "{}: the KV cache holds {} positions, {} needed", op,
               k_cache.size(0), pos0 + n);
  const Device device = common_device(op, {&k, &v, &k_cache, &v_cache});
  record_op(op, {&k, &v}, {&k_cache, &v_cache}, 0.0);
  if (device == Device::meta) return;
  launch_cpu_kernel(
      [n, width, pos0](const Tensor& k, const Tensor& v, const Tensor& k_cache, const Tensor& v_cache) {
        for (int64_t i = 0; i < n; ++i) {
          std::copy_n(k.data<float>() + i * k.stride(0), width, k_cache.data<float>() + (pos0 + i) * width);
          std::copy_n(v.data<float>() + i * v.stride(0), width, v_cache.data<float>() + (pos0 + i) * width);
        }
      },
      k, v, k_cache, v_cache);
}

void attention_decode(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, int64_t pos0, int64_t heads,
                      int64_t groups, float scale, const Tensor& out) {
  const char* op = "attention_decode";
  TESSEL_CHECK(groups > 0 && heads % groups == 0 && k_cache.dim() == 2 && k_cache.size(1) % groups == 0,
               "{}: {} query heads over {} key/value groups of a cache {}", op, heads, groups, k_cache.str());
  const int64_t n = q.dim() == 2 ? q.size(0) : 0, Dh = k_cache.size(1) / groups;
  check_heads(op, q, n, heads * Dh, false, "q");
  check_heads(op, out, n, heads * Dh, false, "out");
  TESSEL_CHECK(out.is_contiguous() && k_cache.is_contiguous() && v_cache.shape() == k_cache.shape() &&
                   v_cache.is_contiguous() && k_cache.dtype() == DType::f32 && v_cache.dtype() == DType::f32,
               "{}: contiguous f32 caches of one shape and a contiguous output, got {}, {} and {}", op, k_cache.str(),
               v_cache.str(), out.str());
  TESSEL_CHECK(pos0 >= 0 && pos0 + n <= k_cache.size(0), "{}: the KV cache holds {} positions, {} needed", op,
               k_cache.size(0), pos0 + n);
  const Device device = common_device(op, {&q, &k_cache, &v_cache, &out});
  // Row i attends to pos0 + i + 1 cached positions: QK^T and PV, 2 x 2 FLOPs per head, position, dim.
  const double positions = double(n) * double(pos0) + double(n) * double(n + 1) / 2;
  record_op(op, {&q, &k_cache, &v_cache}, {&out}, 4.0 * double(heads) * double(Dh) * positions);
  if (device == Device::meta) return;
  launch_cpu_kernel(
      [n, heads, groups, Dh, pos0, scale](const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                          const Tensor& out) {
        attention_decode_rows(n, heads, groups, Dh, pos0, scale, q.data<float>(), q.stride(0), k_cache.data<float>(),
                              v_cache.data<float>(), out.data<float>());
      },
      q, k_cache, v_cache, out);
}

}  // namespace tessel::kernels
