#include "tessel/plan/search.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <new>
#include <sstream>

#include <fmt/ranges.h>

#include "tessel/core/check.h"
#include "tessel/nn/stage_plan.h"
#include "tessel/pipeline/schedule.h"
#include "tessel/plan/layer_split.h"

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
  // Numbers standing alone become N ("micro-batches (12)"); digits inside a name stay ("1F1B",
  // "fp8_gemm", "cpu-2core-1thread.json").
  const std::string text = what.substr(0, std::min(what.find(':'), size_t(160)));
  const auto is_digit = [](char ch) { return ch >= '0' && ch <= '9'; };
  const auto is_word = [](char ch) { return std::isalpha(static_cast<unsigned char>(ch)) || ch == '_'; };
  std::string r;
  for (size_t i = 0; i < text.size();) {
    if (!is_digit(text[i])) {
      r += text[i++];
      continue;
    }
    size_t end = i;
    while (end < text.size() && is_digit(text[end])) ++end;
    const bool in_name = (i > 0 && is_word(text[i - 1])) || (end < text.size() && is_word(text[end]));
    r += in_name ? text.substr(i, end - i) : "N";
    i = end;
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

// The splits of a pipelined layout of one chunk per rank that balance its stages by the costs its
// estimate measured (plan/layer_split.h): each layer's passes, each stage's beyond its layers. One
// per tie rule, ';'-separated; "" where the estimate does not hold every layer's cost, or no split
// has a faster slowest stage than its own split `current`.
std::string balanced_splits(const Estimate& e, int64_t layers, const std::vector<int64_t>& current) {
  std::vector<double> layer_s, extra_s;
  for (const StageEstimate& st : e.stages) {
    layer_s.insert(layer_s.end(), st.layer_s.begin(), st.layer_s.end());
    extra_s.push_back(st.non_layer_s);
  }
  if (extra_s.size() < 2 || int64_t(layer_s.size()) != layers) return "";
  std::string out;
  const double now = slowest_stage_s(current, layer_s, extra_s);
  for (const SplitTies ties : {SplitTies::latest, SplitTies::most_even}) {
    const std::vector<int64_t> split = balanced_layer_split(layer_s, extra_s, ties);
    // Not faster than the split it was measured on (beyond rounding): keep that one.
    if (slowest_stage_s(split, layer_s, extra_s) >= now * (1 - 1e-9)) continue;
    const std::string s = fmt::format("{}", fmt::join(split, ","));
    if (out != s) out += (out.empty() ? "" : ";") + s;
  }
  return out;
}

// Uneven splits for a pipeline of `stages` stages of one chunk each, as Megatron-LM's
// --decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers: the last stage also runs
// the output head and loss (and any multi-token-prediction modules), the first the embedding, so each
// may take one layer fewer than the even share, the stages between taking them (as evenly as they
// go, the remainder on the earliest). Only splits other than layers_per_stage's even one, with at
// least one layer on every stage.
std::vector<std::string> uneven_splits(int64_t layers, int64_t stages) {
  std::vector<std::string> out;
  if (stages < 2) return out;
  const int64_t even = layers / stages;
  std::vector<int64_t> even_split;  // layers_per_stage's, written out
  for (int64_t v = 0; v < stages; ++v) even_split.push_back(even + (v < layers % stages ? 1 : 0));
  for (const auto& [first_less, last_less] : {std::pair{0, 1}, std::pair{1, 1}, std::pair{1, 0}}) {
    std::vector<int64_t> split(size_t(stages), 0);
    if (stages == 2) {
      if (first_less && last_less) continue;
      split[0] = first_less ? even - 1 : layers - (even - 1);
      split[1] = layers - split[0];
    } else {
      split.front() = even - first_less;
      split.back() = even - last_less;
      const int64_t middle = layers - split.front() - split.back(), m = stages - 2;
      for (int64_t v = 0; v < m; ++v) split[size_t(v + 1)] = middle / m + (v < middle % m ? 1 : 0);
    }
    if (*std::min_element(split.begin(), split.end()) < 1 || split == even_split) continue;
    const std::string s = fmt::format("{}", fmt::join(split, ","));
    if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
  }
  return out;
}

struct Structure {
  int64_t tp, pp, vpp, cp, ep, etp;
};

struct Knobs {
  int64_t mbs;
  bool zero, recompute;
  std::string fp8 = "";       // precision.fp8.recipe; "": as configured
  std::string schedule = "";  // parallel.pipeline_schedule; "": as configured
  std::string split = "";     // parallel.pipeline_layers_per_stage; "": as evenly as they go
};

struct Job {
  size_t structure;
  Knobs knobs;
};

// What a worker reports of one layout: the reason it is pruned, or the estimate's figures the
// ranking needs (a worker's per-stage detail stays in the worker).
struct Outcome {
  std::string pruned;
  Estimate estimate;
  // A pipelined layout of one chunk per rank: the layers per stage that balance its stages' costs
  // as this estimate measured them (balanced_splits), "" where that is not defined or is its own split.
  std::string balanced_splits;
};

std::string outcome_line(size_t job, const Outcome& r) {
  std::string reason = r.pruned;
  std::replace(reason.begin(), reason.end(), '\n', ' ');
  std::replace(reason.begin(), reason.end(), '\t', ' ');
  // %.17g: each double reads back as the same double, so the ranking is the serial one.
  return fmt::format("{}\t{:.17g}\t{:.17g}\t{:.17g}\t{}\t{}\t{}\n", job, r.estimate.step_s, r.estimate.tokens_per_s,
                     r.estimate.mfu, r.estimate.peak_bytes, r.balanced_splits.empty() ? "-" : r.balanced_splits, reason);
}

void read_outcome_line(const std::string& line, std::vector<Outcome>& out) {
  std::istringstream in(line);
  size_t job = 0;
  Outcome r;
  in >> job >> r.estimate.step_s >> r.estimate.tokens_per_s >> r.estimate.mfu >> r.estimate.peak_bytes >>
      r.balanced_splits;
  TESSEL_CHECK(in && job < out.size(), "plan search: a worker process reported '{}'", line);
  if (r.balanced_splits == "-") r.balanced_splits.clear();
  in.get();  // the tab before the reason
  std::getline(in, r.pruned);
  out[job] = std::move(r);
}

// evaluate(job) for every job, spread over `workers` processes (fork: each process has its own meta
// device, op log and allocator; this one is the first of them). Each process takes the next job not
// yet taken (a counter in memory the processes share), so a few slow layouts do not hold the others
// back; outcomes come back by job index, so the result does not depend on who ran what. A worker
// that fails is an error naming it.
std::vector<Outcome> evaluate_in_workers(const std::vector<Job>& jobs, const std::function<Outcome(const Job&)>& evaluate,
                                         int workers, const std::function<void(int)>& progress) {
  std::vector<Outcome> out(jobs.size());
  workers = int(std::min<size_t>(size_t(std::max(1, workers)), std::max<size_t>(1, jobs.size())));
  void* shared = MAP_FAILED;
  if (workers > 1) {
    shared = mmap(nullptr, sizeof(std::atomic<size_t>), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    TESSEL_CHECK(shared != MAP_FAILED, "plan search: cannot share memory with worker processes: {}",
                 std::strerror(errno));
  }
  std::atomic<size_t> local_next{0};
  std::atomic<size_t>& next = workers > 1 ? *new (shared) std::atomic<size_t>(0) : local_next;
  static_assert(std::atomic<size_t>::is_always_lock_free, "the job counter is shared between processes");
  struct Unmap {
    void* p;
    ~Unmap() {
      if (p != MAP_FAILED) munmap(p, sizeof(std::atomic<size_t>));
    }
  } unmap{shared};
  struct Child {
    pid_t pid;
    int fd;
  };
  std::vector<Child> children;
  std::fflush(nullptr);
  for (int w = 1; w < workers; ++w) {
    int fds[2];
    TESSEL_CHECK(pipe(fds) == 0, "plan search: cannot open a pipe to a worker process: {}", std::strerror(errno));
    // Room for every outcome a worker may report before this process reads them (best effort: a
    // worker whose pipe is full waits, and only its share of the layouts slows).
    fcntl(fds[1], F_SETPIPE_SZ, 1 << 20);
    const pid_t pid = fork();
    TESSEL_CHECK(pid >= 0, "plan search: cannot start a worker process: {}", std::strerror(errno));
    if (pid == 0) {  // the worker: its share, one line each, then gone without running any destructor
      close(fds[0]);
      int status = 0;
      try {
        for (size_t j; (j = next.fetch_add(1)) < jobs.size();) {
          const std::string line = outcome_line(j, evaluate(jobs[j]));
          for (size_t done = 0; done < line.size();) {
            const ssize_t n = write(fds[1], line.data() + done, line.size() - done);
            if (n <= 0) _exit(3);
            done += size_t(n);
          }
        }
      } catch (...) {
        status = 2;
      }
      close(fds[1]);
      _exit(status);
    }
    close(fds[1]);
    children.push_back({pid, fds[0]});
  }
  for (size_t j; (j = next.fetch_add(1)) < jobs.size();) {
    out[j] = evaluate(jobs[j]);
    progress(int(std::min(j + 1, jobs.size())));  // about this many taken so far
  }
  for (const Child& c : children) {
    std::string text;
    char buf[4096];
    for (ssize_t n; (n = read(c.fd, buf, sizeof buf)) != 0;) {
      if (n < 0 && errno == EINTR) continue;
      TESSEL_CHECK(n > 0, "plan search: reading a worker process failed: {}", std::strerror(errno));
      text.append(buf, size_t(n));
    }
    close(c.fd);
    int status = 0;
    while (waitpid(c.pid, &status, 0) < 0 && errno == EINTR) {
    }
    TESSEL_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                 "plan search: worker process {} failed (status {}); run with --workers 1 to see its error", c.pid,
                 status);
    for (size_t at = 0, nl; (nl = text.find('\n', at)) != std::string::npos; at = nl + 1)
      read_outcome_line(text.substr(at, nl - at), out);
  }
  return out;
}

}  // namespace

