#include "tessel/pipeline/simulate.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <fmt/format.h>

#include "tessel/core/check.h"

namespace tessel::pipeline {

Timeline simulate(const Schedule& s, const Costs& c) {
  for (const double v : {c.f, c.b, c.w, c.comm})
    TESSEL_CHECK(std::isfinite(v) && v >= 0, "pipeline costs must be finite and >= 0, got F {} B {} W {} comm {}",
                 c.f, c.b, c.w, c.comm);
  TESSEL_CHECK(s.vpp >= 1 && s.pp >= 1, "schedule '{}': pp {} and vpp {} must be >= 1", s.kind, s.pp, s.vpp);
  const double scale = 1.0 / s.vpp;
  const size_t stages = size_t(s.stages());
  return simulate(s, StageCosts{std::vector<double>(stages, c.f * scale), std::vector<double>(stages, c.b * scale),
                                std::vector<double>(stages, c.w * scale), c.comm});
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
  const int P = s.pp, last = s.stages() - 1;
  // End time of each (F/B/W, micro-batch, virtual stage); NaN: not run yet. Flat, so pricing stays
  // linear in the schedule's size (the generators bound it).
  const size_t per_kind = size_t(s.micro_batches) * size_t(s.stages());
  std::vector<double> done(3 * per_kind, std::numeric_limits<double>::quiet_NaN());
  auto slot = [&](OpKind k, int mb, int v) -> double& {
    return done[size_t(k) * per_kind + size_t(mb) * size_t(s.stages()) + size_t(v)];
  };
  auto finished = [&](OpKind k, int mb, int v, double* at) {
    *at = slot(k, mb, v);
    return !std::isnan(*at);
  };
  Timeline t;
  t.ranks.resize(size_t(P));
  t.peak_activations.assign(size_t(P), 0);
  std::vector<size_t> next(size_t(P), 0);
  std::vector<double> free_at(size_t(P), 0.0);
  std::vector<int> in_flight(size_t(P), 0);
  size_t remaining = 0;
  for (const auto& ops : s.ranks) remaining += ops.size();
  while (remaining > 0) {
    bool progressed = false;
    for (int r = 0; r < P; ++r) {
      const auto& ops = s.ranks[size_t(r)];
      while (next[size_t(r)] < ops.size()) {
        const Op& op = ops[size_t(next[size_t(r)])];
        const int v = s.virtual_stage(r, op.chunk);
        TESSEL_CHECK(op.mb >= 0 && op.mb < s.micro_batches && op.chunk >= 0 && op.chunk < s.vpp,
                     "rank {}: {}({}, {}) is outside the schedule's {} micro-batches and {} chunks", r,
                     op_name(op.kind), op.mb, op.chunk, s.micro_batches, s.vpp);
        double ready = 0, dep = 0;
        bool ok = true;
        double dur = 0;
        switch (op.kind) {
          case OpKind::F:
            if (v > 0) {
              ok = finished(OpKind::F, op.mb, v - 1, &dep);
              ready = dep + c.comm;
            }
            dur = c.f[size_t(v)];
            break;
          case OpKind::B:
            if (v < last) {
              ok = finished(OpKind::B, op.mb, v + 1, &dep);
              ready = dep + c.comm;
            } else {
              ok = finished(OpKind::F, op.mb, v, &dep);
              ready = dep;
            }
            dur = c.b[size_t(v)];
            break;
          case OpKind::W:
            ok = finished(OpKind::B, op.mb, v, &dep);
            ready = dep;
            dur = c.w[size_t(v)];
            break;
          default:  // send / recv: the dependency rules above carry their cost
            ++next[size_t(r)];
            --remaining;
            progressed = true;
            continue;
        }
        if (!ok) break;
        const double start = std::max(free_at[size_t(r)], ready);
        free_at[size_t(r)] = start + dur;
        slot(op.kind, op.mb, v) = start + dur;
        t.ranks[size_t(r)].push_back({op, start, start + dur});
        if (op.kind == OpKind::F) t.peak_activations[size_t(r)] = std::max(t.peak_activations[size_t(r)], ++in_flight[size_t(r)]);
        if (op.kind == OpKind::B) --in_flight[size_t(r)];
        ++next[size_t(r)];
        --remaining;
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
    for (const auto& e : t.ranks[size_t(r)]) busy += e.end - e.start;
  }
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

}  // namespace tessel::pipeline
