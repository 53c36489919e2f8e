#include "tessel/ckpt/safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <fstream>

#include "tessel/ckpt/checkpoint_files.h"
#include "tessel/ckpt/file_writer.h"
#include "tessel/ckpt/safetensors_header.h"
#include "tessel/core/device_arena.h"

namespace tessel::ckpt {

namespace {

// Where a file's bytes come from: a file read piecewise (tensors are not held twice in memory) or
// a buffer. Callers only ask for ranges already checked against the size.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual bool read(int64_t offset, int64_t n, void* dst) = 0;  // false on an I/O error
};

class FileSource : public ByteSource {
 public:
  explicit FileSource(std::ifstream& in) : in_(in) {}
  bool read(int64_t offset, int64_t n, void* dst) override {
    in_.seekg(offset);
    in_.read(static_cast<char*>(dst), n);
    return in_.good();
  }

 private:
  std::ifstream& in_;
};

class BufferSource : public ByteSource {
 public:
  explicit BufferSource(std::string_view bytes) : bytes_(bytes) {}
  bool read(int64_t offset, int64_t n, void* dst) override {
    if (n > 0) std::memcpy(dst, bytes_.data() + offset, size_t(n));
    return true;
  }

 private:
  std::string_view bytes_;
};

// The checked header and where the data section starts.
std::pair<SafetensorsHeader, int64_t> read_header(ByteSource& src, int64_t size, const std::string& source) {
  TESSEL_CHECK(size >= 8, "{}: {} bytes, too short for a safetensors file (it starts with an 8-byte header length)",
               source, size);
  unsigned char word[8];
  TESSEL_CHECK(src.read(0, 8, word), "{}: could not read the header length", source);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = header_len << 8 | word[i];  // little-endian
  TESSEL_CHECK(header_len <= uint64_t(size - 8), "{}: header length {} runs past the end of the file ({} bytes)",
               source, header_len, size);
  TESSEL_CHECK(header_len <= kSafetensorsMaxHeaderBytes,
               "{}: header length {} exceeds the safetensors limit of {} bytes", source, header_len,
               kSafetensorsMaxHeaderBytes);
  std::string header(header_len, '\0');
  TESSEL_CHECK(src.read(8, int64_t(header_len), header.data()), "{}: could not read the header", source);
  const int64_t data_start = 8 + int64_t(header_len);
  return {parse_safetensors_header(header, size - data_start, source), data_start};
}

Tensor read_entry(ByteSource& src, int64_t data_start, const SafetensorsEntry& e, const std::string& source) {
  Tensor t = Tensor::empty(e.shape, e.dtype);
  TESSEL_CHECK(src.read(data_start + e.begin, e.end - e.begin, t.raw()), "{}: could not read tensor '{}'", source,
               e.name);
  return t;
}

SafetensorsFile read_from(ByteSource& src, int64_t size, const std::string& source) {
  const auto [h, data_start] = read_header(src, size, source);
  SafetensorsFile f;
  f.metadata = h.metadata;
  for (const SafetensorsEntry& e : h.entries) f.tensors.emplace_back(e.name, read_entry(src, data_start, e, source));
  return f;
}

// Opens a regular file and returns its size; throws naming it.
int64_t open_regular(const std::string& path, std::ifstream& in) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto status = fs::status(path, ec);
  TESSEL_CHECK(!ec && fs::exists(status), "cannot open safetensors file '{}'", path);
  TESSEL_CHECK(fs::is_regular_file(status), "{}: not a regular file", path);
  in.open(path, std::ios::binary);
  const auto size = fs::file_size(path, ec);
  TESSEL_CHECK(in.good() && !ec, "cannot open safetensors file '{}'", path);
  return int64_t(size);
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
  const DeviceAccessScope host_copy;  // file contents into tensors: a host-to-device copy
  std::ifstream in;
  const int64_t size = open_regular(path, in);
  FileSource src(in);
  return read_from(src, size, path);
}

SafetensorsReader::SafetensorsReader(std::string path) : path_(std::move(path)) {
  const int64_t size = open_regular(path_, in_);
  FileSource src(in_);
  auto [h, data_start] = read_header(src, size, path_);
  header_ = std::move(h);
  data_start_ = data_start;
}

