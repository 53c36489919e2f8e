#include "tessel/core/paths.h"
#include "tessel/data/documents.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "tessel/core/check.h"
#include "tessel/data/json_text.h"

namespace tessel::data {

namespace {
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
bool blank(const std::string& line) { return line.find_first_not_of(" \t\r") == std::string::npos; }
}  // namespace

int64_t for_each_document(const std::vector<std::string>& files, const DocumentReaderOptions& o,
                          const std::function<void(const std::string&)>& f) {
  TESSEL_CHECK(o.format == "auto" || o.format == "text" || o.format == "jsonl",
               "--format '{}' is not supported (allowed: auto, text, jsonl)", o.format);
  TESSEL_CHECK(o.boundary == "file" || o.boundary == "blank" || o.boundary == "percent",
               "--doc-boundary '{}' is not supported (allowed: file, blank, percent)", o.boundary);
  int64_t count = 0;
  auto emit = [&](std::string& doc) {
    while (!doc.empty() && (doc.back() == '\n' || doc.back() == '\r')) doc.pop_back();
    if (!blank(doc)) {
      f(doc);
      ++count;
    }
    doc.clear();
  };
  for (const auto& path : files) {
    TESSEL_CHECK(is_regular_file_path(path), "input '{}' does not exist or is not a file", path);
    std::ifstream in(path);
    TESSEL_CHECK(in.good(), "cannot read input '{}'", path);
    const bool jsonl = o.format == "jsonl" || (o.format == "auto" && (ends_with(path, ".jsonl") || ends_with(path, ".json")));
    std::string line, doc;
    int64_t lineno = 0;
    while (std::getline(in, line)) {
      ++lineno;
      if (jsonl) {
        if (blank(line)) continue;
        std::string problem;
        const std::optional<nlohmann::json> parsed = parse_json(line, problem);
        TESSEL_CHECK(parsed, "{}:{}: not a JSON object ({})", path, lineno, problem);
        const nlohmann::json& j = *parsed;
        TESSEL_CHECK(j.is_object() && j.contains(o.json_key) && j[o.json_key].is_string(),
                     "{}:{}: no string field '{}' (set it with --json-key)", path, lineno, o.json_key);
        doc = j[o.json_key].get<std::string>();
        emit(doc);
        continue;
      }
      const bool boundary = (o.boundary == "blank" && blank(line)) || (o.boundary == "percent" && line == "%");
      if (boundary) {
        emit(doc);
      } else {
        doc += line;
        doc += '\n';
      }
    }
    if (!jsonl) emit(doc);
  }
  return count;
}

}  // namespace tessel::data
