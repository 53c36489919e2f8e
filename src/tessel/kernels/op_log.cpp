#include "tessel/kernels/op_log.h"

#include <algorithm>
#include <utility>

#include "tessel/core/check.h"
#include "tessel/core/repeated_records.h"

namespace tessel::kernels {
namespace {
thread_local int64_t t_last_record = -1;  // index in records_ of this thread's last add()
}  // namespace

OperandList::OperandList(std::initializer_list<Shape> shapes, std::initializer_list<DType> dtypes) {
  TESSEL_CHECK(shapes.size() == dtypes.size(), "op log: {} shapes and {} dtypes", shapes.size(), dtypes.size());
  auto d = dtypes.begin();
  for (const Shape& s : shapes) push_back(s, *d++);
}

void OperandList::insert(size_t at, const Shape& shape, DType dtype) {
  TESSEL_CHECK(at <= n_ && n_ < kOperands && size_t(start_[n_]) + shape.size() <= kDims,
               "op log: a call of more than {} operands or {} dimensions in all", kOperands, kDims);
  const size_t from = start_[at], k = shape.size();
  std::copy_backward(dims_.begin() + long(from), dims_.begin() + start_[n_], dims_.begin() + start_[n_] + long(k));
  std::copy(shape.begin(), shape.end(), dims_.begin() + long(from));
  for (size_t i = n_ + 1; i > at; --i) start_[i] = uint8_t(start_[i - 1] + k);
  std::copy_backward(dtypes_.begin() + long(at), dtypes_.begin() + n_, dtypes_.begin() + n_ + 1);
  dtypes_[at] = dtype;
  ++n_;
}

std::vector<Shape> OperandList::shapes() const {
  std::vector<Shape> out;
  for (size_t i = 0; i < n_; ++i) out.emplace_back(shape(i).begin(), shape(i).end());
  return out;
}

void OpLog::add(OpRecord r) {
  r.phase = current_memory_phase();
  std::lock_guard<std::mutex> lock(mu_);
  t_last_record = int64_t(records_.size());
  records_.push_back(std::move(r));
}

void OpLog::set_seconds_of_last(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  if (t_last_record >= 0 && t_last_record < int64_t(records_.size())) records_[size_t(t_last_record)].seconds = seconds;
}

std::vector<OpRecord> OpLog::records() const {
  std::lock_guard<std::mutex> lock(mu_);
  return records_;
}

std::vector<OpRecord> OpLog::take_records() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<OpRecord> out = std::move(records_);
  records_ = {};
  records_.reserve(out.size());  // the next run of the same kind records as many without regrowing
  t_last_record = -1;
  return out;
}

std::map<std::string, OpTotals> OpLog::totals_by_op() const {
  std::lock_guard<std::mutex> lock(mu_);
  // Summed under the records' own names (string literals), named by strings once per family.
  std::map<std::string_view, OpTotals> by_view;
  for (const OpRecord& r : records_) {
    OpTotals& t = by_view[r.op];
    t.calls += r.count;
    t.flops += double(r.count) * r.flops;
    t.bytes_read += r.count * r.bytes_read;
    t.bytes_written += r.count * r.bytes_written;
  }
  std::map<std::string, OpTotals> out;
  for (const auto& [op, t] : by_view) out.emplace(op, t);
  return out;
}

size_t OpLog::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return records_.size();
}

void OpLog::repeat(size_t begin, size_t end, int64_t times) {
  std::lock_guard<std::mutex> lock(mu_);
  append_repeated(records_, begin, end, times, "op log");
}

void OpLog::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  records_.clear();
  t_last_record = -1;
}

OpLog& op_log() {
  static OpLog* log = new OpLog;  // never destroyed: kernels may run during static destruction
  return *log;
}

bool is_op_family(std::string_view op) {
  return std::binary_search(std::begin(kOpFamilies), std::end(kOpFamilies), op);
}

void record_op(const char* op, std::initializer_list<const Tensor*> inputs, std::initializer_list<const Tensor*> outputs,
               double flops) {
  if (!op_log().enabled()) return;
  OpRecord r{op, {}, flops, 0, 0, {}, -1};
  for (const Tensor* t : inputs)
    if (t->defined()) {
      r.operands.push_back(t->shape(), t->dtype());
      r.bytes_read += int64_t(t->nbytes());
    }
  for (const Tensor* t : outputs)
    if (t->defined()) {
      r.operands.push_back(t->shape(), t->dtype());
      r.bytes_written += int64_t(t->nbytes());
    }
  op_log().add(std::move(r));
}

std::string gemm_variant(bool trans_a, bool trans_b, bool accumulate) {
  std::string v{trans_a ? 'T' : 'N', trans_b ? 'T' : 'N'};
  return accumulate ? v + "+acc" : v;
}

Device common_device(const char* op, std::initializer_list<const Tensor*> operands) {
  const Tensor* first = nullptr;
  for (const Tensor* t : operands) {
    if (!t->defined()) continue;
    if (!first) {
      first = t;
    } else if (t->device() != first->device()) {
      std::string list;
      for (const Tensor* u : operands)
        if (u->defined()) list += (list.empty() ? "" : ", ") + u->str() + (u->is_meta() ? "" : " on cpu");
      TESSEL_FAIL("{}: operands on different devices ({}); every operand of a kernel must be on one device", op,
                  list);
    }
  }
  return first ? first->device() : Device::cpu;
}

}  // namespace tessel::kernels
