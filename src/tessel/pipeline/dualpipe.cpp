// DualPipe and DualPipeV (DeepSeek-V3 technical report, arXiv 2412.19437, section 3.2.1; the phases
// follow the public reference's step structure). Both run a rank's two chunks as "phases": phase 0 is
// the chunk nearer its micro-batches' entry, phase 1 the other. Eight steps per rank:
//   1 forwards of phase 0         5 B of phase 1, F&B pairs (1, 0)
//   2 F of phase 0 then phase 1   6 B of phase 1 and phase 0; the later half defer their W
//   3 B(1) with W deferred, a W, F(1)   7 a deferred W, then B(0) with W deferred
//   4 F&B pairs (0, 1) and (1, 0) 8 the remaining deferred W's
// A B that does not defer its W runs it right after (the full backward of the reference), and an F&B
// pair's backward is full as well.
#include <array>
#include <deque>

#include "tessel/core/check.h"
#include "tessel/pipeline/schedule.h"

namespace tessel::pipeline {

namespace {

// One rank's operations. `half_rank`: the rank's position from its nearer end (DualPipe) or its rank
// (DualPipeV); `half_ranks`: P / 2 (DualPipe) or P (DualPipeV); `per_phase`: micro-batches each
// phase runs; chunk_of(phase) and first_mb(chunk): where a phase's chunk sits and its first micro-batch.
struct PhaseRank {
  int half_rank, half_ranks, per_phase;
  bool middle;  // the rank where the two phases meet: its first step-4 F and B run apart
  std::array<int, 2> chunk_of, first_mb;
};

std::vector<Op> dual_phases(const PhaseRank& p) {
  std::vector<Op> ops;
  std::array<int, 2> forwards{0, 0}, backwards{0, 0};
  std::deque<Op> deferred;
  const auto F = [&](int phase, bool overlapped = false) {
    const int c = p.chunk_of[size_t(phase)];
    ops.push_back({OpKind::F, p.first_mb[size_t(c)] + forwards[size_t(phase)]++, c, overlapped});
  };
  const auto B = [&](int phase, bool defer_w) {
    const int c = p.chunk_of[size_t(phase)];
    const Op b{OpKind::B, p.first_mb[size_t(c)] + backwards[size_t(phase)]++, c};
    ops.push_back(b);
    if (defer_w)
      deferred.push_back({OpKind::W, b.mb, c});
    else
      ops.push_back({OpKind::W, b.mb, c});
  };
  const auto W = [&] {
    ops.push_back(deferred.front());
    deferred.pop_front();
  };
  const auto FB = [&](int f_phase, int b_phase) {
    F(f_phase, true);
    B(b_phase, false);
  };
  const int h = p.half_rank, n = p.half_ranks;
  for (int i = 0; i < (n - h - 1) * 2; ++i) F(0);  // 1
  for (int i = 0; i < h + 1; ++i) {                 // 2
    F(0);
    F(1);
  }
  for (int i = 0; i < n - h - 1; ++i) {  // 3
    B(1, true);
    W();
    F(1);
  }
  const int steady = p.per_phase - 2 * n + h + 1;  // 4
  for (int i = 0; i < steady; ++i) {
    if (i == 0 && p.middle) {
      F(0);
      B(1, false);
    } else {
      FB(0, 1);
    }
    FB(1, 0);
  }
  for (int i = 0; i < n - h - 1; ++i) {  // 5
    B(1, false);
    FB(1, 0);
  }
  bool defer = false;  // 6: the later half of these B's leave their W for steps 7 and 8
  const int drain = h + 1;
  for (int i = 0; i < drain; ++i) {
    if (i == drain / 2 && h % 2 == 1) defer = true;
    B(1, defer);
    if (i == drain / 2 && h % 2 == 0) defer = true;
    B(0, defer);
  }
  for (int i = 0; i < n - h - 1; ++i) {  // 7
    W();
    B(0, true);
  }
  while (!deferred.empty()) W();  // 8
  return ops;
}

}  // namespace

Schedule make_dualpipe(int pp, int m) {
  check_schedule_sizes(pp, 2, m);
  TESSEL_CHECK(pp % 2 == 0 && pp >= 2, "dualpipe needs an even pipeline size, got {}", pp);
  TESSEL_CHECK(m % 2 == 0 && m >= 2 * pp,
               "dualpipe needs an even number of micro-batches, at least 2 x pipeline size = {}; got {}", 2 * pp, m);
  Schedule s{"dualpipe", pp, 2, m, {}};
  s.placement = Placement::dual;
  for (int r = 0; r < pp; ++r) {
    // Phase 0 is chunk 0 (the stage nearer the rank's end) on every rank; its micro-batches are those
    // entering at that end: the first half on the first half of the ranks, the second half on the rest.
    const bool second_half = r >= pp / 2;
    const int h = second_half ? pp - 1 - r : r;
    const std::array<int, 2> first_mb = second_half ? std::array<int, 2>{m / 2, 0} : std::array<int, 2>{0, m / 2};
    s.ranks.push_back(dual_phases({h, pp / 2, m / 2, h == pp / 2 - 1, {0, 1}, first_mb}));
  }
  return s;
}

Schedule make_dualpipe_v(int pp, int m) {
  check_schedule_sizes(pp, 2, m);
  TESSEL_CHECK(m >= 2 * pp, "dualpipev needs at least 2 x pipeline size = {} micro-batches, got {}", 2 * pp, m);
  Schedule s{"dualpipev", pp, 2, m, {}};
  s.placement = Placement::v_shape;
  for (int r = 0; r < pp; ++r) s.ranks.push_back(dual_phases({r, pp, m, r == pp - 1, {0, 1}, {0, 0}}));
  return s;
}

}  // namespace tessel::pipeline
