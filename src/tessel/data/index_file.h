#pragma once
// The .idx half of a Megatron indexed dataset (layout in indexed_dataset.h), parsed from its bytes
// and checked against the size of its .bin in one linear pass, before anything reads token data:
//   - the counts fit the file (sizes computed with overflow checks, before any allocation);
//   - the document index starts at 0, never decreases, never passes the sequence count and ends at it;
//   - sequence lengths are non-negative and the pointers pack the sequences back to back from byte 0
//     (pointer[i + 1] = pointer[i] + size[i] * item size), ending exactly at the end of the .bin.
// Errors name PREFIX.idx or PREFIX.bin and the offending entry.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace tessel::data {

inline constexpr char kIndexMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};

enum class IndexDType : uint8_t { u8 = 1, i8 = 2, i16 = 3, i32 = 4, i64 = 5, f64 = 6, f32 = 7, u16 = 8 };
size_t index_dtype_size(IndexDType t);

struct IndexFile {
  IndexDType dtype;
  std::vector<int32_t> sizes;      // tokens per sequence
  std::vector<int64_t> pointers;   // byte offset of each sequence in the .bin
  std::vector<int64_t> doc_index;  // first sequence of each document, then the sequence count
};

// No global state and no file access: a fuzz target for the index format.
IndexFile parse_index_file(std::span<const uint8_t> idx, uint64_t bin_bytes, const std::string& prefix);

}  // namespace tessel::data
