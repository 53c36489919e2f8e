#include "tessel/train/run_files.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include <unistd.h>

#include "tessel/core/check.h"

namespace tessel::train {

namespace {

// Throws naming the file when the stream has failed (flushing first, so a full disk shows now).
void check_written(std::ostream& out, const std::string& path) {
  errno = 0;
  out.flush();
  const int err = errno;
  TESSEL_CHECK(out.good(), "cannot write '{}': {}", path, err ? std::strerror(err) : "the write failed");
}

}  // namespace

void write_run_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    TESSEL_CHECK(out.is_open(), "cannot create '{}': {}", tmp, std::strerror(errno));
    out << text;
    check_written(out, tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  TESSEL_CHECK(!ec, "cannot write '{}' (renaming '{}'): {}", path, tmp, ec.message());
}

void keep_metrics_through(const std::string& path, int64_t step) {
  std::ifstream in(path);
  if (!in.is_open()) return;
  std::string kept, line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) break;  // a torn last line from a crash
    const auto s = j.find("step");
    if (s != j.end() && s->is_number_integer() && s->get<int64_t>() > step) continue;
    kept += line + "\n";
  }
  write_run_file(path, kept);
}

MetricsLog::MetricsLog(std::string path) : path_(std::move(path)), out_(path_, std::ios::app) {
  TESSEL_CHECK(out_.is_open(), "cannot open '{}' for writing: {}", path_, std::strerror(errno));
}

void MetricsLog::append(const nlohmann::json& record) {
  out_ << record.dump() << "\n";
  check_written(out_, path_);
}

}  // namespace tessel::train
