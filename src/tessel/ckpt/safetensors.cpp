#include "tessel/ckpt/safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>

namespace tessel::ckpt {

namespace {

std::string st_dtype(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::bf16: return "BF16";
    case DType::f16: return "F16";
    case DType::e4m3: return "F8_E4M3";
    case DType::e5m2: return "F8_E5M2";
    case DType::i32: return "I32";
    case DType::i64: return "I64";
  }
  return "?";
}

DType parse_st_dtype(const std::string& s, const std::string& path, const std::string& name) {
  for (DType t : {DType::f32, DType::bf16, DType::f16, DType::e4m3, DType::e5m2, DType::i32, DType::i64})
    if (st_dtype(t) == s) return t;
  TESSEL_FAIL("{}: tensor '{}' has dtype '{}' (supported: F32, BF16, F16, F8_E4M3, F8_E5M2, I32, I64)", path, name, s);
}

}  // namespace

const Tensor& SafetensorsFile::get(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return t;
  TESSEL_FAIL("safetensors: no tensor named '{}' ({} tensors in the file)", name, tensors.size());
}

bool SafetensorsFile::has(const std::string& name) const {
  return std::any_of(tensors.begin(), tensors.end(), [&](const auto& p) { return p.first == name; });
}

SafetensorsFile read_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TESSEL_CHECK(in.good(), "cannot open safetensors file '{}'", path);
  in.seekg(0, std::ios::end);
  const int64_t file_size = in.tellg();
  in.seekg(0);
  uint64_t header_len = 0;
  in.read(reinterpret_cast<char*>(&header_len), 8);
  TESSEL_CHECK(in.good() && file_size >= 8 && header_len <= uint64_t(file_size - 8),
               "{}: truncated or not a safetensors file (header length {} in a {}-byte file)", path, header_len,
               file_size);
  std::string header(header_len, '\0');
  in.read(header.data(), int64_t(header_len));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(header);
  } catch (const std::exception& e) {
    TESSEL_FAIL("{}: header is not valid JSON: {}", path, e.what());
  }
  const int64_t data_start = 8 + int64_t(header_len);
  const int64_t data_size = file_size - data_start;
  SafetensorsFile f;
  std::vector<std::tuple<int64_t, std::string, Tensor>> ordered;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__") {
      for (auto m = it.value().begin(); m != it.value().end(); ++m) f.metadata[m.key()] = m.value().get<std::string>();
      continue;
    }
    const auto& e = it.value();
    const DType dt = parse_st_dtype(e.at("dtype").get<std::string>(), path, it.key());
    const Shape shape = e.at("shape").get<Shape>();
    const int64_t b = e.at("data_offsets")[0].get<int64_t>(), end = e.at("data_offsets")[1].get<int64_t>();
    TESSEL_CHECK(0 <= b && b <= end && end <= data_size &&
                     end - b == shape_numel(shape) * int64_t(dtype_size(dt)),
                 "{}: tensor '{}' has data_offsets [{}, {}] inconsistent with shape {} / file size", path, it.key(), b,
                 end, shape_str(shape));
    Tensor t = Tensor::empty(shape, dt);
    in.seekg(data_start + b);
    in.read(static_cast<char*>(t.raw()), end - b);
    TESSEL_CHECK(in.good(), "{}: could not read tensor '{}'", path, it.key());
    ordered.emplace_back(b, it.key(), t);
  }
  std::sort(ordered.begin(), ordered.end(), [](const auto& a, const auto& b) { return std::get<0>(a) < std::get<0>(b); });
  for (auto& [off, name, t] : ordered) f.tensors.emplace_back(name, t);
  return f;
}

void write_safetensors(const std::string& path, const std::map<std::string, std::string>& metadata,
                       const std::vector<std::pair<std::string, Tensor>>& tensors) {
  nlohmann::ordered_json j;
  if (!metadata.empty()) j["__metadata__"] = metadata;
  int64_t off = 0;
  for (const auto& [name, t] : tensors) {
    TESSEL_CHECK(t.is_contiguous(), "safetensors: tensor '{}' must be contiguous", name);
    j[name] = {{"dtype", st_dtype(t.dtype())}, {"shape", t.shape()}, {"data_offsets", {off, off + int64_t(t.nbytes())}}};
    off += int64_t(t.nbytes());
  }
  std::string header = j.dump();
  header.append((8 - header.size() % 8) % 8, ' ');  // data section 8-byte aligned
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  TESSEL_CHECK(out.good(), "cannot write safetensors file '{}'", path);
  const uint64_t len = header.size();
  out.write(reinterpret_cast<const char*>(&len), 8);
  out.write(header.data(), int64_t(len));
  for (const auto& [name, t] : tensors) out.write(static_cast<const char*>(t.raw()), int64_t(t.nbytes()));
  TESSEL_CHECK(out.good(), "failed writing safetensors file '{}'", path);
}

}  // namespace tessel::ckpt
