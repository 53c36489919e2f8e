#pragma once
// safetensors files: u64 little-endian header length, a JSON header
//   {"__metadata__": {str: str}, name: {"dtype": "F32"|"BF16"|"I64"|..., "shape": [...], "data_offsets": [b, e]}}
// then the packed little-endian data (offsets relative to the data section).
#include <map>
#include <string>
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
void write_safetensors(const std::string& path, const std::map<std::string, std::string>& metadata,
                       const std::vector<std::pair<std::string, Tensor>>& tensors);

}  // namespace tessel::ckpt
