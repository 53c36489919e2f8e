#include "tessel/pipeline/simulate.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "tessel/core/check.h"
#include "tessel/pipeline/trace.h"

namespace tessel::pipeline {

Timeline simulate(const Schedule& s, const Costs& c) {
  for (const double v : {c.f, c.b, c.w, c.comm})
    TESSEL_CHECK(std::isfinite(v) && v >= 0, "pipeline costs must be finite and >= 0, got F {} B {} W {} comm {}",
                 c.f, c.b, c.w, c.comm);
  TESSEL_CHECK(std::isfinite(c.fb), "pipeline F&B cost must be finite, got {}", c.fb);
  TESSEL_CHECK(s.vpp >= 1 && s.pp >= 1, "schedule '{}': pp {} and vpp {} must be >= 1", s.kind, s.pp, s.vpp);
  const double scale = double(s.pp) / s.stages();  // a chunk's share of a stage of 1/P of the model
  const size_t stages = size_t(s.stages());
  const double serial = c.f + c.b + c.w;
  StageCosts sc;
  sc.f.assign(stages, c.f * scale);
  sc.b.assign(stages, c.b * scale);
  sc.w.assign(stages, c.w * scale);
  sc.comm = c.comm;
  if (c.fb >= 0) sc.fb_scale = serial > 0 ? c.fb / serial : 0.0;
  return simulate(s, sc);
}

Timeline simulate(const Schedule& s, const StageCosts& c) {
  TESSEL_CHECK(s.pp >= 1 && s.vpp >= 1 && s.micro_batches >= 1 && int(s.ranks.size()) == s.pp,
               "schedule '{}' has {} ranks for pp {} (vpp {}, {} micro-batches)", s.kind, s.ranks.size(), s.pp, s.vpp,
               s.micro_batches);
  const size_t stages = size_t(s.stages());
  TESSEL_CHECK(c.f.size() == stages && c.b.size() == stages && c.w.size() == stages,
               "pipeline costs: {} F, {} B and {} W costs for {} virtual stages", c.f.size(), c.b.size(), c.w.size(),
               stages);
  for (const auto* list : {&c.f, &c.b, &c.w})
    for (const double v : *list)
      TESSEL_CHECK(std::isfinite(v) && v >= 0, "pipeline costs must be finite and >= 0, got {}", v);
  TESSEL_CHECK(std::isfinite(c.comm) && c.comm >= 0, "pipeline comm cost must be finite and >= 0, got {}", c.comm);
  TESSEL_CHECK(std::isfinite(c.fb_scale) && c.fb_scale >= 0, "pipeline F&B scale must be finite and >= 0, got {}",
               c.fb_scale);
  for (const auto& [hidable, pass, name] : {std::tuple{&c.f_hidable, &c.f, "F"}, std::tuple{&c.b_hidable, &c.b, "B"}}) {
    TESSEL_CHECK(hidable->empty() || hidable->size() == stages, "pipeline costs: {} hidable {} transfer times for {} "
                 "virtual stages", hidable->size(), name, stages);
    for (size_t v = 0; v < hidable->size(); ++v)
      TESSEL_CHECK(std::isfinite((*hidable)[v]) && (*hidable)[v] >= 0 && (*hidable)[v] <= (*pass)[v],
                   "pipeline costs: stage {}'s {} has {} s of hidable transfers, outside [0, its {} s]", v, name,
                   (*hidable)[v], (*pass)[v]);
  }
  TESSEL_CHECK(c.fb_scale == 1 || (c.f_hidable.empty() && c.b_hidable.empty()),
               "pipeline costs: an F&B scale ({}) and hidable transfer times both shorten a pair; give one", c.fb_scale);
  // What a fused F&B pair hides: F's transfers behind B's compute and B's behind F's.
  const auto hidden = [&](int vf, int vb) {
    if (c.f_hidable.empty() && c.b_hidable.empty()) return 0.0;
    const double fa = c.f_hidable.empty() ? 0 : c.f_hidable[size_t(vf)];
    const double ba = c.b_hidable.empty() ? 0 : c.b_hidable[size_t(vb)];
    return std::min(fa, c.b[size_t(vb)] - ba) + std::min(ba, c.f[size_t(vf)] - fa);
  };
  const int P = s.pp, last = s.stages() - 1;
  // End time of each (F/B/W, micro-batch, virtual stage); NaN: not run yet. Flat, so pricing stays
  // linear in the schedule's size (the generators bound it).
  const size_t per_kind = size_t(s.micro_batches) * size_t(s.stages());
  std::vector<double> done(3 * per_kind, std::numeric_limits<double>::quiet_NaN());
  auto slot = [&](OpKind k, int mb, int v) -> double& {
    return done[size_t(k) * per_kind + size_t(mb) * size_t(s.stages()) + size_t(v)];
  };
  const auto is_compute = [](const Op& op) {
    return op.kind == OpKind::F || op.kind == OpKind::B || op.kind == OpKind::W;
  };
  Timeline t;
  t.ranks.resize(size_t(P));
  t.busy.assign(size_t(P), 0.0);
  t.peak_activations.assign(size_t(P), 0);
  t.peak_held.assign(size_t(P), 0);
  t.hidden.assign(size_t(P), 0.0);
  std::vector<size_t> next(size_t(P), 0);
  std::vector<double> free_at(size_t(P), 0.0);
  std::vector<int> in_flight(size_t(P), 0), held(size_t(P), 0);
  size_t remaining = 0;
  for (const auto& ops : s.ranks) remaining += ops.size();
  // When op (of rank r) can start as far as its inputs go; false if they do not exist yet.
  const auto ready_at = [&](int r, const Op& op, double* ready) {
    const int v = s.virtual_stage(r, op.chunk);
    const auto from = [&](OpKind k, int stage) {
      *ready = slot(k, op.mb, stage);
      if (std::isnan(*ready)) return false;
      if (s.holder(stage, op.mb).rank != r) *ready += c.comm;
      return true;
    };
    *ready = 0;
    switch (op.kind) {
      case OpKind::F: return v == 0 || from(OpKind::F, v - 1);
      case OpKind::B: return v < last ? from(OpKind::B, v + 1) : from(OpKind::F, v);
      default: return from(OpKind::B, v);
    }
  };
  const auto cost = [&](int r, const Op& op) {
    const size_t v = size_t(s.virtual_stage(r, op.chunk));
    return op.kind == OpKind::F ? c.f[v] : op.kind == OpKind::B ? c.b[v] : c.w[v];
  };
  while (remaining > 0) {
    bool progressed = false;
    for (int r = 0; r < P; ++r) {
      const auto& ops = s.ranks[size_t(r)];
      while (next[size_t(r)] < ops.size()) {
        const Op& op = ops[next[size_t(r)]];
        TESSEL_CHECK(op.mb >= 0 && op.mb < s.micro_batches && op.chunk >= 0 && op.chunk < s.vpp,
                     "rank {}: {}({}, {}) is outside the schedule's {} micro-batches and {} chunks", r,
                     op_name(op.kind), op.mb, op.chunk, s.micro_batches, s.vpp);
        if (!is_compute(op)) {  // send / recv: the dependency rules carry their cost
          ++next[size_t(r)];
          --remaining;
          progressed = true;
          continue;
        }
        // The ops that run as one: op alone, or an F&B pair's F, B and W (validate() checks the
        // shape; p2p ops between them are no-ops here).
        std::vector<size_t> group{next[size_t(r)]};
        if (op.overlapped)
          for (size_t j = next[size_t(r)] + 1; j < ops.size() && group.size() < 3; ++j)
            if (is_compute(ops[j])) group.push_back(j);
        TESSEL_CHECK(!op.overlapped || group.size() == 3, "rank {}: overlapped {}({}, {}) has no B and W after it", r,
                     op_name(op.kind), op.mb, op.chunk);
        double start = free_at[size_t(r)], serial = 0;
        bool ok = true;
        for (size_t k = 0; k < group.size() && ok; ++k) {
          const Op& g = ops[group[k]];
          double ready = 0;  // a pair's W needs only the pair's own B
          if (k < 2) ok = ready_at(r, g, &ready);
          start = std::max(start, ready);
          serial += cost(r, g);
        }
        if (!ok) break;
        // A pair whose F and B are of one chunk is not fused (the executor's rule: they would share
        // its layers' state), so it hides nothing.
        const Op &pf = ops[group[0]], &pb = ops[group.size() == 3 ? group[1] : group[0]];
        const double saved = group.size() == 3 && pf.chunk != pb.chunk
                                 ? hidden(s.virtual_stage(r, pf.chunk), s.virtual_stage(r, pb.chunk))
                                 : 0.0;
        const double duration = group.size() == 3 ? std::max(0.0, c.fb_scale * serial - saved) : serial;
        if (saved > 0) t.hidden[size_t(r)] += serial - duration;  // fb_scale is 1 here (checked above)
        const double end = start + duration;
        double at = start;
        for (const size_t j : group) {
          const Op& g = ops[j];
          const double share = serial > 0 ? cost(r, g) / serial * duration : 0.0;
          // Results of a pair exist when the pair ends; drawn as the share each part would take.
          slot(g.kind, g.mb, s.virtual_stage(r, g.chunk)) = group.size() == 3 ? end : at + share;
          t.ranks[size_t(r)].push_back({g, at, at + share});
          at += share;
          if (g.kind == OpKind::F) {
            t.peak_activations[size_t(r)] = std::max(t.peak_activations[size_t(r)], ++in_flight[size_t(r)]);
            t.peak_held[size_t(r)] = std::max(t.peak_held[size_t(r)], ++held[size_t(r)]);
          }
          if (g.kind == OpKind::B) --in_flight[size_t(r)];
          if (g.kind == OpKind::W) --held[size_t(r)];
        }
        free_at[size_t(r)] = end;
        t.busy[size_t(r)] += duration;
        remaining -= group.back() - next[size_t(r)] + 1;
        next[size_t(r)] = group.back() + 1;
        progressed = true;
      }
    }
    if (!progressed) {
      std::string blocked;
      for (int r = 0; r < P; ++r)
        if (next[size_t(r)] < s.ranks[size_t(r)].size()) {
          const Op& op = s.ranks[size_t(r)][next[size_t(r)]];
          blocked += fmt::format(" rank {}: {}({}, {});", r, op_name(op.kind), op.mb, op.chunk);
        }
      TESSEL_FAIL("pipeline schedule '{}' deadlocks; waiting:{}", s.kind, blocked);
    }
  }
  double busy = 0;
  for (int r = 0; r < P; ++r) {
    t.makespan = std::max(t.makespan, free_at[size_t(r)]);
    busy += t.busy[size_t(r)];
  }
  t.bubble = t.makespan - busy / P;
  t.bubble_fraction = t.makespan > 0 ? 1.0 - busy / (double(P) * t.makespan) : 0.0;
  return t;
}

std::string render(const Schedule& s, const Timeline& t, double unit) {
  // At most 4096 columns, and about 4M characters in all: a longer timeline (or a tiny unit) is
  // drawn at a coarser unit.
  const double max_columns = std::clamp(double(1 << 22) / s.pp, 16.0, 4096.0);
  if (!(unit > 0) || t.makespan / unit > max_columns) unit = t.makespan / max_columns;
  const int width = unit > 0 ? int(std::ceil(t.makespan / unit)) : 0;
  std::string out;
  for (int r = 0; r < s.pp; ++r) {
    std::string row(size_t(width), '.');
    for (const auto& e : t.ranks[size_t(r)]) {
      char ch = op_name(e.op.kind)[0];
      if (e.op.chunk % 2 == 1) ch = char(ch - 'A' + 'a');
      for (int x = int(std::floor(e.start / unit + 1e-9)); x < int(std::ceil(e.end / unit - 1e-9)) && x < width; ++x)
        row[size_t(x)] = ch;
    }
    out += fmt::format("rank {:>2} |{}|\n", r, row);
  }
  out += fmt::format("makespan {:.3f}, bubble fraction {:.4f}\n", t.makespan, t.bubble_fraction);
  return out;
}

std::string chrome_trace(const Schedule& s, const Timeline& t, double seconds_per_unit) {
  TESSEL_CHECK(std::isfinite(seconds_per_unit) && seconds_per_unit > 0, "trace time unit must be > 0, got {}",
               seconds_per_unit);
  std::vector<RankTrace> ranks(size_t(s.pp));
  for (int r = 0; r < s.pp; ++r) {
    int pair_left = 0;  // spans left in the current F&B pair: its F, B and W
    for (const Event& e : t.ranks[size_t(r)]) {
      if (e.op.overlapped) pair_left = 3;
      ranks[size_t(r)].push_back({e.op.kind, e.op.mb, e.op.chunk, s.virtual_stage(r, e.op.chunk), pair_left > 0,
                                  e.start * seconds_per_unit, e.end * seconds_per_unit});
      pair_left = std::max(0, pair_left - 1);
    }
  }
  return pipeline::chrome_trace(s.kind + " simulated", ranks);
}

}  // namespace tessel::pipeline
