// Damaged Megatron .idx files: every header count, sequence length, pointer and document-index
// entry is checked when the dataset opens, so a bad entry is a tessel::Error naming the file and the
// entry, never an out-of-bounds read later (a document-index entry of 1e12 used to crash sampling,
// a decreasing one trained silently on garbage). The files are written byte by byte.
#include <gtest/gtest.h>

#include "support/scratch_dir.h"
#include "data/idx_bytes.h"

#include <span>

#include "tessel/core/check.h"
#include "tessel/data/gpt_dataset.h"
#include "tessel/data/indexed_dataset.h"

using namespace tessel::data;
using tessel::testing::packed_pointers;
using tessel::testing::raw_idx;
using tessel::testing::write_file_bytes;

namespace {

struct Scratch : tessel::testing::ScratchDir {
  Scratch() : ScratchDir("tessel-idx") {}
};

constexpr uint8_t kI32 = 4;                          // dtype code of i32 token ids
const std::vector<int32_t> kSizes{3, 2, 4};          // three sequences: 36 bytes of i32 ids
const std::vector<int64_t> kPointers{0, 12, 20};     // packed from byte 0
const std::vector<int64_t> kDocs{0, 1, 3};           // two documents: sequence 0, sequences 1..2
constexpr size_t kBinBytes = 36;

struct BadIndex {
  const char* name;
  std::string idx;
  size_t bin_bytes;
  std::string message;  // expected after the file's name; "{idx}" / "{bin}" / "{prefix}" stand for the paths
};

void PrintTo(const BadIndex& c, std::ostream* os) { *os << c.name; }

std::string expand(std::string m, const std::string& prefix) {
  for (const auto& [key, value] : {std::pair<std::string, std::string>{"{idx}", prefix + ".idx"},
                                   {"{bin}", prefix + ".bin"},
                                   {"{prefix}", prefix}}) {
    for (size_t at = m.find(key); at != std::string::npos; at = m.find(key)) m.replace(at, key.size(), value);
  }
  return m;
}

std::string error_opening(const std::string& prefix) {
  try {
    IndexedDataset ds(prefix);
  } catch (const tessel::Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a tessel::Error: " << e.what();
  }
  return "";
}

std::string error_from_memory(const std::string& idx, size_t bin_bytes) {
  const std::vector<uint8_t> bin(bin_bytes, 0);
  try {
    IndexedDataset ds("mem", std::span(reinterpret_cast<const uint8_t*>(idx.data()), idx.size()), bin);
  } catch (const tessel::Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a tessel::Error: " << e.what();
  }
  return "";
}

class DamagedIndex : public ::testing::TestWithParam<BadIndex> {};

TEST_P(DamagedIndex, IsRefusedWhenTheDatasetOpens) {
  const BadIndex& c = GetParam();
  Scratch s;
  const std::string prefix = s / "d";
  write_file_bytes(prefix + ".idx", c.idx);
  write_file_bytes(prefix + ".bin", std::string(c.bin_bytes, '\0'));
  const std::string err = error_opening(prefix);
  EXPECT_NE(err.find(expand(c.message, prefix)), std::string::npos) << "got: " << err;
  const std::string err_mem = error_from_memory(c.idx, c.bin_bytes);
  EXPECT_NE(err_mem.find(expand(c.message, "mem")), std::string::npos) << "got: " << err_mem;
}

// nseq = 3 + 2^62: 12 bytes per sequence wrap a 64-bit size back to the 36 the arrays hold.
constexpr uint64_t kWrappingNseq = 3 + (uint64_t(1) << 62);
// ndoc = 3 + 2^61: 8 bytes per entry wrap to the 24 the entries hold.
constexpr uint64_t kWrappingNdoc = 3 + (uint64_t(1) << 61);

const BadIndex kBadIndexes[] = {
    {"doc_index_entry_far_out_of_range", raw_idx(kI32, 3, 3, kSizes, kPointers, {0, 1'000'000'000'000, 3}),
     kBinBytes, "{idx}: document index entry 1 is 1000000000000, past the sequence count 3"},
    {"doc_index_entry_past_count", raw_idx(kI32, 3, 4, kSizes, kPointers, {0, 4, 2, 3}), kBinBytes,
     "{idx}: document index entry 1 is 4, past the sequence count 3"},
    {"doc_index_decreasing", raw_idx(kI32, 3, 4, kSizes, kPointers, {0, 2, 1, 3}), kBinBytes,
     "{idx}: document index entry 2 is 1, below entry 1 (2): entries must not decrease"},
    {"doc_index_negative", raw_idx(kI32, 3, 3, kSizes, kPointers, {0, -5, 3}), kBinBytes,
     "{idx}: document index entry 1 is -5, below entry 0 (0): entries must not decrease"},
    {"doc_index_not_starting_at_zero", raw_idx(kI32, 3, 2, kSizes, kPointers, {1, 3}), kBinBytes,
     "{idx}: document index entry 0 is 1 (the first entry must be 0)"},
    {"doc_index_not_ending_at_count", raw_idx(kI32, 3, 3, kSizes, kPointers, {0, 1, 2}), kBinBytes,
     "{idx}: document index ends at 2, not at the sequence count 3"},
    {"doc_index_empty", raw_idx(kI32, 3, 0, kSizes, kPointers, {}), kBinBytes,
     "{idx}: document index has no entries (it runs from 0 to the sequence count 3)"},
    {"nseq_wrapping_the_size_check", raw_idx(kI32, kWrappingNseq, 3, kSizes, kPointers, kDocs), kBinBytes,
     "{idx}: index is 94 bytes, too small for its counts (4611686018427387907 sequences, 3 document entries)"},
    {"ndoc_wrapping_the_size_check", raw_idx(kI32, 3, kWrappingNdoc, kSizes, kPointers, kDocs), kBinBytes,
     "{idx}: index is 94 bytes, too small for its counts (3 sequences, 2305843009213693955 document entries)"},
    {"counts_larger_than_the_file", raw_idx(kI32, 1'000'000, 3, kSizes, kPointers, kDocs), kBinBytes,
     "{idx}: index is 94 bytes, too small for its counts (1000000 sequences, 3 document entries)"},
    {"trailing_bytes", raw_idx(kI32, 3, 3, kSizes, kPointers, kDocs) + "xyz", kBinBytes,
     "{idx}: index is 97 bytes, but its counts (3 sequences, 3 document entries) need 94"},
    {"sequence_length_negative", raw_idx(kI32, 3, 3, {3, -2, 4}, kPointers, kDocs), kBinBytes,
     "{idx}: sequence 1 has length -2"},
    {"pointer_with_a_gap", raw_idx(kI32, 3, 3, kSizes, {0, 16, 24}, kDocs), kBinBytes + 4,
     "{idx}: sequence 1 starts at byte 16 of the .bin, but the sequences before it end at byte 12 (pointers must "
     "follow the sizes)"},
    {"pointer_not_starting_at_zero", raw_idx(kI32, 3, 3, kSizes, {4, 16, 24}, kDocs), kBinBytes + 4,
     "{idx}: sequence 0 starts at byte 4 of the .bin, but the sequences before it end at byte 0"},
    {"last_sequence_past_the_bin", raw_idx(kI32, 3, 3, kSizes, kPointers, kDocs), 30,
     "dataset '{prefix}': {bin} is 30 bytes but its index describes 36 bytes or more (sequence 2 ends at byte 36)"},
    {"sequence_lengths_past_the_bin",
     raw_idx(kI32, 3, 3, {3, 2, 2'000'000'000}, packed_pointers({3, 2, 2'000'000'000}, 4), kDocs), kBinBytes,
     "dataset '{prefix}': {bin} is 36 bytes but its index describes 8000000020 bytes or more (sequence 2 ends at "
     "byte 8000000020)"},
    {"bin_longer_than_described", raw_idx(kI32, 3, 3, kSizes, kPointers, kDocs), kBinBytes + 8,
     "dataset '{prefix}': {bin} is 44 bytes but its index describes 36 bytes"},
};

