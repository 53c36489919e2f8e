#include "tessel/pipeline/schedule.h"

#include <algorithm>
#include <functional>
#include <map>
#include <tuple>

#include "tessel/core/check.h"

namespace tessel::pipeline {

const char* op_name(OpKind k) {
  switch (k) {
    case OpKind::F: return "F";
    case OpKind::B: return "B";
    case OpKind::W: return "W";
    case OpKind::send_fwd: return "send_fwd";
    case OpKind::recv_fwd: return "recv_fwd";
    case OpKind::send_bwd: return "send_bwd";
    case OpKind::recv_bwd: return "recv_bwd";
  }
  return "?";
}

void check_schedule_sizes(int pp, int vpp, int m) {
  TESSEL_CHECK(pp >= 1 && vpp >= 1 && m >= 1, "pipeline sizes must be positive (pp {}, vpp {}, micro-batches {})", pp,
               vpp, m);
  const long long passes = (long long)pp * vpp * m;
  TESSEL_CHECK(passes <= kMaxSchedulePasses,
               "a pipeline schedule of pp {} x vpp {} x {} micro-batches = {} passes is larger than the {} allowed",
               pp, vpp, m, passes, kMaxSchedulePasses);
}

int Schedule::virtual_stage(int rank, int chunk) const {
  switch (placement) {
    case Placement::interleaved: return chunk * pp + rank;
    case Placement::v_shape: return chunk == 0 ? rank : 2 * pp - 1 - rank;
    case Placement::dual: return chunk == 0 ? std::min(rank, pp - 1 - rank) : std::max(rank, pp - 1 - rank);
  }
  return -1;
}

bool Schedule::runs(int rank, int mb, int chunk) const {
  return placement != Placement::dual || holder(virtual_stage(rank, chunk), mb).rank == rank;
}

Where Schedule::holder(int stage, int mb) const {
  switch (placement) {
    case Placement::interleaved: return {stage % pp, stage / pp};
    case Placement::v_shape: return stage < pp ? Where{stage, 0} : Where{2 * pp - 1 - stage, 1};
    case Placement::dual: return {mb < micro_batches / 2 ? stage : pp - 1 - stage, stage < pp / 2 ? 0 : 1};
  }
  return {-1, -1};
}

Schedule make_1f1b_deferring_w(int pp, int m, const std::function<int(int rank)>& lag) {
  check_schedule_sizes(pp, 1, m);
  Schedule s{"1f1b", pp, 1, m, {}};
  s.ranks.resize(size_t(pp));
  for (int r = 0; r < pp; ++r) {
    auto& ops = s.ranks[size_t(r)];
    const int behind = lag(r);
    int f = 0, b = 0, w = 0;
    const auto backward = [&] {
      ops.push_back({OpKind::B, b++, 0});
      if (b - w > behind) ops.push_back({OpKind::W, w++, 0});
    };
    for (const int warmup = std::min(pp - r - 1, m); f < warmup;) ops.push_back({OpKind::F, f++, 0});
    while (f < m) {  // steady state: one forward, one backward
      ops.push_back({OpKind::F, f++, 0});
      backward();
    }
    while (b < m) backward();
    while (w < m) ops.push_back({OpKind::W, w++, 0});
  }
  return s;
}

Schedule make_1f1b(int pp, int m) {
  return make_1f1b_deferring_w(pp, m, [](int) { return 0; });
}

Schedule make_interleaved_1f1b(int pp, int vpp, int m) {
  check_schedule_sizes(pp, vpp, m);
  TESSEL_CHECK(vpp == 1 || m % pp == 0,
               "interleaved 1F1B needs the number of micro-batches ({}) to be a multiple of the pipeline size ({})", m,
               pp);
  if (vpp == 1) {
    Schedule s = make_1f1b(pp, m);
    s.kind = "interleaved";
    return s;
  }
  Schedule s{"interleaved", pp, vpp, m, {}};
  s.ranks.resize(size_t(pp));
  const int total = m * vpp;
  // k-th forward (backward) of a rank: micro-batches in groups of pp per chunk.
  auto fwd = [&](int k) { return Op{OpKind::F, (k / (pp * vpp)) * pp + k % pp, (k / pp) % vpp}; };
  auto bwd = [&](int k) { return Op{OpKind::B, (k / (pp * vpp)) * pp + k % pp, vpp - 1 - (k / pp) % vpp}; };
  for (int r = 0; r < pp; ++r) {
    auto& ops = s.ranks[size_t(r)];
    const int warmup = std::min((pp - r - 1) * 2 + (vpp - 1) * pp, total);
    int f = 0, b = 0;
    for (; f < warmup; ++f) ops.push_back(fwd(f));
    while (f < total) {
      ops.push_back(fwd(f++));
      const Op x = bwd(b++);
      ops.push_back(x);
      ops.push_back({OpKind::W, x.mb, x.chunk});
    }
    for (; b < total; ++b) {
      const Op x = bwd(b);
      ops.push_back(x);
      ops.push_back({OpKind::W, x.mb, x.chunk});
    }
  }
  return s;
}

const std::vector<std::string>& schedule_kinds() {
  static const std::vector<std::string> kinds{"1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v", "dualpipe", "dualpipev"};
  return kinds;
}

bool is_schedule_kind(const std::string& kind) {
  const auto& kinds = schedule_kinds();
  return std::find(kinds.begin(), kinds.end(), kind) != kinds.end();
}

std::string schedule_kinds_text() {
  std::string text;
  for (const auto& k : schedule_kinds()) text += (text.empty() ? "" : ", ") + k;
  return text;
}

namespace {

void check_kind(const std::string& kind) {
  TESSEL_CHECK(is_schedule_kind(kind), "pipeline schedule '{}' is not supported (allowed: {})", kind,
               schedule_kinds_text());
}

}  // namespace

int chunks_per_rank(const std::string& kind, int vpp) {
  check_kind(kind);
  if (kind == "interleaved" || kind == "1f1b") return vpp;  // 1f1b with vpp > 1 runs interleaved
  return kind == "zb-v" || kind == "dualpipe" || kind == "dualpipev" ? 2 : 1;
}

Placement placement_of(const std::string& kind) {
  check_kind(kind);
  if (kind == "dualpipe") return Placement::dual;
  return kind == "zb-v" || kind == "dualpipev" ? Placement::v_shape : Placement::interleaved;
}

int stages_of(const std::string& kind, int pp, int vpp) {
  return placement_of(kind) == Placement::dual ? pp : pp * chunks_per_rank(kind, vpp);
}

int fewest_micro_batches(const std::string& kind, int pp) {
  check_kind(kind);
  if (kind == "zb-h2") return 2 * pp - 1;
  return kind == "dualpipe" || kind == "dualpipev" ? 2 * pp : 1;
}

Schedule make_schedule(const std::string& kind, int pp, int vpp, int m, const PassTimes& times) {
  check_kind(kind);
  if (kind == "interleaved") return make_interleaved_1f1b(pp, vpp, m);
  TESSEL_CHECK(vpp == 1, "pipeline schedule '{}' sets its own chunks per rank ({}); a virtual pipeline size of {} "
               "is for 'interleaved'", kind, chunks_per_rank(kind, 1), vpp);
  if (kind == "1f1b") return make_1f1b(pp, m);
  if (kind == "zb-h1") return make_zb_h1(pp, m);
  if (kind == "zb-h2") return make_zb_h2(pp, m);
  if (kind == "zb-v") return make_zb_v(pp, m, times);
  if (kind == "dualpipe") return make_dualpipe(pp, m);
  return make_dualpipe_v(pp, m);
}

void add_p2p(Schedule& s) {
  const int last = s.stages() - 1;
  for (int r = 0; r < s.pp; ++r) {
    std::vector<Op> out;
    // A neighbouring stage on another rank means a transfer; on this rank (the V's bend), none.
    const auto remote = [&](int stage, int mb) { return s.holder(stage, mb).rank != r; };
    for (const Op& op : s.ranks[size_t(r)]) {
      const int v = s.virtual_stage(r, op.chunk);
      if (op.kind == OpKind::F) {
        if (v > 0 && remote(v - 1, op.mb)) out.push_back({OpKind::recv_fwd, op.mb, op.chunk});
        out.push_back(op);
        if (v < last && remote(v + 1, op.mb)) out.push_back({OpKind::send_fwd, op.mb, op.chunk});
      } else if (op.kind == OpKind::B) {
        if (v < last && remote(v + 1, op.mb)) out.push_back({OpKind::recv_bwd, op.mb, op.chunk});
        out.push_back(op);
        if (v > 0 && remote(v - 1, op.mb)) out.push_back({OpKind::send_bwd, op.mb, op.chunk});
      } else {
        out.push_back(op);
      }
    }
    s.ranks[size_t(r)] = std::move(out);
  }
}

void validate(const Schedule& s) {
  TESSEL_CHECK(int(s.ranks.size()) == s.pp, "schedule has {} ranks, pp is {}", s.ranks.size(), s.pp);
  const auto compute = [](const Op& op) { return op.kind == OpKind::F || op.kind == OpKind::B || op.kind == OpKind::W; };
  for (int r = 0; r < s.pp; ++r) {
    int held = 0;  // (micro-batch, chunk) passes this rank runs
    for (int mb = 0; mb < s.micro_batches; ++mb)
      for (int c = 0; c < s.vpp; ++c) held += s.runs(r, mb, c) ? 1 : 0;
    std::map<std::tuple<int, int, int>, int> seen;  // (kind, mb, chunk) -> position
    const auto& ops = s.ranks[size_t(r)];
    for (int i = 0; i < int(ops.size()); ++i) {
      const Op& op = ops[size_t(i)];
      if (!compute(op)) continue;
      TESSEL_CHECK(op.mb >= 0 && op.mb < s.micro_batches && op.chunk >= 0 && op.chunk < s.vpp,
                   "rank {}: {}({}, {}) out of range", r, op_name(op.kind), op.mb, op.chunk);
      TESSEL_CHECK(s.runs(r, op.mb, op.chunk), "rank {}: {}({}, {}): chunk {} does not run micro-batch {} ({})", r,
                   op_name(op.kind), op.mb, op.chunk, op.chunk, op.mb, s.kind);
      const bool fresh = seen.emplace(std::make_tuple(int(op.kind), op.mb, op.chunk), i).second;
      TESSEL_CHECK(fresh, "rank {}: {}({}, {}) appears twice", r, op_name(op.kind), op.mb, op.chunk);
      if (op.kind != OpKind::F) {
        const OpKind before = op.kind == OpKind::B ? OpKind::F : OpKind::B;
        TESSEL_CHECK(seen.count(std::make_tuple(int(before), op.mb, op.chunk)), "rank {}: {}({}, {}) before its {}", r,
                     op_name(op.kind), op.mb, op.chunk, op_name(before));
      }
      if (op.overlapped) {
        // The pair's B and its W are the rank's next two compute operations.
        std::vector<Op> next;
        for (int j = i + 1; j < int(ops.size()) && next.size() < 2; ++j)
          if (compute(ops[size_t(j)])) next.push_back(ops[size_t(j)]);
        TESSEL_CHECK(op.kind == OpKind::F && next.size() == 2 && next[0].kind == OpKind::B &&
                         next[1].kind == OpKind::W && next[1].mb == next[0].mb && next[1].chunk == next[0].chunk,
                     "rank {}: {}({}, {}) is marked overlapped but is not a forward followed by a B and its W", r,
                     op_name(op.kind), op.mb, op.chunk);
      }
    }
    TESSEL_CHECK(int(seen.size()) == 3 * held, "rank {}: {} compute operations, expected {}", r, seen.size(),
                 3 * held);
  }
}

}  // namespace tessel::pipeline
