// The embedding family's dispatch point: device-neutral checks and the op record, then the device's kernel.
#include "tessel/kernels/embedding.h"

#include "tessel/kernels/launch.h"
#include "tessel/kernels/op_log.h"

namespace tessel::kernels {

namespace {

// A lookup reads its table in f32 or bf16 (the compute copy, precision.fp32_embedding off); gradients
// and position tables are f32.
enum class Table { f32, f32_or_bf16 };

void check_operands(const char* op, const Tensor& tokens, const Tensor& table, const Tensor& pos, int64_t T,
                    const Tensor& rows, Table allowed = Table::f32) {
  TESSEL_CHECK(tokens.dtype() == DType::i64 && tokens.is_contiguous(), "{}: tokens must be contiguous i64, got {}", op,
               tokens.str());
  const bool dtype_ok =
      table.dtype() == DType::f32 || (allowed == Table::f32_or_bf16 && table.dtype() == DType::bf16);
  TESSEL_CHECK(table.dim() == 2 && dtype_ok && table.is_contiguous(), "{}: the table must be a contiguous {} [V, D], got {}",
               op, allowed == Table::f32 ? "f32" : "f32 or bf16", table.str());
  const int64_t N = tokens.numel(), D = table.size(1);
  TESSEL_CHECK(rows.dtype() == DType::f32 && rows.shape() == Shape({N, D}) && rows.is_contiguous(),
               "{}: rows must be a contiguous f32 [{}, {}], got {}", op, N, D, rows.str());
  if (pos.defined())
    TESSEL_CHECK(pos.dim() == 2 && pos.dtype() == DType::f32 && pos.size(0) >= T && pos.size(1) == D && pos.is_contiguous(),
                 "{}: positions must be a contiguous f32 [>= {}, {}], got {}", op, T, D, pos.str());
}

// The bytes a lookup reads: the ids and one table row per token, in the table's dtype.
int64_t lookup_bytes_read(const Tensor& tokens, const Tensor& table) {
  return int64_t(tokens.nbytes()) + tokens.numel() * table.size(1) * int64_t(dtype_size(table.dtype()));
}

}  // namespace

void embedding_forward(const Tensor& tokens, const Tensor& W, const Tensor& pos, int64_t T, const Tensor& out) {
  check_operands("embedding_fwd", tokens, W, pos, T, out, Table::f32_or_bf16);
  const Device device = common_device("embedding_fwd", {&tokens, &W, &pos, &out});
  // Reads one table row per token (and one position row), not the whole table.
  if (op_log().enabled()) {
    OpRecord r{"embedding_fwd", {{tokens.shape(), W.shape(), out.shape()}, {tokens.dtype(), W.dtype(), out.dtype()}},
               pos.defined() ? double(out.numel()) : 0.0,
               lookup_bytes_read(tokens, W) + int64_t(pos.defined() ? out.nbytes() : 0),
               int64_t(out.nbytes())};
    op_log().add(std::move(r));
  }
  if (device == Device::meta) return;
  launch_cpu_kernel(
      [=](const Tensor& tokens, const Tensor& W, const Tensor& pos, const Tensor& out) {
      const float* p = pos.defined() ? pos.data<float>() : nullptr;
      with_elements(W, [&](const auto* w) {
        embedding_fwd(tokens.numel(), W.size(1), W.size(0), tokens.data<int64_t>(), w, p, T, out.data<float>());
      });
      },
      tokens, W, pos, out);
}

void embedding_backward(const Tensor& tokens, const Tensor& dout, const Tensor& dW, const Tensor& dpos, int64_t T) {
  check_operands("embedding_bwd", tokens, dW, dpos, T, dout);
  const Device device = common_device("embedding_bwd", {&tokens, &dout, &dW, &dpos});
  if (op_log().enabled()) {
    // Read-modify-write of one gradient row per token (and position).
    const int64_t rows = int64_t(dout.nbytes()) * (dpos.defined() ? 2 : 1);
    OpRecord r{"embedding_bwd", {{tokens.shape(), dout.shape(), dW.shape()}, {tokens.dtype(), dout.dtype(), dW.dtype()}},
               double(dout.numel()) * (dpos.defined() ? 2 : 1), int64_t(tokens.nbytes() + dout.nbytes()) + rows, rows};
    op_log().add(std::move(r));
  }
  if (device == Device::meta) return;
  launch_cpu_kernel(
      [=](const Tensor& tokens, const Tensor& dout, const Tensor& dW, const Tensor& dpos) {
      embedding_bwd(tokens.numel(), dW.size(1), tokens.data<int64_t>(), dout.data<float>(), dW.data<float>(),
                    dpos.defined() ? dpos.data<float>() : nullptr, T);
      },
      tokens, dout, dW, dpos);
}

void check_ids(const Tensor& ids, int64_t limit, bool allow_negative, const char* what, const char* op) {
  TESSEL_CHECK(ids.dtype() == DType::i64 && ids.is_contiguous(), "{}: {}s must be contiguous i64, got {}", op, what,
               ids.str());
  if (ids.is_meta()) return;
  const DeviceAccessScope on_device;
  const int64_t* t = ids.data<int64_t>();
  for (int64_t i = 0; i < ids.numel(); ++i)
    TESSEL_CHECK(t[i] < limit && (t[i] >= 0 || allow_negative), "{}: {} {} at {} {} is outside the vocabulary [0, {})",
                 op, what, t[i], allow_negative ? "row" : "position", i, limit);
}

void embedding_forward_slice(const Tensor& tokens, const Tensor& W, int64_t vocab_begin, const Tensor& out) {
  check_operands("embedding_fwd_slice", tokens, W, Tensor(), 0, out, Table::f32_or_bf16);
  const Device device = common_device("embedding_fwd_slice", {&tokens, &W, &out});
  if (op_log().enabled()) {  // the ids and one table row per token of the slice (at most); every row written
    op_log().add({"embedding_fwd_slice",
                  {{tokens.shape(), W.shape(), out.shape()}, {tokens.dtype(), W.dtype(), out.dtype()}}, 0.0,
                  lookup_bytes_read(tokens, W), int64_t(out.nbytes())});
  }
  if (device == Device::meta) return;
  launch_cpu_kernel(
      [=](const Tensor& tokens, const Tensor& W, const Tensor& out) {
      with_elements(W, [&](const auto* w) {
        embedding_fwd_slice(tokens.numel(), W.size(1), W.size(0), tokens.data<int64_t>(), w, vocab_begin,
                            out.data<float>());
      });
      },
      tokens, W, out);
}

void embedding_backward_slice(const Tensor& tokens, const Tensor& dout, int64_t vocab_begin, const Tensor& dW) {
  check_operands("embedding_bwd_slice", tokens, dW, Tensor(), 0, dout);
  const Device device = common_device("embedding_bwd_slice", {&tokens, &dout, &dW});
  if (op_log().enabled()) {  // a read-modify-write of one gradient row per token of the slice (at most)
    const int64_t rows = int64_t(dout.nbytes());
    op_log().add({"embedding_bwd_slice", {{tokens.shape(), dout.shape(), dW.shape()},
                  {tokens.dtype(), dout.dtype(), dW.dtype()}}, double(dout.numel()),
                  int64_t(tokens.nbytes() + dout.nbytes()) + rows, rows});
  }
  if (device == Device::meta) return;
  launch_cpu_kernel(
      [=](const Tensor& tokens, const Tensor& dout, const Tensor& dW) {
      embedding_bwd_slice(tokens.numel(), dW.size(1), dW.size(0), tokens.data<int64_t>(), dout.data<float>(), vocab_begin,
                          dW.data<float>());
      },
      tokens, dout, dW);
}

void add_gathered_rows(const Tensor& index, const Tensor& table, const Tensor& out) {
  check_operands("add_gathered_rows", index, table, Tensor(), 0, out);
  const Device device = common_device("add_gathered_rows", {&index, &table, &out});
  record_op("add_gathered_rows", {&index, &out}, {&out}, double(out.numel()));
  if (device == Device::meta) return;
  launch_cpu_kernel(
      [=](const Tensor& index, const Tensor& table, const Tensor& out) {
      const int64_t* idx = index.data<int64_t>();
      for (int64_t n = 0; n < index.numel(); ++n)
        TESSEL_CHECK(idx[n] >= 0 && idx[n] < table.size(0), "add_gathered_rows: row index {} at {} is outside the table's {} rows",
                     idx[n], n, table.size(0));
      add_gathered_rows(out.size(0), out.size(1), index.data<int64_t>(), table.data<float>(), out.data<float>());
      },
      index, table, out);
}

void shift_tokens(const Tensor& ids, int64_t by, int64_t fill, const Tensor& out) {
  TESSEL_CHECK(ids.dim() == 2 && ids.dtype() == DType::i64 && ids.is_contiguous() && out.shape() == ids.shape() &&
                   out.dtype() == DType::i64 && out.is_contiguous() && by >= 0,
               "shift_tokens: contiguous i64 [B, T] into the same shape by >= 0, got {} into {} by {}", ids.str(),
               out.str(), by);
  const Device device = common_device("shift_tokens", {&ids, &out});
  record_op("shift_tokens", {&ids}, {&out}, 0.0);
  if (device == Device::meta) return;
  launch_cpu_kernel(
      [=](const Tensor& ids, const Tensor& out) {
      const int64_t B = ids.size(0), T = ids.size(1);
      const int64_t* in = ids.data<int64_t>();
      int64_t* o = out.data<int64_t>();
      for (int64_t b = 0; b < B; ++b)
        for (int64_t i = 0; i < T; ++i) o[b * T + i] = i + by < T ? in[b * T + i + by] : fill;
      },
      ids, out);
}

int64_t count_nonnegative(const Tensor& ids) {
  TESSEL_CHECK(ids.dtype() == DType::i64 && ids.is_contiguous(), "count_nonnegative: contiguous i64, got {}", ids.str());
  const Device device = common_device("count_nonnegative", {&ids});
  record_op("count_nonnegative", {&ids}, {}, double(ids.numel()));
  if (device == Device::meta) return 0;
  return run_cpu_kernel_now([&] {
    const int64_t* p = ids.data<int64_t>();
    int64_t n = 0;
    for (int64_t i = 0; i < ids.numel(); ++i) n += p[i] >= 0;
    return n;
  });
}

}  // namespace tessel::kernels
