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

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};

template <class T>
void put(std::ofstream& out, const T& v) {
  out.write(reinterpret_cast<const char*>(&v), sizeof(T));
}

template <class T>
T get(const std::vector<char>& buf, size_t& pos, const std::string& file) {
  TESSEL_CHECK(pos + sizeof(T) <= buf.size(), "{}: truncated index (ends at byte {})", file, buf.size());
  T v;
  std::memcpy(&v, buf.data() + pos, sizeof(T));
  pos += sizeof(T);
  return v;
}

}  // namespace

size_t index_dtype_size(IndexDType t) {
  switch (t) {
    case IndexDType::u8: case IndexDType::i8: return 1;
    case IndexDType::i16: case IndexDType::u16: return 2;
    case IndexDType::i32: case IndexDType::f32: return 4;
    case IndexDType::i64: case IndexDType::f64: return 8;
  }
  return 0;
}

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
  for (int64_t t : tokens) {
    switch (dtype_) {
      case IndexDType::u16: {
        TESSEL_CHECK(t >= 0 && t <= 65535, "token id {} does not fit the dataset's u16", t);
        put(bin_, uint16_t(t));
        break;
      }
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
  idx.write(kMagic, 9);
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

IndexedDataset::IndexedDataset(const std::string& prefix) : prefix_(prefix) {
  const std::string idx_path = prefix + ".idx", bin_path = prefix + ".bin";
  TESSEL_CHECK(std::filesystem::exists(idx_path),
               "dataset '{}': index file {} is missing (a dataset is a PREFIX.bin + PREFIX.idx pair; make one with "
               "`tessel preprocess`)", prefix, idx_path);
  TESSEL_CHECK(std::filesystem::exists(bin_path), "dataset '{}': data file {} is missing", prefix, bin_path);
  std::ifstream in(idx_path, std::ios::binary);
  std::vector<char> buf((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  TESSEL_CHECK(buf.size() >= 34 && std::memcmp(buf.data(), kMagic, 9) == 0,
               "{}: not a Megatron indexed dataset index (bad magic)", idx_path);
  size_t pos = 9;
  const auto version = get<uint64_t>(buf, pos, idx_path);
  TESSEL_CHECK(version == 1, "{}: index version {} is not supported (allowed: 1)", idx_path, version);
  const auto code = get<uint8_t>(buf, pos, idx_path);
  TESSEL_CHECK(code >= 1 && code <= 8, "{}: unknown dtype code {} (allowed: 1..8)", idx_path, int(code));
  dtype_ = IndexDType(code);
  TESSEL_CHECK(dtype_ != IndexDType::f32 && dtype_ != IndexDType::f64, "{}: float token ids are not supported",
               idx_path);
  const auto nseq = get<uint64_t>(buf, pos, idx_path);
  const auto ndoc = get<uint64_t>(buf, pos, idx_path);
  const size_t need = pos + nseq * 4 + nseq * 8 + ndoc * 8;
  TESSEL_CHECK(buf.size() == need, "{}: index is {} bytes, but its counts ({} sequences, {} document entries) need {}",
               idx_path, buf.size(), nseq, ndoc, need);
  sizes_.resize(nseq);
  pointers_.resize(nseq);
  doc_index_.resize(ndoc);
  std::memcpy(sizes_.data(), buf.data() + pos, nseq * 4);
  pos += nseq * 4;
  std::memcpy(pointers_.data(), buf.data() + pos, nseq * 8);
  pos += nseq * 8;
  std::memcpy(doc_index_.data(), buf.data() + pos, ndoc * 8);
  TESSEL_CHECK(ndoc >= 1 && doc_index_.front() == 0 && doc_index_.back() == int64_t(nseq),
               "{}: document index must start at 0 and end at the sequence count {}", idx_path, nseq);
  int64_t expect_ptr = 0;
  const int64_t item = int64_t(index_dtype_size(dtype_));
  for (size_t i = 0; i < nseq; ++i) {
    TESSEL_CHECK(sizes_[i] >= 0 && pointers_[i] == expect_ptr, "{}: sequence {} has offset {} (expected {})",
                 idx_path, i, pointers_[i], expect_ptr);
    expect_ptr += int64_t(sizes_[i]) * item;
  }
  const int64_t bin_size = int64_t(std::filesystem::file_size(bin_path));
  TESSEL_CHECK(bin_size == expect_ptr, "dataset '{}': {} is {} bytes but its index describes {} bytes", prefix,
               bin_path, bin_size, expect_ptr);
  bin_bytes_ = size_t(bin_size);
  if (bin_bytes_ > 0) {
    const int fd = ::open(bin_path.c_str(), O_RDONLY);
    TESSEL_CHECK(fd >= 0, "cannot open {}", bin_path);
    void* p = ::mmap(nullptr, bin_bytes_, PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    TESSEL_CHECK(p != MAP_FAILED, "cannot memory-map {}", bin_path);
    bin_ = static_cast<const uint8_t*>(p);
  }
}

IndexedDataset::~IndexedDataset() {
  if (bin_) ::munmap(const_cast<uint8_t*>(bin_), bin_bytes_);
}

void IndexedDataset::read(int64_t seq, int64_t offset, int64_t count, int64_t* out) const {
  TESSEL_CHECK(seq >= 0 && seq < num_sequences() && offset >= 0 && offset + count <= sizes_[size_t(seq)],
               "dataset '{}': read of [{}, {}) from sequence {} out of range", prefix_, offset, offset + count, seq);
  const uint8_t* p = bin_ + pointers_[size_t(seq)];
  for (int64_t i = offset; i < offset + count; ++i) {
    switch (dtype_) {
      case IndexDType::u8: *out++ = p[i]; break;
      case IndexDType::i8: *out++ = reinterpret_cast<const int8_t*>(p)[i]; break;
      case IndexDType::i16: { int16_t v; std::memcpy(&v, p + 2 * i, 2); *out++ = v; break; }
      case IndexDType::u16: { uint16_t v; std::memcpy(&v, p + 2 * i, 2); *out++ = v; break; }
      case IndexDType::i32: { int32_t v; std::memcpy(&v, p + 4 * i, 4); *out++ = v; break; }
      case IndexDType::i64: { int64_t v; std::memcpy(&v, p + 8 * i, 8); *out++ = v; break; }
      default: TESSEL_FAIL("dataset '{}': float token ids are not supported", prefix_);
    }
  }
}

int64_t IndexedDataset::max_token() const {
  int64_t mx = -1;
  std::vector<int64_t> buf;
  for (int64_t s = 0; s < num_sequences(); ++s) {
    buf.resize(size_t(sizes_[size_t(s)]));
    read(s, 0, sizes_[size_t(s)], buf.data());
    for (int64_t t : buf) mx = std::max(mx, t);
  }
  return mx;
}

}  // namespace tessel::data
