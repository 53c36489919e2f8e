#include "tessel/data/index_file.h"

#include <cstring>

#include "tessel/core/check.h"

namespace tessel::data {
namespace {

constexpr size_t kHeaderBytes = 9 + 8 + 1 + 8 + 8;  // magic, version, dtype code, two counts

template <class T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

template <class T>
std::vector<T> load_array(const uint8_t*& p, uint64_t n) {
  std::vector<T> v(n);
  if (n > 0) std::memcpy(v.data(), p, n * sizeof(T));
  p += n * sizeof(T);
  return v;
}

void check_document_index(const std::vector<int64_t>& doc, int64_t nseq, const std::string& idx_path) {
  TESSEL_CHECK(!doc.empty(), "{}: document index has no entries (it runs from 0 to the sequence count {})", idx_path,
               nseq);
  TESSEL_CHECK(doc[0] == 0, "{}: document index entry 0 is {} (the first entry must be 0)", idx_path, doc[0]);
  for (size_t i = 1; i < doc.size(); ++i) {
    TESSEL_CHECK(doc[i] <= nseq, "{}: document index entry {} is {}, past the sequence count {}", idx_path, i, doc[i],
                 nseq);
    TESSEL_CHECK(doc[i] >= doc[i - 1], "{}: document index entry {} is {}, below entry {} ({}): entries must not decrease",
                 idx_path, i, doc[i], i - 1, doc[i - 1]);
  }
  TESSEL_CHECK(doc.back() == nseq, "{}: document index ends at {}, not at the sequence count {}", idx_path, doc.back(),
               nseq);
}

void check_sequences(const IndexFile& f, uint64_t bin_bytes, const std::string& prefix) {
  const std::string idx_path = prefix + ".idx", bin_path = prefix + ".bin";
  const int64_t item = int64_t(index_dtype_size(f.dtype));
  // end never exceeds bin_bytes by more than one sequence (< 2^34 bytes), so it cannot overflow.
  int64_t end = 0;
  for (size_t i = 0; i < f.sizes.size(); ++i) {
    TESSEL_CHECK(f.sizes[i] >= 0, "{}: sequence {} has length {}", idx_path, i, f.sizes[i]);
    TESSEL_CHECK(f.pointers[i] == end,
                 "{}: sequence {} starts at byte {} of the .bin, but the sequences before it end at byte {} (pointers "
                 "must follow the sizes)",
                 idx_path, i, f.pointers[i], end);
    end += int64_t(f.sizes[i]) * item;
    TESSEL_CHECK(uint64_t(end) <= bin_bytes,
                 "dataset '{}': {} is {} bytes but its index describes {} bytes or more (sequence {} ends at byte {})",
                 prefix, bin_path, bin_bytes, end, i, end);
  }
  TESSEL_CHECK(uint64_t(end) == bin_bytes, "dataset '{}': {} is {} bytes but its index describes {} bytes", prefix,
               bin_path, bin_bytes, end);
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

IndexFile parse_index_file(std::span<const uint8_t> idx, uint64_t bin_bytes, const std::string& prefix) {
  const std::string idx_path = prefix + ".idx";
  TESSEL_CHECK(idx.size() >= sizeof(kIndexMagic) && std::memcmp(idx.data(), kIndexMagic, sizeof(kIndexMagic)) == 0,
               "{}: not a Megatron indexed dataset index (bad magic)", idx_path);
  TESSEL_CHECK(idx.size() >= kHeaderBytes, "{}: truncated index ({} bytes; the header alone is {})", idx_path,
               idx.size(), kHeaderBytes);
  const uint8_t* p = idx.data() + sizeof(kIndexMagic);
  const auto version = load<uint64_t>(p);
  TESSEL_CHECK(version == 1, "{}: index version {} is not supported (allowed: 1)", idx_path, version);
  const auto code = load<uint8_t>(p + 8);
  TESSEL_CHECK(code >= 1 && code <= 8, "{}: unknown dtype code {} (allowed: 1..8)", idx_path, int(code));
  IndexFile f;
  f.dtype = IndexDType(code);
  TESSEL_CHECK(f.dtype != IndexDType::f32 && f.dtype != IndexDType::f64, "{}: float token ids are not supported",
               idx_path);
  const auto nseq = load<uint64_t>(p + 9), ndoc = load<uint64_t>(p + 17);
  // 4 + 8 bytes per sequence (size, pointer), 8 per document entry: computed without wrapping, so a
  // huge count cannot alias the file's real size.
  uint64_t seq_bytes = 0, doc_bytes = 0, arrays = 0;
  const bool wraps = __builtin_mul_overflow(nseq, uint64_t(12), &seq_bytes) ||
                     __builtin_mul_overflow(ndoc, uint64_t(8), &doc_bytes) ||
                     __builtin_add_overflow(seq_bytes, doc_bytes, &arrays);
  const uint64_t available = idx.size() - kHeaderBytes;
  TESSEL_CHECK(!wraps && arrays <= available, "{}: index is {} bytes, too small for its counts ({} sequences, {} document entries)",
               idx_path, idx.size(), nseq, ndoc);
  TESSEL_CHECK(arrays == available, "{}: index is {} bytes, but its counts ({} sequences, {} document entries) need {}",
               idx_path, idx.size(), nseq, ndoc, kHeaderBytes + arrays);
  p = idx.data() + kHeaderBytes;
  f.sizes = load_array<int32_t>(p, nseq);
  f.pointers = load_array<int64_t>(p, nseq);
  f.doc_index = load_array<int64_t>(p, ndoc);
  check_document_index(f.doc_index, int64_t(nseq), idx_path);
  check_sequences(f, bin_bytes, prefix);
  return f;
}

}  // namespace tessel::data
