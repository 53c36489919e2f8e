#include "auto_parallel.h"

#include <cstdint>
#include <cstdio>

#include "tessel/core/check.h"
#include "tessel/plan/calibrate.h"
#include "tessel/plan/hardware_profile.h"
#include "tessel/plan/search.h"

namespace tessel::app {
namespace {

// Rank 0's text on every rank (as 32-bit integers: the communicator's smallest integer type).
std::string broadcast_text(comm::Communicator& world, const std::string& text) {
  int64_t n = int64_t(text.size());
  world.broadcast(&n, 1, DType::i64, 0);
  std::vector<int32_t> chars(static_cast<size_t>(n));
  for (size_t i = 0; world.rank() == 0 && i < chars.size(); ++i) chars[i] = int32_t(static_cast<unsigned char>(text[i]));
  if (n > 0) world.broadcast(chars.data(), n, DType::i32, 0);
  std::string out;
  for (const int32_t c : chars) out += char(c);
  return out;
}

}  // namespace

train::Config choose_auto_layout(const std::string& path, const std::vector<std::string>& sets,
                                 const train::Config& cfg, comm::Communicator& world) {
  if (!cfg.parallel.auto_layout) return cfg;
  const bool lead = world.rank() == 0;
  plan::HardwareProfile hw;
  if (cfg.parallel.auto_hardware.empty()) {
    if (lead) std::printf("parallel.auto: measuring this machine (parallel.auto_hardware is empty)\n");
    hw = plan::calibrate_machine(world, {});  // collective: every rank measures
  } else {
    hw = plan::load_hardware_profile(cfg.parallel.auto_hardware);
  }
  // Rank 0 searches; the others wait for its answer (an error travels as "!" + the message).
  std::string answer;
  if (lead) {
    try {
      const auto load = [&](const std::vector<std::string>& layout) {
        std::vector<std::string> all = sets;
        all.insert(all.end(), layout.begin(), layout.end());
        return train::Config::load(path, all);
      };
      plan::SearchOptions o;
      o.world = world.size();
      const plan::SearchResult r = plan::search_layouts(load, hw, o);
      if (r.ranked.empty()) {
        std::string why;
        for (const auto& [reason, n] : r.pruned) why += fmt::format("{}{} x {}", why.empty() ? "" : "; ", n, reason);
        answer = fmt::format("!parallel.auto: no layout of {} ranks fits on {} ({} layouts: {})", world.size(), hw.name,
                             r.enumerated, why.empty() ? "none enumerated" : why);
      } else {
        const plan::Candidate& best = r.ranked.front();
        std::printf("parallel.auto: %s (predicted %.2f ms per step, %.1f tokens/s, peak %.2f GiB on %s; best of %zu "
                    "fitting layouts of %d, searched in %.1f s)\n",
                    best.layout.c_str(), 1e3 * best.estimate.step_s, best.estimate.tokens_per_s,
                    double(best.estimate.peak_bytes) / double(int64_t(1) << 30), hw.name.c_str(), r.ranked.size(),
                    r.enumerated, r.seconds);
        if (r.ranked.size() > 1)
          std::printf("parallel.auto: next best %s (predicted %.2f ms)\n", r.ranked[1].layout.c_str(),
                      1e3 * r.ranked[1].estimate.step_s);
        std::fflush(stdout);
        for (const std::string& s : best.overrides) answer += s + "\n";
      }
    } catch (const Error& e) {
      answer = std::string("!") + e.what();
    }
  }
  answer = broadcast_text(world, answer);
  if (!answer.empty() && answer[0] == '!') TESSEL_FAIL("{}", answer.substr(1));
  std::vector<std::string> all = sets;
  for (size_t at = 0, nl; (nl = answer.find('\n', at)) != std::string::npos; at = nl + 1)
    all.push_back(answer.substr(at, nl - at));
  return train::Config::load(path, all);
}

}  // namespace tessel::app
