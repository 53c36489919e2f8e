// Megatron .bin/.idx: tessel's writer is byte-compatible with the format as REFERENCE.md states it
// (the expected bytes are assembled here independently), datasets in Megatron's layout (several
// sequences per document, other dtypes) load unchanged, and damaged pairs are refused by name.
#include <gtest/gtest.h>

#include "support/scratch_dir.h"
#include "data/idx_bytes.h"

#include <cstring>
#include <filesystem>
#include <fstream>

#include "tessel/core/check.h"
#include "tessel/data/indexed_dataset.h"

using namespace tessel::data;
namespace fs = std::filesystem;

namespace {

struct Scratch : tessel::testing::ScratchDir {
  Scratch() : ScratchDir("tessel-data") {}
};

using tessel::testing::append_bytes;
using tessel::testing::spec_idx;
using tessel::testing::read_file_bytes;
using tessel::testing::write_file_bytes;

TEST(IndexedDataset, WriterIsByteCompatibleWithTheSpec) {
  Scratch s;
  const std::vector<std::vector<int64_t>> docs{{5, 6, 7, 2}, {9, 2}, {65535, 0, 1, 2, 2}};
  IndexedDatasetBuilder b(s.dir + "/d", IndexDType::u16);
  for (const auto& d : docs) b.add_document(d);
  b.finalize();
  std::string bin;
  for (const auto& d : docs)
    for (int64_t t : d) append_bytes<uint16_t>(bin, uint16_t(t));
  EXPECT_EQ(read_file_bytes(s.dir + "/d.bin"), bin);
  EXPECT_EQ(read_file_bytes(s.dir + "/d.idx"), spec_idx(8, 2, {4, 2, 5}, {0, 1, 2, 3}));
}

TEST(IndexedDataset, ReadsMegatronLayoutWithSeveralSequencesPerDocument) {
  Scratch s;
  // i32 tokens, 4 sequences in 2 documents (document 0 = sequences 0..2).
  const std::vector<std::vector<int32_t>> seqs{{1, 2}, {3}, {4, 5, 6}, {70000, 8}};
  std::string bin;
  std::vector<int32_t> sizes;
  for (const auto& q : seqs) {
    sizes.push_back(int32_t(q.size()));
    for (int32_t t : q) append_bytes<int32_t>(bin, t);
  }
  write_file_bytes(s.dir + "/m.bin", bin);
  write_file_bytes(s.dir + "/m.idx", spec_idx(4, 4, sizes, {0, 3, 4}));
  IndexedDataset ds(s.dir + "/m");
  EXPECT_EQ(ds.num_sequences(), 4);
  EXPECT_EQ(ds.num_documents(), 2);
  EXPECT_EQ(ds.sequence_length(2), 3);
  std::vector<int64_t> out(3);
  ds.read(2, 0, 3, out.data());
  EXPECT_EQ(out, (std::vector<int64_t>{4, 5, 6}));
  ds.read(3, 0, 2, out.data());
  EXPECT_EQ(out[0], 70000);
  EXPECT_EQ(ds.max_token(), 70000);
}

std::string error_of(const std::string& prefix) {
  try {
    IndexedDataset ds(prefix);
  } catch (const tessel::Error& e) {
    return e.what();
  }
  return "";
}

TEST(IndexedDataset, DamagedPairsAreRefusedByName) {
  Scratch s;
  IndexedDatasetBuilder b(s.dir + "/d", IndexDType::i32);
  b.add_document({1, 2, 3});
  b.add_document({4, 5});
  b.finalize();
  EXPECT_TRUE(error_of(s.dir + "/d").empty());
  EXPECT_NE(error_of(s.dir + "/nothing").find("nothing.idx is missing"), std::string::npos);
  // .bin shorter than its index says.
  fs::resize_file(s.dir + "/d.bin", 12);
  EXPECT_NE(error_of(s.dir + "/d").find("d.bin is 12 bytes but its index describes 20 bytes"), std::string::npos)
      << error_of(s.dir + "/d");
  // Bad magic and truncated index.
  std::string idx = read_file_bytes(s.dir + "/d.idx");
  write_file_bytes(s.dir + "/e.bin", read_file_bytes(s.dir + "/d.bin"));
  write_file_bytes(s.dir + "/e.idx", "XXXXXXXXX" + idx.substr(9));
  EXPECT_NE(error_of(s.dir + "/e").find("bad magic"), std::string::npos);
  write_file_bytes(s.dir + "/e.idx", idx.substr(0, idx.size() - 3));
  EXPECT_NE(error_of(s.dir + "/e").find("index is"), std::string::npos) << error_of(s.dir + "/e");
}

}  // namespace
