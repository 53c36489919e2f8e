#pragma once
// Megatron-LM's indexed dataset: PREFIX.bin holds the token ids of all sequences back to back;
// PREFIX.idx holds
//   magic "MMIDIDX\0\0" (9 bytes), version u64 = 1, dtype code u8 (1 u8, 2 i8, 3 i16, 4 i32, 5 i64,
//   6 f64, 7 f32, 8 u16), sequence count u64, document count u64 (= documents + 1),
//   i32 sequence lengths, i64 byte offsets of each sequence in .bin, i64 document indices
//   (the sequence where each document starts, beginning with 0), all little-endian.
// tessel writes one sequence per document, EOS-terminated; datasets written by Megatron load as is.
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

namespace tessel::data {

enum class IndexDType : uint8_t { u8 = 1, i8 = 2, i16 = 3, i32 = 4, i64 = 5, f64 = 6, f32 = 7, u16 = 8 };
size_t index_dtype_size(IndexDType t);
IndexDType dtype_for_vocab(int64_t vocab_size);  // u16 when every id fits, else i32

class IndexedDatasetBuilder {
 public:
  IndexedDatasetBuilder(const std::string& prefix, IndexDType dtype);
  void add_document(const std::vector<int64_t>& tokens);
  void finalize();  // writes PREFIX.idx; the dataset is complete only after this
  int64_t documents() const { return int64_t(sizes_.size()); }
  int64_t tokens() const { return total_tokens_; }

 private:
  std::string prefix_;
  IndexDType dtype_;
  std::ofstream bin_;
  std::vector<int32_t> sizes_;
  int64_t total_tokens_ = 0;
};

// Memory-mapped reader. Every inconsistency between .idx and .bin is an error naming the file.
class IndexedDataset {
 public:
  explicit IndexedDataset(const std::string& prefix);
  ~IndexedDataset();
  IndexedDataset(const IndexedDataset&) = delete;
  IndexedDataset& operator=(const IndexedDataset&) = delete;

  const std::string& prefix() const { return prefix_; }
  int64_t num_sequences() const { return int64_t(sizes_.size()); }
  int64_t num_documents() const { return int64_t(doc_index_.size()) - 1; }
  int64_t sequence_length(int64_t i) const { return sizes_[size_t(i)]; }
  const std::vector<int64_t>& document_index() const { return doc_index_; }
  IndexDType dtype() const { return dtype_; }
  // Copies tokens [offset, offset + count) of sequence i, widened to int64.
  void read(int64_t seq, int64_t offset, int64_t count, int64_t* out) const;
  int64_t max_token() const;  // scans the data once

 private:
  std::string prefix_;
  IndexDType dtype_;
  std::vector<int32_t> sizes_;
  std::vector<int64_t> pointers_;
  std::vector<int64_t> doc_index_;
  const uint8_t* bin_ = nullptr;
  size_t bin_bytes_ = 0;
};

}  // namespace tessel::data
