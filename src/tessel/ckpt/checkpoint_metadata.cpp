#include "tessel/ckpt/checkpoint_metadata.h"

#include <cmath>

#include <zlib.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "tessel/core/check.h"
#include "tessel/data/json_text.h"

namespace tessel::ckpt {

namespace {

using nlohmann::json;

// A short rendering of an offending value for messages (a damaged file may hold anything).
std::string shown(const json& v) {
  std::string s = v.dump();
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return fmt::format("{} {}", v.type_name(), s);
}

// Reads keys of one JSON object, naming the checkpoint and the key's full path on any failure.
class Reader {
 public:
  Reader(const json& obj, std::string where, std::string path)
      : obj_(obj), where_(std::move(where)), path_(std::move(path)) {
    TESSEL_CHECK(obj_.is_object(), "{}: metadata.json{} must be an object, got {}", where_,
                 path_.empty() ? "" : " key '" + path_ + "'", shown(obj_));
  }
  std::string key_path(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  bool has(const std::string& key) const { return obj_.contains(key); }
  const json& at(const std::string& key) const {
    TESSEL_CHECK(obj_.contains(key), "{}: metadata.json has no key '{}'", where_, key_path(key));
    return obj_.at(key);
  }
  Reader object(const std::string& key) const { return Reader(at(key), where_, key_path(key)); }
  int64_t non_negative(const std::string& key) const { return non_negative_value(at(key), key_path(key)); }
  int64_t non_negative_value(const json& v, const std::string& path) const {
    const bool ok = (v.is_number_unsigned() && v.get<uint64_t>() <= uint64_t(std::numeric_limits<int64_t>::max())) ||
                    (v.is_number_integer() && v.get<int64_t>() >= 0);
    TESSEL_CHECK(ok, "{}: metadata.json key '{}' must be an integer in [0, 2^63), got {}", where_, path, shown(v));
    return v.get<int64_t>();
  }
  // A number in (0, 1], or `fallback` when the key is absent.
  double fraction_or(const std::string& key, double fallback) const {
    if (!has(key)) return fallback;
    const json& v = at(key);
    TESSEL_CHECK(v.is_number() && v.get<double>() > 0 && v.get<double>() <= 1,
                 "{}: metadata.json key '{}' must be a number in (0, 1], got {}", where_, key_path(key), shown(v));
    return v.get<double>();
  }
  uint64_t unsigned64(const std::string& key) const {
    const json& v = at(key);
    TESSEL_CHECK(v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0),
                 "{}: metadata.json key '{}' must be an integer in [0, 2^64), got {}", where_, key_path(key), shown(v));
    return v.get<uint64_t>();
  }
  uint32_t unsigned32(const std::string& key) const { return unsigned32_value(at(key), key_path(key)); }
  uint32_t unsigned32_value(const json& v, const std::string& path) const {
    TESSEL_CHECK((v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0)) &&
                     v.get<uint64_t>() <= std::numeric_limits<uint32_t>::max(),
                 "{}: metadata.json key '{}' must be an integer in [0, 2^32), got {}", where_, path, shown(v));
    return uint32_t(v.get<uint64_t>());
  }
  std::string string(const std::string& key) const {
    const json& v = at(key);
    TESSEL_CHECK(v.is_string(), "{}: metadata.json key '{}' must be a string, got {}", where_, key_path(key), shown(v));
    return v.get<std::string>();
  }
  // A list of non-negative dimensions whose product of non-zero ones fits in int64 with room for
  // 8-byte elements (a zero dimension does not excuse an overflowing product of the others: strides
  // and byte sizes would overflow), as safetensors headers are checked.
  Shape shape(const std::string& key) const {
    const json& v = at(key);
    const std::string path = key_path(key);
    TESSEL_CHECK(v.is_array(), "{}: metadata.json key '{}' must be a list of dimensions, got {}", where_, path, shown(v));
    Shape s;
    int64_t elements = 1, bytes = 0;
    for (const json& d : v) {
      s.push_back(non_negative_value(d, path));
      TESSEL_CHECK(s.back() == 0 || !__builtin_mul_overflow(elements, s.back(), &elements),
                   "{}: metadata.json key '{}' = {} has more elements than fit in 64 bits", where_, path, v.dump());
    }
    TESSEL_CHECK(!__builtin_mul_overflow(elements, int64_t(8), &bytes),
                 "{}: metadata.json key '{}' = {} has more bytes than fit in 64 bits", where_, path, v.dump());
    return s;
  }
  const json& raw() const { return obj_; }

 private:
  const json& obj_;
  std::string where_, path_;
};

}  // namespace