const SafetensorsEntry* SafetensorsReader::find(const std::string& name) const {
  for (const auto& e : header_.entries)
    if (e.name == name) return &e;
  return nullptr;
}

Tensor SafetensorsReader::read(const std::string& name) {
  const DeviceAccessScope host_copy;  // file contents into a tensor: a host-to-device copy
  const SafetensorsEntry* e = find(name);
  TESSEL_CHECK(e, "{}: no tensor named '{}' ({} tensors in the file)", path_, name, header_.entries.size());
  in_.clear();
  FileSource src(in_);
  return read_entry(src, data_start_, *e, path_);
}

void SafetensorsReader::read_bytes(const std::string& name, int64_t begin, int64_t n, void* dst) {
  const DeviceAccessScope host_copy;  // file contents into dst: a host-to-device copy
  const SafetensorsEntry* e = find(name);
  TESSEL_CHECK(e, "{}: no tensor named '{}' ({} tensors in the file)", path_, name, header_.entries.size());
  TESSEL_CHECK(begin >= 0 && n >= 0 && n <= e->end - e->begin - begin, "{}: bytes [{}, {}) of tensor '{}', which has {}",
               path_, begin, begin + n, name, e->end - e->begin);
  in_.clear();
  FileSource src(in_);
  TESSEL_CHECK(src.read(data_start_ + e->begin + begin, n, dst), "{}: could not read tensor '{}'", path_, name);
}

SafetensorsFile parse_safetensors(std::string_view bytes, const std::string& source) {
  const DeviceAccessScope host_copy;  // file contents into tensors: a host-to-device copy
  BufferSource src(bytes);
  return read_from(src, int64_t(bytes.size()), source);
}

namespace {
std::atomic<bool> g_disk_full{false};  // set and read by a checkpoint's writer thread
}

void simulate_disk_full(bool on) { g_disk_full = on; }

void fail_if_disk_full(const std::string& path) {
  TESSEL_CHECK(!g_disk_full, "cannot write '{}': {} (injected fault disk-full)", path, std::strerror(ENOSPC));
}

std::pair<uint32_t, int64_t> write_safetensors(const std::string& path, const std::map<std::string, std::string>& metadata,
                                               const std::vector<std::pair<std::string, Tensor>>& tensors) {
  // Tensors to a file: a device-to-host copy, unless every tensor is host memory already (an
  // asynchronous save's copies, written on a thread of its own that must not synchronise the device).
  // Views (from_blob) of device memory count as device memory: the strict cpu mode's arena holds it.
  std::optional<DeviceAccessScope> host_copy;
  for (const auto& [name, t] : tensors)
    if (!host_copy && (!t.is_host_memory() || (DeviceArena::exists() && DeviceArena::instance().contains(t.raw()))))
      host_copy.emplace();
  nlohmann::ordered_json j;
  if (!metadata.empty()) j["__metadata__"] = metadata;
  int64_t off = 0;
  for (const auto& [name, t] : tensors) {
    TESSEL_CHECK(t.is_contiguous(), "safetensors: tensor '{}' must be contiguous", name);
    j[name] = {{"dtype", safetensors_dtype_name(t.dtype())},
               {"shape", t.shape()},
               {"data_offsets", {off, off + int64_t(t.nbytes())}}};
    off += int64_t(t.nbytes());
  }
  std::string header = j.dump();
  header.append((8 - header.size() % 8) % 8, ' ');  // data section 8-byte aligned
  FileWriter out(path);  // around the page cache where the file system allows (file_writer.h)
  const uint64_t len = header.size();
  uint32_t crc = bytes_crc32(&len, 8);
  out.append(&len, 8);
  out.append(header.data(), len);
  crc = crc32_update(crc, header.data(), len);
  fail_if_disk_full(path);  // as a full disk would: the write fails partway, naming the file
  for (const auto& [name, t] : tensors) {
    out.append(t.raw(), t.nbytes());
    crc = crc32_update(crc, t.raw(), t.nbytes());
  }
  out.finish();  // a full disk shows here at the latest, not in a silent close
  const int64_t bytes = out.bytes();
  return {crc, bytes};
}

}  // namespace tessel::ckpt
