#pragma once
// The JSON header of a safetensors file, checked field by field:
//   {"__metadata__": {str: str}, name: {"dtype": "F32"|..., "shape": [n, ...], "data_offsets": [b, e]}}
// Every departure from that form is a tessel::Error naming the source (file) and the tensor / field.
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "tessel/core/tensor.h"

namespace tessel::ckpt {

// The format caps the header at 100 MB (the reference implementation's MAX_HEADER_SIZE): a larger
// length word is damage, refused before anything is allocated.
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;

struct SafetensorsEntry {
  std::string name;
  DType dtype;
  Shape shape;
  int64_t begin, end;  // byte range within the data section; end - begin = numel * dtype size
};

struct SafetensorsHeader {
  std::map<std::string, std::string> metadata;
  std::vector<SafetensorsEntry> entries;  // by data offset (file order)
};

// Parses and checks a header against a data section of data_bytes bytes. source names the file in
// messages. Pure function of its arguments (a fuzz target for the header alone).
SafetensorsHeader parse_safetensors_header(std::string_view json, int64_t data_bytes, const std::string& source);

std::string safetensors_dtype_name(DType t);  // "F32", "BF16", ...

}  // namespace tessel::ckpt
