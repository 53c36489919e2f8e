#pragma once
// Megatron .idx / .bin bytes assembled by hand from the format as REFERENCE.md states it, so tests
// compare the reader and writer against an independent rendering (and can write damaged files).
#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace tessel::testing {

template <class T>
void append_bytes(std::string& s, T v) {
  s.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

// Any .idx, consistent or not: the header's counts are written as given, independently of the arrays.
inline std::string raw_idx(uint8_t code, uint64_t nseq, uint64_t ndoc, const std::vector<int32_t>& sizes,
                           const std::vector<int64_t>& pointers, const std::vector<int64_t>& docs) {
  std::string s("MMIDIDX\0\0", 9);
  append_bytes<uint64_t>(s, 1);
  append_bytes<uint8_t>(s, code);
  append_bytes<uint64_t>(s, nseq);
  append_bytes<uint64_t>(s, ndoc);
  for (int32_t x : sizes) append_bytes<int32_t>(s, x);
  for (int64_t p : pointers) append_bytes<int64_t>(s, p);
  for (int64_t d : docs) append_bytes<int64_t>(s, d);
  return s;
}

// Byte offsets of sequences packed back to back from byte 0.
inline std::vector<int64_t> packed_pointers(const std::vector<int32_t>& sizes, size_t item) {
  std::vector<int64_t> p;
  int64_t at = 0;
  for (int32_t x : sizes) {
    p.push_back(at);
    at += int64_t(x) * int64_t(item);
  }
  return p;
}

// A well-formed .idx per the spec: magic, version, dtype code, counts, sizes, byte pointers, doc index.
inline std::string spec_idx(uint8_t code, size_t item, const std::vector<int32_t>& sizes,
                            const std::vector<int64_t>& docs) {
  return raw_idx(code, sizes.size(), docs.size(), sizes, packed_pointers(sizes, item), docs);
}

inline std::string read_file_bytes(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_file_bytes(const std::string& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << bytes;
}

}  // namespace tessel::testing
