#include "tessel/resilience/faults.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "tessel/core/check.h"
#include "tessel/core/device.h"

namespace tessel::resilience {

namespace {
constexpr FaultKind kKinds[] = {FaultKind::nan,  FaultKind::spike,   FaultKind::kill, FaultKind::hang, FaultKind::sigterm,
                                FaultKind::corrupt_checkpoint, FaultKind::truncate_checkpoint, FaultKind::disk_full};
}

const char* fault_name(FaultKind k) {
  switch (k) {
    case FaultKind::nan: return "nan";
    case FaultKind::spike: return "spike";
    case FaultKind::kill: return "kill";
    case FaultKind::hang: return "hang";
    case FaultKind::sigterm: return "sigterm";
    case FaultKind::corrupt_checkpoint: return "corrupt-checkpoint";
    case FaultKind::truncate_checkpoint: return "truncate-checkpoint";
    case FaultKind::disk_full: return "disk-full";
  }
  return "?";
}

std::string fault_kinds_text() {
  std::string s;
  for (FaultKind k : kKinds) s += (s.empty() ? "" : ", ") + std::string(fault_name(k));
  return s;
}

std::vector<Fault> parse_faults(const std::string& spec, int world) {
  std::string text = spec;
  std::replace(text.begin(), text.end(), ',', ' ');
  std::istringstream in(text);
  std::vector<Fault> out;
  static const std::regex item(R"(([a-z-]+)@([0-9]{1,18})(?::([0-9]{1,9}))?)");  // digits that fit
  for (std::string word; in >> word;) {
    std::smatch m;
    TESSEL_CHECK(std::regex_match(word, m, item), "fault '{}': expected KIND@STEP or KIND@STEP:RANK (KIND: {})", word,
                 fault_kinds_text());
    const auto kind = std::find_if(std::begin(kKinds), std::end(kKinds), [&](FaultKind k) { return m[1] == fault_name(k); });
    TESSEL_CHECK(kind != std::end(kKinds), "fault '{}': unknown kind '{}' (allowed: {})", word, m[1].str(),
                 fault_kinds_text());
    Fault f{*kind, std::stoll(m[2].str()), m[3].matched ? std::stoi(m[3].str()) : 0};
    TESSEL_CHECK(f.step >= 1, "fault '{}': the step must be >= 1", word);
    TESSEL_CHECK(f.rank >= 0 && f.rank < world, "fault '{}': rank {} is not in this run of {} ranks", word, f.rank, world);
    out.push_back(f);
  }
  return out;
}

FaultPlan::FaultPlan(std::vector<Fault> faults, int rank, int attempt) {
  if (attempt != 0) return;
  for (const Fault& f : faults)
    if (f.rank == rank) faults_.push_back(f);
}

bool FaultPlan::take(FaultKind kind, int64_t step, bool due) {
  const auto it = std::find_if(faults_.begin(), faults_.end(), [&](const Fault& f) {
    return f.kind == kind && (f.step == step || (due && f.step < step));
  });
  if (it == faults_.end()) return false;
  faults_.erase(it);
  return true;
}

data::Batch corrupt_batch(const data::Batch& b, int64_t vocab) {
  const DeviceAccessScope host;  // the batch's targets, rewritten on the host before the step
  data::Batch out{b.tokens, b.targets.clone()};
  int64_t* t = out.targets.data<int64_t>();
  for (int64_t i = 0; i < out.targets.numel(); ++i) t[i] = (t[i] + vocab / 2) % vocab;
  return out;
}

int launch_attempt() {
  const char* v = std::getenv("TESSEL_LAUNCH_ATTEMPT");
  return v && *v ? std::atoi(v) : 0;
}

std::string damage_checkpoint(const std::string& step_dir, FaultKind kind) {
  namespace fs = std::filesystem;
  fs::path target;
  uintmax_t largest = 0;
  for (const auto& e : fs::directory_iterator(step_dir))
    if (e.path().extension() == ".safetensors" && e.file_size() > largest) {
      largest = e.file_size();
      target = e.path();
    }
  TESSEL_CHECK(!target.empty(), "fault injection: no tensor file in checkpoint '{}'", step_dir);
  if (kind == FaultKind::truncate_checkpoint) {
    fs::resize_file(target, largest / 2);
  } else {
    std::fstream f(target, std::ios::in | std::ios::out | std::ios::binary);
    char bytes[16] = {};
    f.seekg(std::streamoff(largest / 2));
    f.read(bytes, sizeof bytes);
    for (char& b : bytes) b = char(~b);  // every bit flipped: the CRC cannot still match
    f.seekp(std::streamoff(largest / 2));
    f.write(bytes, f.gcount());
    TESSEL_CHECK(bool(f), "fault injection: cannot write into '{}'", target.string());
  }
  return target.string();
}

}  // namespace tessel::resilience
