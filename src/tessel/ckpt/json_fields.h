#pragma once
// Typed reads of the keys of a JSON object that came from a user's file (Hugging Face config.json,
// model.safetensors.index.json): a missing key, a value of the wrong type or one out of range throws
// a tessel::Error that names the file, the key, the value found and what is allowed, never a raw
// nlohmann::json exception. A key whose value is null counts as absent (Hugging Face writes null for
// "not set").
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace tessel::ckpt {

// Parses a JSON file; a file that is missing, unreadable or not JSON throws naming it. `context`
// prefixes every message ("import-hf").
nlohmann::json read_json_file(const std::string& path, const std::string& context);
// The same for JSON text already in memory; `source` names where it came from.
nlohmann::json parse_json_text(const std::string& text, const std::string& source, const std::string& context);

class JsonFields {
 public:
  // where: "import-hf: DIR/config.json", the prefix of every message. Throws unless obj is an object.
  JsonFields(const nlohmann::json& obj, std::string where);

  bool has(const std::string& key) const;  // present and not null
  const nlohmann::json& raw(const std::string& key) const;  // the value (has(key) must hold)

  // Integers in [lo, hi] (a float such as 32.5, a string or a bool is refused).
  int64_t integer(const std::string& key, int64_t lo, int64_t hi) const;
  int64_t integer_or(const std::string& key, int64_t fallback, int64_t lo, int64_t hi) const;
  // Finite numbers in [lo, hi], or (lo, hi] with lo_open.
  double number(const std::string& key, double lo, double hi, bool lo_open = false) const;
  double number_or(const std::string& key, double fallback, double lo, double hi, bool lo_open = false) const;
  std::string string(const std::string& key) const;
  std::string string_or(const std::string& key, const std::string& fallback) const;
  bool boolean_or(const std::string& key, bool fallback) const;
  // An object (for nested settings such as rope_scaling), required.
  JsonFields object(const std::string& key) const;

  const std::string& where() const { return where_; }
  const nlohmann::json& json() const { return obj_; }

 private:
  [[noreturn]] void wrong(const std::string& key, const std::string& expected) const;
  const nlohmann::json& required(const std::string& key, const std::string& expected) const;
  const nlohmann::json& obj_;
  std::string where_;
};

}  // namespace tessel::ckpt