INSTANTIATE_TEST_SUITE_P(Cases, DamagedIndex, ::testing::ValuesIn(kBadIndexes),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(DamagedIndex, WellFormedBaselineOpens) {
  Scratch s;
  write_file_bytes(s / "d.idx", raw_idx(kI32, 3, 3, kSizes, kPointers, kDocs));
  write_file_bytes(s / "d.bin", std::string(kBinBytes, '\0'));
  EXPECT_EQ(error_opening(s / "d"), "");
  // Empty documents (repeated entries) are allowed, as Megatron writes them.
  write_file_bytes(s / "d.idx", raw_idx(kI32, 3, 5, kSizes, kPointers, {0, 1, 1, 3, 3}));
  EXPECT_EQ(error_opening(s / "d"), "");
  EXPECT_EQ(error_from_memory(raw_idx(kI32, 3, 3, kSizes, kPointers, kDocs), kBinBytes), "");
}

// What used to crash: sampling over a document index whose middle entry is far out of range.
TEST(DamagedIndex, SamplingNeverSeesAnOutOfRangeDocumentEntry) {
  Scratch s;
  write_file_bytes(s / "d.idx", raw_idx(kI32, 3, 3, kSizes, kPointers, {0, 1'000'000'000'000, 3}));
  write_file_bytes(s / "d.bin", std::string(kBinBytes, '\0'));
  try {
    build_split({{1.0}, {s / "d"}}, "1", 0, 4, 4, 1, {});
    FAIL() << "no error";
  } catch (const tessel::Error& e) {
    EXPECT_NE(std::string(e.what()).find("document index entry 1 is 1000000000000"), std::string::npos) << e.what();
  }
}

}  // namespace