double routed_expert_floor_gib(const train::Config& cfg) {
  const nn::ModelConfig& m = cfg.model;
  if (m.num_experts == 0) return 0;
  const int pp = int(cfg.parallel.pipeline_model_parallel_size);
  int64_t most = 0;
  for (int stage = 0; stage < pp; ++stage) {
    const nn::StagePlan plan = cfg.stage_plan(stage);
    int64_t moe = 0;
    for (const nn::LayerRange& r : plan.chunks)
      for (int64_t l = r.begin; l < r.end; ++l) moe += m.is_moe_layer(l) ? 1 : 0;
    most = std::max(most, moe);
  }
  const double per_expert = double(m.is_llama() ? 3 : 2) * double(m.hidden_size) * double(m.expert_ffn()) /
                            double(m.expert_tensor_parallel ? cfg.parallel.tensor_model_parallel_size : 1);
  const double experts = double(m.num_experts / cfg.parallel.expert_model_parallel_size);
  const double bytes_per_parameter = double(dtype_size(m.compute)) + 4.0;
  return double(most) * experts * per_expert * bytes_per_parameter / double(int64_t(1) << 30);
}

SearchResult search_layouts(const std::function<train::Config(const std::vector<std::string>&)>& load,
                            const HardwareProfile& hw, const SearchOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  TESSEL_CHECK(o.world >= 1, "--world must be >= 1, got {}", o.world);
  const train::Config base = load({});
  // The recipes phase 2 tries: the configured one ("") and each other one asked for, each checked
  // by the config now (a misspelt recipe is the caller's error, not a pruned layout).
  std::vector<std::string> recipes{""};
  for (const std::string& r : o.fp8_recipes) {
    const train::Config with = load({"precision.fp8.recipe=" + r});
    if (with.precision.fp8_recipe != base.precision.fp8_recipe &&
        std::find(recipes.begin(), recipes.end(), r) == recipes.end())
      recipes.push_back(r);
  }
  // Likewise the pipeline schedules: the configured one ("") and each other one asked for.
  std::vector<std::string> schedules{""};
  for (const std::string& k : o.pipeline_schedules) {
    pipeline::placement_of(k);  // throws naming the allowed kinds
    if (k != base.parallel.pipeline_schedule && std::find(schedules.begin(), schedules.end(), k) == schedules.end())
      schedules.push_back(k);
  }
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
  // A layout's overrides and name.
  const auto describe = [&](const Structure& st, const Knobs& k) {
    const int64_t dp = o.world / st.tp / st.pp / st.cp;
    Candidate c;
    c.overrides = {fmt::format("parallel.tensor_model_parallel_size={}", st.tp),
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
    if (!k.fp8.empty()) c.overrides.push_back("precision.fp8.recipe=" + k.fp8);
    if (!k.schedule.empty()) c.overrides.push_back("parallel.pipeline_schedule=" + k.schedule);
    // An uneven split names its layers per virtual stage; an even one is the default, reset only
    // where the caller's config names a split of its own ("" is YAML's empty string).
    const std::string kind = k.schedule.empty() ? base.parallel.pipeline_schedule : k.schedule;
    const std::string split =
        k.split.empty() ? layers_per_stage(layers, pipeline::stages_of(kind, int(st.pp), int(st.vpp))) : k.split;
    if (!split.empty() || !base.parallel.pipeline_layers_per_stage.empty())
      c.overrides.push_back(
          fmt::format("parallel.pipeline_layers_per_stage={}", split.empty() ? std::string("\"\"") : split));
    c.layout = fmt::format("tp {}{}, pp {}, vpp {}, cp {}, ep {}{}, dp {}{}, mbs {}, recompute {}", st.tp,
                           st.tp > 1 ? " sp" : "", st.pp, st.vpp, st.cp, st.ep,
                           moe && st.tp > 1 ? (st.etp == 1 ? " (experts whole)" : " (experts split)") : "", dp,
                           k.zero ? " zero1" : "", k.mbs, k.recompute ? "on" : "off") +
               (k.split.empty() ? "" : ", layers " + k.split) + (k.fp8.empty() ? "" : ", fp8 " + k.fp8) +
               (k.schedule.empty() ? "" : ", " + k.schedule);
    return c;
  };
  const std::string over_memory = fmt::format("peak memory over {:g} GiB", limit);
  // One layout's estimate, or the reason it is pruned.
  const auto evaluate = [&](const Job& job) {
    const Structure& st = structures[job.structure];
    const Knobs& k = job.knobs;
    Outcome r;
    const int64_t dp = o.world / st.tp / st.pp / st.cp;
    if (G % dp != 0 || (G / dp) % k.mbs != 0) {
      r.pruned = fmt::format("global batch {} does not split over data parallelism x the micro-batch", G);
      return r;
    }
    try {
      const train::Config cfg = load(describe(st, k).overrides);
      if (limit > 0 && routed_expert_floor_gib(cfg) > limit) {
        r.pruned = fmt::format("routed experts' weights and gradients alone over {:g} GiB", limit);
        return r;
      }
      EstimateOptions shortcuts;
      shortcuts.share_equal_stages = true;  // the step time and the peak over ranks stay exact
      r.estimate = estimate_step(cfg, hw, o.world, shortcuts);
      // One chunk per rank (not interleaved, a V or DualPipe): phase 3 tries the splits that balance it.
      if (st.pp > 1 && st.vpp == 1 && pipeline::chunks_per_rank(cfg.parallel.pipeline_schedule, 1) == 1) {
        std::vector<int64_t> current;
        for (int stage = 0; stage < int(st.pp); ++stage) {
          const nn::StagePlan plan = cfg.stage_plan(stage);
          current.push_back(plan.chunks.at(0).end - plan.chunks.at(0).begin);
        }
        // A split that cannot be balanced (e.g. a time that is not finite) loses only phase 3's
        // candidates, not this layout's estimate.
        try {
          r.balanced_splits = balanced_splits(r.estimate, layers, current);
        } catch (const Error&) {
          r.balanced_splits.clear();
        }
      }
    } catch (const Error& e) {
      r.pruned = reason_of(e.what());
      return r;
    }
    if (limit > 0 && double(r.estimate.peak_bytes) / double(int64_t(1) << 30) > limit) r.pruned = over_memory;
    return r;
  };
  // Evaluates the jobs (in worker processes), counts them, and ranks those that fit; per job, the
  // reason it was pruned ("" where it fits).
  const int workers = std::max(1, o.workers);
  std::vector<size_t> ranked_structure;  // of each entry of out.ranked
  std::vector<Knobs> ranked_knobs;
  std::vector<std::string> ranked_balanced;
  const auto run = [&](const std::vector<Job>& jobs) {
    const std::vector<Outcome> outcomes = evaluate_in_workers(jobs, evaluate, workers, [&](int done) {
      if (o.progress) o.progress(out.enumerated + done, int(structures.size()));
    });
    std::vector<std::string> pruned;
    for (size_t j = 0; j < jobs.size(); ++j) {
      ++out.enumerated;
      pruned.push_back(outcomes[j].pruned);
      if (!pruned.back().empty()) {
        ++out.pruned[pruned.back()];
        continue;
      }
      Candidate c = describe(structures[jobs[j].structure], jobs[j].knobs);
      c.estimate = outcomes[j].estimate;
      out.ranked.push_back(std::move(c));
      ranked_structure.push_back(jobs[j].structure);
      ranked_knobs.push_back(jobs[j].knobs);
      ranked_balanced.push_back(outcomes[j].balanced_splits);
    }
    return pruned;
  };
  // Phase 1: every structure at micro-batch 1 with the distributed optimizer (recompute only where
  // it must, to fit). Phase 2: the fastest structures with every micro-batch size, optimizer
  // layout and recompute setting.
  const auto dp_of = [&](const Structure& st) { return o.world / st.tp / st.pp / st.cp; };
  std::vector<Job> plain, recomputed;
  for (size_t i = 0; i < structures.size(); ++i) plain.push_back({i, {1, dp_of(structures[i]) > 1, false}});
  const std::vector<std::string> plain_pruned = run(plain);
  // Recompute saves activations only: it is tried where the step's peak, not the model state or the
  // layout, was what did not fit.
  for (size_t i = 0; i < structures.size(); ++i)
    if (plain_pruned[i] == over_memory) recomputed.push_back({i, {1, dp_of(structures[i]) > 1, true}});
  run(recomputed);
  // The fastest structures of phase 1 (each fits in one way at most there).
  std::vector<std::pair<double, size_t>> speed;  // tokens/s, structure
  for (size_t n = 0; n < out.ranked.size(); ++n) speed.emplace_back(out.ranked[n].estimate.tokens_per_s, ranked_structure[n]);
  std::sort(speed.rbegin(), speed.rend());
  std::vector<size_t> fastest;
  for (size_t n = 0; n < speed.size() && n < size_t(kRefinedStructures); ++n) fastest.push_back(speed[n].second);
  std::vector<Job> refined;
  for (const size_t i : fastest) {
    const int64_t dp = dp_of(structures[i]);
    for (int64_t mbs = 1; mbs <= 8; mbs *= 2)
      for (const bool zero : dp > 1 ? std::vector<bool>{true, false} : std::vector<bool>{false})
        for (const bool recompute : {false, true})
          for (const std::string& fp8 : recipes)
            for (const std::string& schedule : schedules) {
              if (mbs == 1 && zero == (dp > 1) && fp8.empty() && schedule.empty()) continue;  // phase 1's
              // The other schedules pipeline one chunk per rank, or fix their own chunks (a V).
              if (!schedule.empty() && (structures[i].pp == 1 || structures[i].vpp > 1)) continue;
              refined.push_back({i, {mbs, zero, recompute, fp8, schedule}});
            }
  }
  run(refined);
  // Phase 3: the kRefinedStructures fastest pipelined layouts of one chunk per rank, each with its
  // uneven splits (its other settings as they are): the one-layer moves of uneven_splits and the
  // splits that balance its stages by the costs its estimate measured (balanced_splits).
  std::vector<size_t> order(out.ranked.size());
  for (size_t n = 0; n < order.size(); ++n) order[n] = n;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return out.ranked[a].estimate.tokens_per_s > out.ranked[b].estimate.tokens_per_s;
  });
  std::vector<Job> split;
  int pipelined = 0;
  for (size_t n = 0; n < order.size() && pipelined < kRefinedStructures; ++n) {
    const Structure& st = structures[ranked_structure[order[n]]];
    const Knobs& k = ranked_knobs[order[n]];
    const std::string kind = k.schedule.empty() ? base.parallel.pipeline_schedule : k.schedule;
    // One chunk per rank (not interleaved, a V or DualPipe's two copies), so stage r is rank r's.
    if (st.pp == 1 || st.vpp > 1 || pipeline::chunks_per_rank(kind, 1) != 1) continue;
    ++pipelined;
    std::vector<std::string> splits = uneven_splits(layers, st.pp);
    std::istringstream by_cost(ranked_balanced[order[n]]);
    for (std::string s; std::getline(by_cost, s, ';');)
      if (std::find(splits.begin(), splits.end(), s) == splits.end()) splits.push_back(s);
    for (const std::string& s : splits) {
      Knobs with = k;
      with.split = s;
      split.push_back({ranked_structure[order[n]], with});
    }
  }
  run(split);
  std::stable_sort(out.ranked.begin(), out.ranked.end(), [](const Candidate& a, const Candidate& b) {
    return a.estimate.tokens_per_s > b.estimate.tokens_per_s;
  });
  out.structures = int(structures.size());
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace tessel::plan
