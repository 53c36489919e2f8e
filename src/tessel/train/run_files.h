#pragma once
// The files a training run leaves in log.dir (config.yaml, metrics.jsonl), written with every write
// checked: a full disk or a vanished directory fails the run naming the file, instead of leaving a
// truncated file behind a run that exits 0.
#include <cstdint>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

namespace tessel::train {

// Writes text as the whole file at path (replacing it through a temporary file and a rename).
void write_run_file(const std::string& path, const std::string& text);

// Keeps the records of metrics.jsonl up to `step` (a resumed run rewrites what came after its
// checkpoint); a torn last line from a crash is dropped. No file: nothing to do.
void keep_metrics_through(const std::string& path, int64_t step);

// metrics.jsonl: one JSON record per line, appended and flushed record by record.
class MetricsLog {
 public:
  explicit MetricsLog(std::string path);  // opens for appending; throws naming the file
  void append(const nlohmann::json& record);

 private:
  std::string path_;
  std::ofstream out_;
};

}  // namespace tessel::train
