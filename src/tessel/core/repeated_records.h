#pragma once
// The step logs' shared shortcut (kernels::OpLog, comm::CommLog): records [begin, end) appended once
// more, each standing for `times` of itself (its `count` multiplied), for calls a meta run accounted
// without making them (nn/alike_calls.h).
#include <cstdint>
#include <vector>

#include "tessel/core/check.h"

namespace tessel {

template <class Record>
void append_repeated(std::vector<Record>& records, size_t begin, size_t end, int64_t times, const char* log) {
  TESSEL_CHECK(begin <= end && end <= records.size() && times >= 1, "{}: cannot repeat records [{}, {}) of {}", log,
               begin, end, records.size());
  records.reserve(records.size() + (end - begin));
  for (size_t i = begin; i < end; ++i) {
    Record r = records[i];
    r.count *= times;
    records.push_back(std::move(r));
  }
}

}  // namespace tessel
