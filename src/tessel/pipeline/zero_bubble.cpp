// Zero-bubble schedules (Qi et al., "Zero Bubble Pipeline Parallelism", arXiv 2401.10241): the
// backward split into B (input gradient, on the critical path) and W (weight gradient, movable), and
// W's placed where 1F1B leaves a rank idle.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <queue>
#include <array>
#include <deque>

#include "tessel/core/check.h"
#include "tessel/pipeline/schedule.h"
#include "tessel/pipeline/simulate.h"

namespace tessel::pipeline {

Schedule make_zb_h1(int pp, int m) {
  // 1F1B's warm-up and steady state; W of micro-batch k runs once B of k + r has (rank r's drain
  // waits r + 1 gradient hops longer than the last rank's, and the r deferred W's fill it).
  Schedule s = make_1f1b_deferring_w(pp, m, [](int r) { return r; });
  s.kind = "zb-h1";
  return s;
}

Schedule make_zb_h2(int pp, int m) {
  check_schedule_sizes(pp, 1, m);
  TESSEL_CHECK(m >= 2 * pp - 1,
               "zb-h2 needs at least 2 x pipeline size - 1 = {} micro-batches to fill its warm-up, got {} (use zb-h1)",
               2 * pp - 1, m);
  Schedule s{"zb-h2", pp, 1, m, {}};
  s.ranks.resize(size_t(pp));
  for (int r = 0; r < pp; ++r) {
    auto& ops = s.ranks[size_t(r)];
    // Rank r forwards until the first gradient comes back (2(P - r) - 1 forward times at equal
    // costs), then B and F alternate with each W running 2r places behind its B, so that every rank
    // holds at most 2P - 1 micro-batches until W; the deferred W's fill the drain.
    int f = 0, b = 0, w = 0;
    while (f < 2 * (pp - r) - 1) ops.push_back({OpKind::F, f++, 0});
    while (f < m) {
      ops.push_back({OpKind::B, b++, 0});
      if (b - w > 2 * r) ops.push_back({OpKind::W, w++, 0});
      ops.push_back({OpKind::F, f++, 0});
    }
    while (b < m) {
      ops.push_back({OpKind::B, b++, 0});
      ops.push_back({OpKind::W, w++, 0});
    }
    while (w < m) ops.push_back({OpKind::W, w++, 0});
  }
  return s;
}

namespace {

// One list schedule of the V (see make_zb_v); forward_first: a ready F goes before a ready B.
Schedule list_schedule_v(int pp, int m, const PassTimes& times, bool forward_first, bool backward_chunk1_first) {
  Schedule s{"zb-v", pp, 2, m, {}};
  s.placement = Placement::v_shape;
  s.ranks.resize(size_t(pp));
  // A list scheduler over time (no communication): a free rank takes a ready F (chunk 1 first) whose
  // chunk holds fewer activations than its limit, or a ready B, in the order forward_first says,
  // else its oldest deferred W; a rank with none of these waits for a neighbour's next result. An
  // activation is held from F until W (what the executor keeps), and the limits, 2P - 1 - r for
  // chunk 0 and r + 1 for chunk 1, keep 1F1B's memory: 2P chunk activations (P stages) per rank.
  const int stages = 2 * pp;
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> f_done(size_t(stages) * size_t(m), -1), b_done(f_done);  // end time per (stage, mb)
  const auto at = [&](std::vector<double>& v, int stage, int mb) -> double& {
    return v[size_t(stage) * size_t(m) + size_t(mb)];
  };
  using MinHeap = std::priority_queue<double, std::vector<double>, std::greater<>>;
  struct RankState {
    std::array<int, 2> forwards{0, 0}, backwards{0, 0}, weights{0, 0};  // per chunk, in micro-batch order
    std::deque<std::pair<int, int>> deferred;                          // (mb, chunk) whose W is due
    double free_at = 0;                                                 // inf: waiting for a notice
    MinHeap notices;  // end times of neighbours' results this rank may be waiting for
  };
  std::vector<RankState> st(static_cast<size_t>(pp));
  std::priority_queue<std::pair<double, int>, std::vector<std::pair<double, int>>, std::greater<>> queue;
  for (int r = 0; r < pp; ++r) queue.emplace(0.0, r);
  // A result of stage v ending at `end` can unblock the rank holding the stage it feeds.
  const auto notify = [&](int stage, double end) {
    if (stage < 0 || stage >= stages) return;
    RankState& y = st[size_t(s.holder(stage, 0).rank)];
    y.notices.push(end);
    if (y.free_at == inf) {
      y.free_at = end;
      queue.emplace(end, s.holder(stage, 0).rank);
    }
  };
  const auto limit = [&](int r, int chunk) { return chunk == 0 ? 2 * pp - 1 - r : r + 1; };
  // One pass for rank r at time `now`: its duration, 0 if it has none ready.
  const auto take = [&](int r, double now) -> double {
    RankState& x = st[size_t(r)];
    const auto ready = [&](double end) { return end >= 0 && end <= now; };
    auto& ops = s.ranks[size_t(r)];
    const auto forward = [&]() -> double {
      for (const int c : {1, 0}) {
        const int mb = x.forwards[size_t(c)], v = s.virtual_stage(r, c);
        if (mb >= m || mb - x.weights[size_t(c)] >= limit(r, c)) continue;
        if (v > 0 && !ready(at(f_done, v - 1, mb))) continue;
        ops.push_back({OpKind::F, mb, c});
        ++x.forwards[size_t(c)];
        at(f_done, v, mb) = now + times.f;
        notify(v + 1, now + times.f);
        return times.f;
      }
      return 0;
    };
    const auto backward = [&]() -> double {
      for (const int c : {int(backward_chunk1_first), int(!backward_chunk1_first)}) {
        const int mb = x.backwards[size_t(c)], v = s.virtual_stage(r, c);
        if (mb >= x.forwards[size_t(c)]) continue;
        if (!ready(v + 1 < stages ? at(b_done, v + 1, mb) : at(f_done, v, mb))) continue;
        ops.push_back({OpKind::B, mb, c});
        ++x.backwards[size_t(c)];
        x.deferred.emplace_back(mb, c);
        at(b_done, v, mb) = now + times.b;
        notify(v - 1, now + times.b);
        return times.b;
      }
      return 0;
    };
    if (const double t = forward_first ? forward() : backward(); t > 0) return t;
    if (const double t = forward_first ? backward() : forward(); t > 0) return t;
    if (x.deferred.empty()) return 0;
    const auto [mb, c] = x.deferred.front();
    ops.push_back({OpKind::W, mb, c});
    ++x.weights[size_t(c)];
    x.deferred.pop_front();
    return times.w;
  };
  // Rounds: the ranks free at the earliest time try in rank order (so every rank builds the same
  // schedule). A rank with nothing ready waits for the next notice after now; results ending at or
  // before now were visible to it already.
  long long remaining = 6LL * pp * m;
  while (remaining > 0) {
    TESSEL_CHECK(!queue.empty(), "zb-v: the list scheduler is stuck (pp {}, {} micro-batches)", pp, m);
    const double now = queue.top().first;
    std::vector<int> round;
    while (!queue.empty() && queue.top().first == now) {
      const int r = queue.top().second;
      queue.pop();
      if (st[size_t(r)].free_at == now) round.push_back(r);  // else a stale entry
    }
    std::sort(round.begin(), round.end());
    round.erase(std::unique(round.begin(), round.end()), round.end());
    for (const int r : round) {
      RankState& x = st[size_t(r)];
      if (const double took = take(r, now); took > 0) {
        x.free_at = now + took;
        queue.emplace(x.free_at, r);
        --remaining;
        continue;
      }
      while (!x.notices.empty() && x.notices.top() <= now) x.notices.pop();
      x.free_at = x.notices.empty() ? inf : x.notices.top();
      if (x.free_at != inf) queue.emplace(x.free_at, r);
    }
  }
  return s;
}

}  // namespace

Schedule make_zb_v(int pp, int m, const PassTimes& times) {
  check_schedule_sizes(pp, 2, m);
  for (const double v : {times.f, times.b, times.w})
    TESSEL_CHECK(std::isfinite(v) && v > 0, "zb-v: pass times must be finite and > 0, got F {} B {} W {}", times.f,
                 times.b, times.w);
  // Two list schedules, forwards or backwards first; the shorter at `times` wins (ZeroBubble's
  // automatic scheduler likewise keeps the best of its heuristics' schedules).
  Schedule best;
  double best_makespan = std::numeric_limits<double>::infinity();
  const size_t stages = size_t(2 * pp);
  const StageCosts costs{std::vector<double>(stages, times.f), std::vector<double>(stages, times.b),
                         std::vector<double>(stages, times.w)};
  for (const int variant : {0, 1, 2, 3}) {
    Schedule s = list_schedule_v(pp, m, times, variant < 2, variant % 2 == 0);
    const double makespan = simulate(s, costs).makespan;
    if (makespan < best_makespan) {
      best_makespan = makespan;
      best = std::move(s);
    }
  }
  best.placement = Placement::v_shape;
  return best;
}

}  // namespace tessel::pipeline
