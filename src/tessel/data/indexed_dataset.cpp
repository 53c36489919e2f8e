#include "tessel/core/paths.h"
#include "tessel/data/indexed_dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "tessel/core/check.h"

namespace tessel::data {
namespace {

template <class T>
void put(std::ofstream& out, const T& v) {
  out.write(reinterpret_cast<const char*>(&v), sizeof(T));
}

}  // namespace

IndexDType dtype_for_vocab(int64_t vocab_size) { return vocab_size <= 65535 ? IndexDType::u16 : IndexDType::i32; }

IndexedDatasetBuilder::IndexedDatasetBuilder(const std::string& prefix, IndexDType dtype)
    : prefix_(prefix), dtype_(dtype), bin_(prefix + ".bin", std::ios::binary | std::ios::trunc) {
  TESSEL_CHECK(dtype == IndexDType::u16 || dtype == IndexDType::i32 || dtype == IndexDType::i64,
               "dataset '{}': tessel writes token ids as u16, i32 or i64", prefix);
  TESSEL_CHECK(bin_.good(), "cannot write '{}.bin'", prefix);
}

void IndexedDatasetBuilder::add_document(const std::vector<int64_t>& tokens) {
  TESSEL_CHECK(tokens.size() <= size_t(INT32_MAX), "document of {} tokens is longer than the format allows",
               tokens.size());
  const int64_t max_id = dtype_ == IndexDType::u16 ? 65535 : dtype_ == IndexDType::i32 ? INT32_MAX : INT64_MAX;
  for (int64_t t : tokens) {
    TESSEL_CHECK(t >= 0 && t <= max_id, "dataset '{}': token id {} does not fit the dataset's {} ids", prefix_, t,
                 dtype_ == IndexDType::u16 ? "u16" : dtype_ == IndexDType::i32 ? "i32" : "i64");
    switch (dtype_) {
      case IndexDType::u16: put(bin_, uint16_t(t)); break;
      case IndexDType::i32: put(bin_, int32_t(t)); break;
      default: put(bin_, t); break;
    }
  }
  sizes_.push_back(int32_t(tokens.size()));
  total_tokens_ += int64_t(tokens.size());
}

void IndexedDatasetBuilder::finalize() {
  bin_.close();
  TESSEL_CHECK(!bin_.fail(), "failed writing '{}.bin'", prefix_);
  std::ofstream idx(prefix_ + ".idx", std::ios::binary | std::ios::trunc);
  TESSEL_CHECK(idx.good(), "cannot write '{}.idx'", prefix_);
  idx.write(kIndexMagic, sizeof(kIndexMagic));
  put(idx, uint64_t(1));
  put(idx, uint8_t(dtype_));
  put(idx, uint64_t(sizes_.size()));
  put(idx, uint64_t(sizes_.size() + 1));
  for (int32_t s : sizes_) put(idx, s);
  int64_t ptr = 0;
  for (int32_t s : sizes_) {
    put(idx, ptr);
    ptr += int64_t(s) * int64_t(index_dtype_size(dtype_));
  }
  for (size_t d = 0; d <= sizes_.size(); ++d) put(idx, int64_t(d));  // one sequence per document
  TESSEL_CHECK(idx.good(), "failed writing '{}.idx'", prefix_);
}

namespace {

// The whole file, with errors naming it; a missing path is reported by the caller.
std::vector<uint8_t> read_whole_file(const std::string& path) {
  std::error_code ec;
  TESSEL_CHECK(std::filesystem::is_regular_file(path, ec), "{}: not a regular file", path);
  const auto size = std::filesystem::file_size(path, ec);
  std::ifstream in(path, std::ios::binary);
  TESSEL_CHECK(!ec && in.good(), "cannot open {}", path);
  std::vector<uint8_t> buf(size);
  in.read(reinterpret_cast<char*>(buf.data()), std::streamsize(size));
  TESSEL_CHECK(in.good() || size == 0, "cannot read {}", path);
  return buf;
}

template <class T>
void widen(const uint8_t* p, int64_t first, int64_t count, int64_t* out) {
  for (int64_t i = 0; i < count; ++i) {
    T v;
    std::memcpy(&v, p + (first + i) * int64_t(sizeof(T)), sizeof(T));
    out[i] = int64_t(v);
  }
}

}  // namespace

IndexedDataset::IndexedDataset(const std::string& prefix, VocabBound vocab)
    : prefix_(prefix), vocab_(std::move(vocab)) {
  const std::string idx_path = prefix + ".idx", bin_path = prefix + ".bin";
  TESSEL_CHECK(path_exists(idx_path),
               "dataset '{}': index file {} is missing (a dataset is a PREFIX.bin + PREFIX.idx pair; make one with "
               "`tessel preprocess`)", prefix, idx_path);
  TESSEL_CHECK(path_exists(bin_path), "dataset '{}': data file {} is missing", prefix, bin_path);
  std::error_code ec;
  TESSEL_CHECK(std::filesystem::is_regular_file(bin_path, ec), "{}: not a regular file", bin_path);
  const uint64_t bin_size = std::filesystem::file_size(bin_path, ec);
  TESSEL_CHECK(!ec, "cannot open {}", bin_path);
  index_ = parse_index_file(read_whole_file(idx_path), bin_size, prefix);
  bin_bytes_ = size_t(bin_size);
  if (bin_bytes_ > 0) {
    const int fd = ::open(bin_path.c_str(), O_RDONLY);
    TESSEL_CHECK(fd >= 0, "cannot open {}", bin_path);
    void* p = ::mmap(nullptr, bin_bytes_, PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    TESSEL_CHECK(p != MAP_FAILED, "cannot memory-map {}", bin_path);
    bin_ = static_cast<const uint8_t*>(p);
    mapped_ = true;
  }
}

IndexedDataset::IndexedDataset(const std::string& name, std::span<const uint8_t> idx, std::span<const uint8_t> bin,
                               VocabBound vocab)
    : prefix_(name), vocab_(std::move(vocab)), index_(parse_index_file(idx, bin.size(), name)), bin_(bin.data()),
      bin_bytes_(bin.size()) {}

IndexedDataset::~IndexedDataset() {
  if (mapped_) ::munmap(const_cast<uint8_t*>(bin_), bin_bytes_);
}

void IndexedDataset::read(int64_t seq, int64_t offset, int64_t count, int64_t* out) const {
  TESSEL_CHECK(seq >= 0 && seq < num_sequences() && offset >= 0 && count >= 0 &&
                   offset <= sequence_length(seq) - count,
               "dataset '{}': read of [{}, {}) from sequence {} out of range", prefix_, offset, offset + count, seq);
  const uint8_t* p = bin_ + index_.pointers[size_t(seq)];
  switch (index_.dtype) {
    case IndexDType::u8: widen<uint8_t>(p, offset, count, out); break;
    case IndexDType::i8: widen<int8_t>(p, offset, count, out); break;
    case IndexDType::i16: widen<int16_t>(p, offset, count, out); break;
    case IndexDType::u16: widen<uint16_t>(p, offset, count, out); break;
    case IndexDType::i32: widen<int32_t>(p, offset, count, out); break;
    case IndexDType::i64: widen<int64_t>(p, offset, count, out); break;
    default: TESSEL_FAIL("dataset '{}': float token ids are not supported", prefix_);
  }
  if (vocab_.size > 0) check_ids(out, count, seq, offset);
}

void IndexedDataset::check_ids(const int64_t* ids, int64_t count, int64_t seq, int64_t offset) const {
  // One unsigned compare per id (negative ids wrap above the bound); located only when one is bad.
  bool bad = false;
  for (int64_t i = 0; i < count; ++i) bad |= uint64_t(ids[i]) >= uint64_t(vocab_.size);
  if (!bad) return;
  for (int64_t i = 0; i < count; ++i)
    TESSEL_CHECK(ids[i] >= 0 && ids[i] < vocab_.size,
                 "dataset '{}': token id {} (sequence {}, position {}) is outside {}: ids must be in [0, {}); was the "
                 ".bin made with another tokenizer?",
                 prefix_, ids[i], seq, offset + i, vocab_.source, vocab_.size);
}

template <class F>
void IndexedDataset::for_each_sequence(F&& f) const {
  std::vector<int64_t> buf;
  for (int64_t s = 0; s < num_sequences(); ++s) {
    buf.resize(size_t(sequence_length(s)));
    read(s, 0, sequence_length(s), buf.data());
    f(buf);
  }
}

int64_t IndexedDataset::max_token() const {
  int64_t mx = -1;
  for_each_sequence([&](const std::vector<int64_t>& ids) {
    for (int64_t t : ids) mx = std::max(mx, t);
  });
  return mx;
}

void IndexedDataset::scan_token_ids() const {
  for_each_sequence([](const std::vector<int64_t>&) {});
}

}  // namespace tessel::data
