#pragma once
// Reading config YAML with errors that name the file, line and key: the document (nesting beyond
// yaml-cpp's recursion guard named, not "bad file"), scalars by type (integers that are integers
// and fit, finite numbers), and keys given twice (yaml-cpp keeps both; the YAML spec forbids it).
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <map>
#include <string>

namespace tessel::train {

// Parses a whole document; throws tessel::Error naming `origin` on malformed or too deeply nested YAML.
YAML::Node parse_config_yaml(const std::string& text, const std::string& origin);

// Scalar conversions; throw tessel::Error naming `key` and the value as written.
void read_scalar(const YAML::Node& n, const std::string& key, int64_t& out);
void read_scalar(const YAML::Node& n, const std::string& key, double& out);
void read_scalar(const YAML::Node& n, const std::string& key, bool& out);
void read_scalar(const YAML::Node& n, const std::string& key, std::string& out);

// The keys of one config (or section) seen so far, with the line each was first written on.
class KeyLines {
 public:
  explicit KeyLines(std::string origin) : origin_(std::move(origin)) {}
  // Throws when `key` (its full dotted name) was already given; `key_node` is the YAML key.
  void add(const std::string& key, const YAML::Node& key_node);

 private:
  std::string origin_;
  std::map<std::string, int> first_line_;
};

}  // namespace tessel::train
