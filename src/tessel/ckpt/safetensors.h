#pragma once
// safetensors files: u64 little-endian header length, a JSON header
//   {"__metadata__": {str: str}, name: {"dtype": "F32"|"BF16"|"I64"|..., "shape": [...], "data_offsets": [b, e]}}
// then the packed little-endian data (offsets relative to the data section).
// Reading checks every field (safetensors_header.h): a damaged file is a tessel::Error naming the
// file and the tensor or field, never a crash.
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "tessel/core/tensor.h"

namespace tessel::ckpt {

struct SafetensorsFile {
  std::map<std::string, std::string> metadata;
  std::vector<std::pair<std::string, Tensor>> tensors;  // in file order
  const Tensor& get(const std::string& name) const;    // throws naming the file's tensors
  bool has(const std::string& name) const;
};

SafetensorsFile read_safetensors(const std::string& path);
// The same for a whole file already in memory; source names it in messages. No global state: a
// fuzz target for the complete format.
SafetensorsFile parse_safetensors(std::string_view bytes, const std::string& source);
void write_safetensors(const std::string& path, const std::map<std::string, std::string>& metadata,
                       const std::vector<std::pair<std::string, Tensor>>& tensors);

}  // namespace tessel::ckpt