CheckpointMetadata parse_checkpoint_metadata(const std::string& text, const std::string& where) {
  std::string problem;
  const std::optional<json> parsed = data::parse_json(text, problem);
  TESSEL_CHECK(parsed, "{}: metadata.json is not valid JSON ({})", where, problem);
  const json& md = *parsed;
  CheckpointMetadata out;
  out.crc32 = uint32_t(crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(text.data()), uInt(text.size())));
  const Reader r(md, where, "");
  out.format = r.string("format");
  out.step = r.non_negative("step");
  out.consumed_samples = r.non_negative("consumed_samples");
  out.lr_scale = r.fraction_or("lr_scale", 1.0);
  if (r.has("resilience")) {
    const Reader h = r.object("resilience");
    // At most this many values per list: far more than any spike window or rewind budget.
    constexpr size_t kMaxHistory = 1 << 20;
    const auto list = [&](const char* key) -> const json& {
      const json& v = h.at(key);
      TESSEL_CHECK(v.is_array() && v.size() <= kMaxHistory, "{}: metadata.json key 'resilience.{}' must be a list "
                   "of at most {} values, got {}", where, key, kMaxHistory, shown(v));
      return v;
    };
    for (auto [key, into] : {std::pair{"loss_window", &out.resilience.loss_window},
                             std::pair{"grad_norm_window", &out.resilience.grad_norm_window}})
      for (const json& v : list(key)) {
        TESSEL_CHECK(v.is_number() && std::isfinite(v.get<double>()), "{}: metadata.json key 'resilience.{}' "
                     "must hold finite numbers, got {}", where, key, shown(v));
        into->push_back(v.get<double>());
      }
    for (const json& v : list("rewind_steps"))
      out.resilience.rewind_steps.push_back(h.non_negative_value(v, "resilience.rewind_steps"));
  }
  out.optimizer_steps = r.non_negative("optimizer_steps");
  out.seed = r.unsigned64("seed");
  out.config = r.string("config");
  const Reader files = r.object("files");
  for (const auto& [name, value] : files.raw().items()) {
    // Files live in the checkpoint directory itself: a path would read something else.
    TESSEL_CHECK(name.find('/') == std::string::npos && name != "." && name != "..",
                 "{}: metadata.json lists file '{}', which is not a file name in the checkpoint directory", where, name);
    const Reader f = files.object(name);
    out.files[name] = {f.unsigned32("crc32"), f.non_negative("bytes")};
  }
  const Reader tensors = r.object("tensors");
  for (const auto& [name, value] : tensors.raw().items())
    out.global_shapes[name] = tensors.object(name).shape("global_shape");
  if (r.has("pieces")) {
    const json& list = r.at("pieces");
    TESSEL_CHECK(list.is_array(), "{}: metadata.json key 'pieces' must be a list, got {}", where, shown(list));
    for (size_t i = 0; i < list.size(); ++i) {
      const Reader p(list[i], where, fmt::format("pieces[{}]", i));
      // Member by member: GCC 12 destroys already-built members twice when a braced aggregate
      // initializer throws part-way (a damaged key here), a double free.
      CheckpointMetadata::Piece piece;
      piece.key = p.string("key");
      piece.file = p.string("file");
      piece.global_shape = p.shape("global_shape");
      piece.range.begin = p.shape("begin");
      piece.range.shape = p.shape("shape");
      piece.crc32 = p.unsigned32("crc32");
      if (p.has("crc32_blocks")) {
        const Reader blocks = p.object("crc32_blocks");
        piece.block_bytes = blocks.non_negative("bytes");
        TESSEL_CHECK(piece.block_bytes > 0 && piece.block_bytes % 4 == 0, "{}: metadata.json key '{}' must be a "
                     "positive multiple of 4 bytes, got {}", where, blocks.key_path("bytes"), piece.block_bytes);
        const json& list = blocks.at("crc32");
        TESSEL_CHECK(list.is_array() && !list.empty(), "{}: metadata.json key '{}' must be a list of CRC-32s, got {}",
                     where, blocks.key_path("crc32"), shown(list));
        for (const json& c : list) piece.block_crc32.push_back(blocks.unsigned32_value(c, blocks.key_path("crc32")));
      }
      const json& flat = p.at("flat");
      TESSEL_CHECK(flat.is_array() && flat.size() == 2, "{}: metadata.json key '{}' must be [begin, end], got {}", where,
                   p.key_path("flat"), shown(flat));
      piece.range.flat_begin = p.non_negative_value(flat[0], p.key_path("flat"));
      piece.range.flat_end = p.non_negative_value(flat[1], p.key_path("flat"));
      TESSEL_CHECK(out.files.count(piece.file), "{}: metadata.json pieces[{}] ('{}') is in '{}', which 'files' does not list",
                   where, i, piece.key, piece.file);
      const std::string problem = block_range_problem(piece.range, piece.global_shape);
      TESSEL_CHECK(problem.empty(), "{}: metadata.json pieces[{}] ('{}') does not fit its tensor of shape {}: {}", where,
                   i, piece.key, shape_str(piece.global_shape), problem);
      out.pieces.push_back(std::move(piece));
    }
  }
  return out;
}

CheckpointMetadata read_checkpoint_metadata(const std::string& ckpt_dir) {
  const auto path = std::filesystem::path(ckpt_dir) / "metadata.json";
  std::ifstream in(path, std::ios::binary);
  TESSEL_CHECK(in.good(), "checkpoint '{}': cannot read metadata.json", ckpt_dir);
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_checkpoint_metadata(ss.str(), fmt::format("checkpoint '{}'", ckpt_dir));
}

nlohmann::json resilience_history_json(const ResilienceHistory& h) {
  return {{"loss_window", h.loss_window}, {"grad_norm_window", h.grad_norm_window}, {"rewind_steps", h.rewind_steps}};
}

}  // namespace tessel::ckpt
