#include "tessel/plan/search.h"

#include <algorithm>
#include <chrono>

#include "tessel/core/check.h"

namespace tessel::plan {
namespace {

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> d;
  for (int64_t k = 1; k <= n; ++k)
    if (n % k == 0) d.push_back(k);
  return d;
}

// What a pruned layout is counted under: the setting its error names ("refused by
// parallel.context_parallel_size"), else the message's first clause with its numbers as N.
std::string reason_of(const std::string& what) {
  for (const char* key : {"parallel.", "model.", "train."}) {
    const size_t at = what.find(key);
    if (at != std::string::npos) return "refused by " + what.substr(at, what.find_first_of(" ,:()=", at) - at);
  }
  std::string r;
  for (const char ch : what.substr(0, std::min(what.find(':'), size_t(160)))) {
    const bool digit = ch >= '0' && ch <= '9';
    if (!digit) r += ch;
    else if (r.empty() || r.back() != 'N') r += 'N';
  }
  return r;
}

}  // namespace

namespace {

// Layers per virtual stage as evenly as they go, the remainder on the first stages (the last
// holds the output head, and the multi-token-prediction modules when there are any): "" when they
// split evenly.
std::string layers_per_stage(int64_t layers, int64_t stages) {
  if (stages <= 1 || layers % stages == 0) return "";
  std::string out;
  for (int64_t v = 0; v < stages; ++v)
    out += fmt::format("{}{}", v ? "," : "", layers / stages + (v < layers % stages ? 1 : 0));
  return out;
}

struct Structure {
  int64_t tp, pp, vpp, cp, ep, etp;
};

struct Knobs {
  int64_t mbs;
  bool zero, recompute;
};

}  // namespace

