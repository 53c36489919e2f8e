#include "tessel/ckpt/checkpoint_reader.h"

#include <algorithm>
#include <filesystem>

#include "tessel/ckpt/checkpoint_files.h"
#include "tessel/core/check.h"

namespace tessel::ckpt {
namespace fs = std::filesystem;

namespace {

constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kOptimFile = "optimizer.safetensors";
constexpr const char* kStateFile = "state.safetensors";
constexpr const char* kStatePrefix = "state.";

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// Whether two ranges can share an element: their boxes meet, and (same box) their flat ranges do.
bool may_overlap(const BlockRange& a, const BlockRange& b) {
  for (size_t d = 0; d < a.shape.size(); ++d)
    if (std::max(a.begin[d], b.begin[d]) >= std::min(a.begin[d] + a.shape[d], b.begin[d] + b.shape[d])) return false;
  if (a.begin == b.begin && a.shape == b.shape)
    return std::max(a.flat_begin, b.flat_begin) < std::min(a.flat_end, b.flat_end);
  return true;
}

}  // namespace

CheckpointReader::CheckpointReader(std::string ckpt_dir) : dir_(std::move(ckpt_dir)), md_(read_checkpoint_metadata(dir_)) {
  if (md_.format == kFormatWhole)
    index_whole_format();
  else if (md_.format == kFormatDistributed)
    index_distributed_format();
  else
    TESSEL_FAIL("checkpoint '{}': format '{}' is not '{}' or '{}'", dir_, md_.format, kFormatWhole, kFormatDistributed);
}

bool CheckpointReader::distributed() const { return md_.format == kFormatDistributed; }

void CheckpointReader::index_whole_format() {
  for (const char* f : {kModelFile, kOptimFile})
    TESSEL_CHECK(md_.files.count(f), "checkpoint '{}': metadata.json does not list {}", dir_, f);
  open(kModelFile);  // its tensors must agree with metadata.json before a shape there counts as the model's
  for (const auto& [name, shape] : md_.global_shapes) {
    keys_[name] = {shape, {{kModelFile, name, whole_box(Shape(shape.size(), 0), shape), std::nullopt, 0, {}}}};
    for (const std::string& m : {"exp_avg." + name, "exp_avg_sq." + name})
      keys_[m] = {shape, {{kOptimFile, m, whole_box(Shape(shape.size(), 0), shape), std::nullopt, 0, {}}}};
  }
  if (!md_.files.count(kStateFile)) return;
  for (const SafetensorsEntry& e : open(kStateFile).entries())
    keys_[kStatePrefix + e.name] = {
        e.shape, {{kStateFile, e.name, whole_box(Shape(e.shape.size(), 0), e.shape), std::nullopt, 0, {}}}};
}

void CheckpointReader::index_distributed_format() {
  TESSEL_CHECK(!md_.pieces.empty(), "checkpoint '{}': metadata.json of format {} lists no pieces", dir_, md_.format);
  // Files first: each as large as metadata.json says, and holding at least its pieces' bytes, so no
  // shape metadata.json claims allocates more than the files hold.
  std::map<std::string, int64_t> piece_elements;
  for (const auto& [file, want] : md_.files) {
    std::error_code ec;
    const auto size = fs::file_size(fs::path(dir_) / file, ec);
    TESSEL_CHECK(!ec, "checkpoint '{}': {} is missing", dir_, file);
    TESSEL_CHECK(int64_t(size) == want.bytes, "checkpoint '{}': {} is truncated or altered ({} bytes, expected {})",
                 dir_, file, size, want.bytes);
  }
  for (const auto& p : md_.pieces) {
    // A parameter's values and moments take the parameter's global shape from metadata.json's tensors.
    std::string param = p.key;
    for (const char* m : {"exp_avg.", "exp_avg_sq."})
      if (starts_with(p.key, m)) param = p.key.substr(std::string(m).size());
    if (!starts_with(p.key, kStatePrefix)) {
      const auto it = md_.global_shapes.find(param);
      TESSEL_CHECK(it != md_.global_shapes.end(), "checkpoint '{}': metadata.json has a piece of '{}', which its tensors "
                   "do not list", dir_, p.key);
      TESSEL_CHECK(it->second == p.global_shape, "checkpoint '{}': metadata.json has a piece of '{}' of a tensor of "
                   "shape {}, its tensors say {}", dir_, p.key, shape_str(p.global_shape), shape_str(it->second));
    }
    Saved& s = keys_[p.key];
    TESSEL_CHECK(s.pieces.empty() || s.global_shape == p.global_shape,
                 "checkpoint '{}': metadata.json has pieces of '{}' with shapes {} and {}", dir_, p.key,
                 shape_str(s.global_shape), shape_str(p.global_shape));
    s.global_shape = p.global_shape;
    s.pieces.push_back({p.file, p.key, p.range, p.crc32, 0, {}});
    int64_t& elements = piece_elements[p.file];  // at least a byte each (f32, or a state tensor's dtype)
    elements += p.range.flat_end - p.range.flat_begin;
    TESSEL_CHECK(elements <= md_.files.at(p.file).bytes, "checkpoint '{}': metadata.json puts more elements in {} "
                 "than its {} bytes hold", dir_, p.file, md_.files.at(p.file).bytes);
    if (!p.block_crc32.empty() && !starts_with(p.key, kStatePrefix)) {  // state is read whole
      // f32: 4 bytes an element, within the file's size (checked above), so no product overflows.
      const int64_t bytes = (p.range.flat_end - p.range.flat_begin) * int64_t(sizeof(float));
      const int64_t blocks = bytes / p.block_bytes + (bytes % p.block_bytes != 0 ? 1 : 0);
      TESSEL_CHECK(int64_t(p.block_crc32.size()) == blocks, "checkpoint '{}': metadata.json has {} block CRC-32s for "
                   "the piece '{}' in {}, whose {} bytes make {} blocks of {}", dir_, p.block_crc32.size(), p.key,
                   p.file, bytes, blocks, p.block_bytes);
      // The blocks' CRCs must make the piece's: one is not left unchecked when only the other is read.
      const uint32_t whole = combine_block_crc32s(p.block_crc32, bytes, p.block_bytes);
      TESSEL_CHECK(whole == p.crc32, "checkpoint '{}': metadata.json's block CRC-32s of the piece '{}' in {} make "
                   "{:08x}, its crc32 says {:08x}", dir_, p.key, p.file, whole, p.crc32);
      s.pieces.back().block_bytes = p.block_bytes;
      s.pieces.back().block_crc32 = p.block_crc32;
    }
  }
  // Every tensor's pieces add up to its elements (each element saved once).
  for (const auto& [key, saved] : keys_) {
    int64_t held = 0, numel = 1;
    for (const Piece& p : saved.pieces) held += p.range.flat_end - p.range.flat_begin;
    for (int64_t d : saved.global_shape) numel *= d;
    TESSEL_CHECK(held == numel, "checkpoint '{}': metadata.json's pieces of '{}' hold {} elements, the tensor {} has {}",
                 dir_, key, held, shape_str(saved.global_shape), numel);
  }
}

const Shape& CheckpointReader::global_shape(const std::string& key) const {
  const auto it = keys_.find(key);
  TESSEL_CHECK(it != keys_.end(), "checkpoint '{}' holds no tensor '{}'", dir_, key);
  return it->second.global_shape;
}

SafetensorsReader& CheckpointReader::open(const std::string& file) {
  auto& slot = open_[file];
  if (slot) return *slot;
  const auto want = md_.files.find(file);
  TESSEL_CHECK(want != md_.files.end(), "checkpoint '{}': metadata.json does not list {}", dir_, file);
  const fs::path path = fs::path(dir_) / file;
  TESSEL_CHECK(fs::exists(path), "checkpoint '{}': {} is missing", dir_, file);
  if (distributed()) {  // sizes were checked up front, CRCs are per piece
    slot = std::make_unique<SafetensorsReader>(path.string());
    return *slot;
  }
  const auto [crc, size] = file_crc(path);
  TESSEL_CHECK(size == want->second.bytes, "checkpoint '{}': {} is truncated or altered ({} bytes, expected {})", dir_,
               file, size, want->second.bytes);
  TESSEL_CHECK(crc == want->second.crc32, "checkpoint '{}': {} is corrupted (CRC-32 {:08x}, expected {:08x})", dir_,
               file, crc, want->second.crc32);
  auto reader = std::make_unique<SafetensorsReader>(path.string());
  if (file == kModelFile) {
    // The saved tensors agree with metadata.json's global shapes (a disagreement is damage, not another model).
    for (const SafetensorsEntry& e : reader->entries()) {
      const auto it = md_.global_shapes.find(e.name);
      TESSEL_CHECK(it != md_.global_shapes.end(), "checkpoint '{}': {} holds '{}', which metadata.json does not list",
                   dir_, kModelFile, e.name);
      TESSEL_CHECK(it->second == e.shape, "checkpoint '{}': {} holds '{}' as {}{}, metadata.json says {}", dir_,
                   kModelFile, e.name, dtype_name(e.dtype), shape_str(e.shape), shape_str(it->second));
    }
    TESSEL_CHECK(md_.global_shapes.size() == reader->entries().size(),
                 "checkpoint '{}': metadata.json lists {} tensors, {} holds {}", dir_, md_.global_shapes.size(),
                 kModelFile, reader->entries().size());
  }
  slot = std::move(reader);
  return *slot;
}

const SafetensorsEntry& CheckpointReader::piece_entry(const std::string& key, const Piece& p, bool f32) {
  const SafetensorsEntry* e = open(p.file).find(p.tensor);
  TESSEL_CHECK(e, "checkpoint '{}': {} has no '{}'", dir_, p.file, p.tensor);
  int64_t numel = 1;
  for (int64_t d : e->shape) numel *= d;
  TESSEL_CHECK(numel == p.range.flat_end - p.range.flat_begin, "checkpoint '{}': {} holds '{}' with {} elements, "
               "metadata.json says {}", dir_, p.file, p.tensor, numel, p.range.flat_end - p.range.flat_begin);
  TESSEL_CHECK(!f32 || e->dtype == DType::f32, "checkpoint '{}': {} holds '{}' as {}, expected f32", dir_, p.file,
               key, dtype_name(e->dtype));
  return *e;
}

Tensor CheckpointReader::read_piece_blocks(const std::string& key, const Piece& p, int64_t first, int64_t last,
                                           BlockRange* held) {
  piece_entry(key, p, true);
  const int64_t per_block = p.block_bytes / int64_t(sizeof(float));  // elements
  const int64_t numel = p.range.flat_end - p.range.flat_begin;
  const int64_t b0 = first / per_block, b1 = (last + per_block - 1) / per_block;
  const int64_t e0 = b0 * per_block, e1 = std::min(numel, b1 * per_block);
  Tensor t = Tensor::empty({e1 - e0}, DType::f32);
  open(p.file).read_bytes(p.tensor, e0 * int64_t(sizeof(float)), t.nbytes(), t.raw());
  bytes_read_ += t.nbytes();
  for (int64_t b = b0; b < b1; ++b) {
    const int64_t at = (b - b0) * p.block_bytes, n = std::min(p.block_bytes, int64_t(t.nbytes()) - at);
    const uint32_t crc = bytes_crc32(static_cast<const char*>(t.raw()) + at, size_t(n));
    TESSEL_CHECK(crc == p.block_crc32[size_t(b)], "checkpoint '{}': {} is corrupted: block {} of its piece '{}' has "
                 "CRC-32 {:08x}, expected {:08x}", dir_, p.file, b, p.tensor, crc, p.block_crc32[size_t(b)]);
  }
  *held = {p.range.begin, p.range.shape, p.range.flat_begin + e0, p.range.flat_begin + e1};
  return t;
}

Tensor CheckpointReader::read_piece(const std::string& key, const Piece& p, bool f32) {
  piece_entry(key, p, f32);
  Tensor t = open(p.file).read(p.tensor);
  bytes_read_ += t.nbytes();
  if (p.crc32) {
    const uint32_t crc = bytes_crc32(t.raw(), t.nbytes());
    TESSEL_CHECK(crc == *p.crc32, "checkpoint '{}': {} is corrupted: its piece '{}' has CRC-32 {:08x}, expected {:08x}",
                 dir_, p.file, p.tensor, crc, *p.crc32);
  }
  return t;
}

void CheckpointReader::read(const std::string& key, const BlockRange& want, float* dst) {
  const DeviceAccessScope host_copy;  // file contents assembled into dst on the host: an upload
  const auto it = keys_.find(key);
  TESSEL_CHECK(it != keys_.end(), "checkpoint '{}' holds no tensor '{}'", dir_, key);
  const std::string problem = block_range_problem(want, it->second.global_shape);
  TESSEL_CHECK(problem.empty(), "checkpoint '{}': asked for a block of '{}' (shape {}) that does not fit it: {}", dir_,
               key, shape_str(it->second.global_shape), problem);
  const int64_t n = want.flat_end - want.flat_begin;
  std::vector<bool> written(static_cast<size_t>(n), false);
  for (const Piece& p : it->second.pieces) {
    if (!may_overlap(p.range, want)) continue;
    if (p.block_crc32.empty()) {
      const Tensor t = read_piece(key, p, true);
      copy_block_overlap(p.range, t.data<float>(), want, dst, written);
      continue;
    }
    const auto [first, last] = overlap_span(p.range, want);
    if (first == last) continue;
    BlockRange held;
    const Tensor t = read_piece_blocks(key, p, first, last, &held);
    copy_block_overlap(held, t.data<float>(), want, dst, written);
  }
  const int64_t have = std::count(written.begin(), written.end(), true);
  TESSEL_CHECK(have == n, "checkpoint '{}': metadata.json's pieces of '{}' cover only {} of the {} elements asked for "
               "(the box at {} of shape {}, elements [{}, {}))", dir_, key, have, n,
               shape_str(want.begin), shape_str(want.shape), want.flat_begin, want.flat_end);
}

Tensor CheckpointReader::read_whole(const std::string& key) {
  const DeviceAccessScope host_copy;  // the tensor is filled from the file on the host
  const Shape shape = global_shape(key);
  const Saved& s = keys_.at(key);
  if (starts_with(key, kStatePrefix)) {  // other training state is saved whole, in its own dtype
    TESSEL_CHECK(s.pieces.size() == 1, "checkpoint '{}': '{}' is saved in {} pieces, expected one", dir_, key,
                 s.pieces.size());
    return read_piece(key, s.pieces[0], false).reshape(shape);
  }
  Tensor t = Tensor::empty(shape, DType::f32);
  read(key, whole_box(Shape(shape.size(), 0), shape), t.data<float>());
  return t;
}

std::vector<std::pair<std::string, Tensor>> CheckpointReader::state() {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& [key, saved] : keys_)
    if (starts_with(key, kStatePrefix)) out.emplace_back(key.substr(std::string(kStatePrefix).size()), read_whole(key));
  return out;
}

}  // namespace tessel::ckpt
