#include "tessel/comm/comm_log.h"

#include <utility>

#include "tessel/core/repeated_records.h"

namespace tessel::comm {
namespace {
thread_local bool t_overlapped = false;
thread_local bool t_pair_overlappable = false;
}  // namespace

void CommLog::add(CommRecord r) {
  r.phase = current_memory_phase();
  r.overlapped = t_overlapped;
  r.pair_overlappable = t_pair_overlappable;
  std::lock_guard<std::mutex> lock(mu_);
  records_.push_back(std::move(r));
}

std::vector<CommRecord> CommLog::records() const {
  std::lock_guard<std::mutex> lock(mu_);
  return records_;
}

std::vector<CommRecord> CommLog::take_records() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<CommRecord> out = std::move(records_);
  records_.clear();
  return out;
}

size_t CommLog::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return records_.size();
}

void CommLog::repeat(size_t begin, size_t end, int64_t times) {
  std::lock_guard<std::mutex> lock(mu_);
  append_repeated(records_, begin, end, times, "collective log");
}

void CommLog::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  records_.clear();
}

CommLog& comm_log() {
  static CommLog* log = new CommLog;  // never destroyed, like the op log
  return *log;
}

OverlappedCommScope::OverlappedCommScope() : CommFlagScope(t_overlapped) {}
PairedOverlapScope::PairedOverlapScope() : CommFlagScope(t_pair_overlappable) {}

}  // namespace tessel::comm
