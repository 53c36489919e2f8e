#pragma once
// safetensors files: u64 little-endian header length, a JSON header
//   {"__metadata__": {str: str}, name: {"dtype": "F32"|"BF16"|"I64"|..., "shape": [...], "data_offsets": [b, e]}}
// then the packed little-endian data (offsets relative to the data section).
// Reading checks every field (safetensors_header.h): a damaged file is a tessel::Error naming the
// file and the tensor or field, never a crash.
#include <fstream>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "tessel/ckpt/safetensors_header.h"
#include "tessel/core/tensor.h"

namespace tessel::ckpt {

struct SafetensorsFile {
  std::map<std::string, std::string> metadata;
  std::vector<std::pair<std::string, Tensor>> tensors;  // in file order
  const Tensor& get(const std::string& name) const;    // throws naming the file's tensors
  bool has(const std::string& name) const;
};

SafetensorsFile read_safetensors(const std::string& path);

// One file's header, with tensors read one at a time when asked for (a checkpoint piece is read
// without the rest of its file in memory).
class SafetensorsReader {
 public:
  explicit SafetensorsReader(std::string path);  // reads and checks the header; throws naming the file
  const std::vector<SafetensorsEntry>& entries() const { return header_.entries; }
  const SafetensorsEntry* find(const std::string& name) const;  // null when the file has no such tensor
  Tensor read(const std::string& name);                         // throws naming the file and the tensor
  // Bytes [begin, begin + n) of tensor `name`'s data into dst; throws naming the file and the tensor.
  void read_bytes(const std::string& name, int64_t begin, int64_t n, void* dst);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::ifstream in_;
  SafetensorsHeader header_;
  int64_t data_start_ = 0;
};
// The same for a whole file already in memory; source names it in messages. No global state: a
// fuzz target for the complete format.
SafetensorsFile parse_safetensors(std::string_view bytes, const std::string& source);
// Fault injection (resilience `disk-full`): while on, every checkpoint file write fails as a full
// disk makes it fail (ENOSPC), after the file was created.
void simulate_disk_full(bool on);
void fail_if_disk_full(const std::string& path);  // throws "cannot write PATH: No space left on device" while on
// Writes the file; returns the CRC-32 (zlib) and size of the bytes written, computed as they are
// written (a checkpoint's metadata records both without reading the file back).
std::pair<uint32_t, int64_t> write_safetensors(const std::string& path, const std::map<std::string, std::string>& metadata,
                                               const std::vector<std::pair<std::string, Tensor>>& tensors);

}  // namespace tessel::ckpt
