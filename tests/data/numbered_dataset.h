#pragma once
// A small dataset whose token ids are their positions, with one id replaced: for tests of what
// readers do with an id they must refuse.
#include <string>
#include <vector>

#include "tessel/data/indexed_dataset.h"

namespace tessel::testing {

// Four documents of 20 tokens each, ids 0..19; `bad` replaces token `at` of document `doc` (of
// every document when doc is -1).
inline std::string write_numbered_dataset(const std::string& prefix, int64_t bad, int64_t doc, int64_t at) {
  data::IndexedDatasetBuilder b(prefix, data::IndexDType::i32);
  for (int64_t d = 0; d < 4; ++d) {
    std::vector<int64_t> t;
    for (int64_t j = 0; j < 20; ++j) t.push_back((d == doc || doc < 0) && j == at ? bad : j);
    b.add_document(t);
  }
  b.finalize();
  return prefix;
}

}  // namespace tessel::testing