SearchResult search_layouts(const std::function<train::Config(const std::vector<std::string>&)>& load,
                            const HardwareProfile& hw, const SearchOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  TESSEL_CHECK(o.world >= 1, "--world must be >= 1, got {}", o.world);
  const train::Config base = load({});
  const int64_t G = o.global_batch > 0 ? o.global_batch : base.train.global_batch_size;
  const double limit = o.memory_gib > 0 ? o.memory_gib : hw.memory_gib;
  const bool moe = base.model.num_experts > 0;
  const int64_t layers = base.model.num_layers;
  // Tensor and context parallelism stay inside a node (their collectives are on every layer's
  // critical path), as Megatron users lay them out.
  const int64_t node = std::max<int64_t>(1, std::min<int64_t>(hw.devices_per_node, o.world));
  SearchResult out;
  std::vector<Structure> structures;
  for (const int64_t tp : divisors(o.world))
    for (const int64_t cp : divisors(o.world / tp)) {
      if (tp * cp > node) continue;
      for (const int64_t pp : divisors(o.world / tp / cp))
        for (const int64_t vpp : pp > 1 ? std::vector<int64_t>{1, 2} : std::vector<int64_t>{1}) {
          if (pp * vpp > layers) continue;
          const int64_t dp = o.world / tp / pp / cp;
          for (const int64_t ep : moe ? divisors(dp * cp) : std::vector<int64_t>{1}) {
            if (moe && base.model.num_experts % ep != 0) continue;
            for (const int64_t etp : moe && tp > 1 ? std::vector<int64_t>{1, tp} : std::vector<int64_t>{0})
              structures.push_back({tp, pp, vpp, cp, ep, etp});
          }
        }
    }
  // One layout's estimate, or the reason it was pruned (counted).
  const auto evaluate = [&](const Structure& st, const Knobs& k, Candidate* c) {
    ++out.enumerated;
    const int64_t dp = o.world / st.tp / st.pp / st.cp;
    if (G % dp != 0 || (G / dp) % k.mbs != 0) {
      ++out.pruned[fmt::format("global batch {} does not split over data parallelism x the micro-batch", G)];
      return false;
    }
    c->overrides = {fmt::format("parallel.tensor_model_parallel_size={}", st.tp),
                    fmt::format("parallel.sequence_parallel={}", st.tp > 1 ? "true" : "false"),
                    fmt::format("parallel.pipeline_model_parallel_size={}", st.pp),
                    fmt::format("parallel.virtual_pipeline_model_parallel_size={}", st.vpp),
                    fmt::format("parallel.context_parallel_size={}", st.cp),
                    fmt::format("parallel.expert_model_parallel_size={}", st.ep),
                    fmt::format("parallel.expert_tensor_parallel_size={}", st.etp),
                    fmt::format("parallel.use_distributed_optimizer={}", k.zero ? "true" : "false"),
                    fmt::format("train.micro_batch_size={}", k.mbs),
                    fmt::format("train.global_batch_size={}", G),
                    fmt::format("model.recompute={}", k.recompute ? "true" : "false")};
    // An uneven split names its layers per virtual stage; an even one is the default, reset only
    // where the caller's config names a split of its own ("" is YAML's empty string).
    const std::string split = layers_per_stage(layers, st.pp * st.vpp);
    if (!split.empty() || !base.parallel.pipeline_layers_per_stage.empty())
      c->overrides.push_back(
          fmt::format("parallel.pipeline_layers_per_stage={}", split.empty() ? std::string("\"\"") : split));
    c->layout = fmt::format("tp {}{}, pp {}, vpp {}, cp {}, ep {}{}, dp {}{}, mbs {}, recompute {}", st.tp,
                            st.tp > 1 ? " sp" : "", st.pp, st.vpp, st.cp, st.ep,
                            moe && st.tp > 1 ? (st.etp == 1 ? " (experts whole)" : " (experts split)") : "", dp,
                            k.zero ? " zero1" : "", k.mbs, k.recompute ? "on" : "off");
    try {
      EstimateOptions shortcuts;
      shortcuts.share_equal_stages = true;  // the step time and the peak over ranks stay exact
      c->estimate = estimate_step(load(c->overrides), hw, o.world, shortcuts);
    } catch (const Error& e) {
      ++out.pruned[reason_of(e.what())];
      return false;
    }
    if (limit > 0 && double(c->estimate.peak_bytes) / double(int64_t(1) << 30) > limit) {
      ++out.pruned[fmt::format("peak memory over {:g} GiB", limit)];
      return false;
    }
    return true;
  };
  // Phase 1: every structure at micro-batch 1 with the distributed optimizer (recompute only where
  // it must, to fit). Phase 2: the fastest structures with every micro-batch size, optimizer
  // layout and recompute setting.
  std::vector<std::pair<double, size_t>> speed;
  for (size_t i = 0; i < structures.size(); ++i) {
    const int64_t dp = o.world / structures[i].tp / structures[i].pp / structures[i].cp;
    for (const bool recompute : {false, true}) {
      Candidate c;
      if (evaluate(structures[i], {1, dp > 1, recompute}, &c)) {
        speed.emplace_back(c.estimate.tokens_per_s, i);
        out.ranked.push_back(std::move(c));
        break;
      }
    }
  }
  std::sort(speed.rbegin(), speed.rend());
  for (size_t n = 0; n < speed.size() && n < size_t(kRefinedStructures); ++n) {
    const Structure& st = structures[speed[n].second];
    const int64_t dp = o.world / st.tp / st.pp / st.cp;
    for (int64_t mbs = 1; mbs <= 8; mbs *= 2)
      for (const bool zero : dp > 1 ? std::vector<bool>{true, false} : std::vector<bool>{false})
        for (const bool recompute : {false, true}) {
          if (mbs == 1 && zero == (dp > 1)) continue;  // phase 1 evaluated these
          Candidate c;
          if (evaluate(st, {mbs, zero, recompute}, &c)) out.ranked.push_back(std::move(c));
        }
  }
  std::stable_sort(out.ranked.begin(), out.ranked.end(), [](const Candidate& a, const Candidate& b) {
    return a.estimate.tokens_per_s > b.estimate.tokens_per_s;
  });
  out.structures = int(structures.size());
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace tessel::plan
