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
#include <span>
#include <string>
#include <vector>

#include "tessel/data/index_file.h"

namespace tessel::data {

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

// The token ids a reader accepts: [0, size). size 0 accepts any id (tools that only inspect data).
struct VocabBound {
  int64_t size = 0;
  std::string source;  // where the bound comes from, for messages: "model.vocab_size", "the vocabulary of tokenizer 'x'"
};

// Memory-mapped reader. Every inconsistency between .idx and .bin is an error naming the file
// (checked on opening: index_file.h); with a VocabBound every read refuses ids outside it, naming
// the dataset, the id and where it sits.
class IndexedDataset {
 public:
  explicit IndexedDataset(const std::string& prefix, VocabBound vocab = {});
  // A pair already in memory (no file access, no global state: a fuzz target); bin must outlive the
  // dataset. name stands for the prefix in messages.
  IndexedDataset(const std::string& name, std::span<const uint8_t> idx, std::span<const uint8_t> bin,
                 VocabBound vocab = {});
  ~IndexedDataset();
  IndexedDataset(const IndexedDataset&) = delete;
  IndexedDataset& operator=(const IndexedDataset&) = delete;

  const std::string& prefix() const { return prefix_; }
  int64_t num_sequences() const { return int64_t(index_.sizes.size()); }
  int64_t num_documents() const { return int64_t(index_.doc_index.size()) - 1; }
  int64_t sequence_length(int64_t i) const { return index_.sizes[size_t(i)]; }
  const std::vector<int64_t>& document_index() const { return index_.doc_index; }
  IndexDType dtype() const { return index_.dtype; }
  // Copies tokens [offset, offset + count) of sequence i, widened to int64.
  void read(int64_t seq, int64_t offset, int64_t count, int64_t* out) const;
  int64_t max_token() const;      // scans the data once
  void scan_token_ids() const;    // reads every token once: an id outside the bound is an error now

 private:
  template <class F>
  void for_each_sequence(F&& f) const;
  void check_ids(const int64_t* ids, int64_t count, int64_t seq, int64_t offset) const;

  std::string prefix_;
  VocabBound vocab_;
  IndexFile index_;
  const uint8_t* bin_ = nullptr;
  size_t bin_bytes_ = 0;
  bool mapped_ = false;  // bin_ is this object's mmap of PREFIX.bin
};

}  // namespace tessel::data
