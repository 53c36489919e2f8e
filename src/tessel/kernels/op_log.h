#pragma once
// The kernel calls of a run, one record each (op, operand shapes and dtypes, FLOPs, bytes read and
// written), written by each op family's dispatch point on every device when the log is on. On the
// meta device this is all a kernel does: a dry run's op list is the log of the real training step.
// The planner prices these records with a hardware profile.
#include <algorithm>
#include <array>
#include <iterator>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tessel/core/memory.h"
#include "tessel/core/tensor.h"

namespace tessel::kernels {

// The operands of one kernel call, stored in the record itself: a dry run records hundreds of
// thousands of calls, and a heap allocation per shape was most of what recording one cost.
// Capacity is a property of the kernels (the largest, attention's backward, has 9 operands of 19
// dims in all); a call beyond it is refused, naming the op.
class OperandList {
 public:
  static constexpr size_t kOperands = 12, kDims = 40;
  OperandList() = default;
  OperandList(std::initializer_list<Shape> shapes, std::initializer_list<DType> dtypes);
  void push_back(const Shape& shape, DType dtype) { insert(n_, shape, dtype); }
  void insert(size_t at, const Shape& shape, DType dtype);
  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  std::span<const int64_t> shape(size_t i) const { return {dims_.data() + start_[i], size_t(start_[i + 1] - start_[i])}; }
  std::span<const int64_t> back_shape() const { return shape(n_ - 1); }
  DType dtype(size_t i) const { return dtypes_[i]; }
  std::vector<Shape> shapes() const;

 private:
  std::array<int64_t, kDims> dims_{};
  std::array<uint8_t, kOperands + 1> start_{};  // operand i's dims: [start_[i], start_[i + 1])
  std::array<DType, kOperands> dtypes_{};
  uint8_t n_ = 0;
};

struct OpRecord {
  std::string_view op;        // the op family's name, a string literal: "gemm", ...
  OperandList operands;       // inputs first, outputs last
  double flops = 0;           // arithmetic operations (a multiply-add counts 2)
  int64_t bytes_read = 0;
  int64_t bytes_written = 0;
  // Where in the step the call was made (the calling thread's phase: forward or backward, which
  // micro-batch and chunk): the planner prices each pipeline pass from the calls made in it.
  MemoryPhase phase{};
  // The kernel's own run time on a cpu run with timing on (OpLog::set_timing), -1 where not timed:
  // `tessel plan calibrate` fits each op family's cost from these.
  double seconds = -1;
  // The call's variant where the op family has several: for gemm and fp8_gemm the transposes of a
  // and b ("NT": a as stored, b transposed; row-major) and "+acc" when c accumulates.
  std::string variant{};
  // How many calls alike (same op, shapes, phase) this record stands for: 1, but where a meta run
  // ran one of several alike calls and recorded the others here (nn/alike_calls.h). Every total
  // (calls, FLOPs, bytes, time) counts the record this many times.
  int64_t count = 1;
};

struct OpTotals {
  int64_t calls = 0;
  double flops = 0;
  int64_t bytes_read = 0;
  int64_t bytes_written = 0;
};

class OpLog {
 public:
  // Off by default: a real run pays one relaxed load per kernel call.
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }
  void set_enabled(bool on) { enabled_.store(on, std::memory_order_relaxed); }

  // Timing (off by default, and only with the log on): launch_cpu_kernel times each kernel body it
  // runs synchronously and stores the time in the record this thread added last.
  bool timing() const { return timing_.load(std::memory_order_relaxed); }
  void set_timing(bool on) { timing_.store(on, std::memory_order_relaxed); }
  void set_seconds_of_last(double seconds);  // this thread's last record

  void add(OpRecord r);  // stamps the calling thread's phase
  std::vector<OpRecord> records() const;
  std::vector<OpRecord> take_records();  // the records, moved out: the log is left empty
  std::map<std::string, OpTotals> totals_by_op() const;
  size_t size() const;
  // Appends records [begin, end) once more, each standing for `times` calls (OpRecord::count).
  void repeat(size_t begin, size_t end, int64_t times);
  void clear();

 private:
  std::atomic<bool> enabled_{false};
  std::atomic<bool> timing_{false};
  mutable std::mutex mu_;
  std::vector<OpRecord> records_;
};

// The process-wide log the dispatch points write to.
OpLog& op_log();

// Times the kernels (OpLog::set_timing) while it lives, and restores the setting, exceptions included.
class OpTimingScope {
 public:
  OpTimingScope() : previous_(op_log().timing()) { op_log().set_timing(true); }
  ~OpTimingScope() { op_log().set_timing(previous_); }
  OpTimingScope(const OpTimingScope&) = delete;
  OpTimingScope& operator=(const OpTimingScope&) = delete;

 private:
  bool previous_;
};

// Every op family a kernel records (OpRecord::op), sorted. A hardware profile's memory
// efficiencies are keyed by these names, so a profile naming anything else is refused (a typo
// would otherwise price that op at the default silently). tests/train/meta_step_test.cpp checks
// that every call of a training step in every layout it runs is listed here; a new kernel's name
// must be added.
inline constexpr std::string_view kOpFamilies[] = {
    "adamw_update", "add", "add_gathered_rows", "add_row_vector", "amax", "attention_bwd", "attention_decode",
    "attention_fwd", "balance_counts", "balance_loss_rows", "cast", "column_sum_accumulate",
    "copy_head_columns", "count_nonnegative", "cross_entropy", "embedding_bwd", "embedding_bwd_slice",
    "embedding_fwd", "embedding_fwd_slice", "fp8_gemm", "fp8_quantize", "fp8_quantize_blocks",
    "fp8_quantize_col_tiles_transposed", "fp8_quantize_row_tiles", "gather_rows", "gelu_bwd", "gelu_fwd",
    "gelu_fwd_fp8", "gemm", "kv_cache_append", "layernorm_bwd", "layernorm_fwd", "layernorm_fwd_fp8",
    "moe_weighted_sum", "moe_weighted_sum_backward", "ring_attention_bwd", "ring_attention_fwd",
    "rmsnorm_bwd", "rmsnorm_fwd", "rmsnorm_fwd_fp8", "rope", "router_forward", "router_scores_backward",
    "router_weights_backward", "router_z_loss", "scatter_add_rows", "shift_tokens", "sum_head_columns",
    "sum_squares", "swiglu_bwd", "swiglu_fwd", "swiglu_fwd_fp8", "xent_local_max_and_target",
    "xent_local_sum_exp", "xent_vocab_parallel_finish",
};
static_assert(std::is_sorted(std::begin(kOpFamilies), std::end(kOpFamilies)), "kOpFamilies is searched by bisection");
bool is_op_family(std::string_view op);

// Records one call when the log is on: shapes and dtypes of the defined inputs then outputs, bytes
// read = the inputs' bytes, bytes written = the outputs'.
void record_op(const char* op, std::initializer_list<const Tensor*> inputs, std::initializer_list<const Tensor*> outputs,
               double flops);

// OpRecord::variant of a GEMM call: "NN", "NT", "TN" or "TT" (op(a), op(b)), then "+acc".
std::string gemm_variant(bool trans_a, bool trans_b, bool accumulate);

// The device every operand of one kernel call is on; operands on different devices are refused,
// naming the op and each operand. Undefined tensors (an absent bias) are skipped.
Device common_device(const char* op, std::initializer_list<const Tensor*> operands);

}  // namespace tessel::kernels
