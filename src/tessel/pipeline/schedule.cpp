#include "tessel/pipeline/schedule.h"

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

namespace {

void check_sizes(int pp, int vpp, int m) {
  TESSEL_CHECK(pp >= 1 && vpp >= 1 && m >= 1, "pipeline sizes must be positive (pp {}, vpp {}, micro-batches {})", pp,
               vpp, m);
  const long long passes = (long long)pp * vpp * m;
  TESSEL_CHECK(passes <= kMaxSchedulePasses,
               "a pipeline schedule of pp {} x vpp {} x {} micro-batches = {} passes is larger than the {} allowed",
               pp, vpp, m, passes, kMaxSchedulePasses);
}

}  // namespace

Schedule make_1f1b(int pp, int m) {
  check_sizes(pp, 1, m);
  Schedule s{"1f1b", pp, 1, m, {}};
  s.ranks.resize(size_t(pp));
  for (int r = 0; r < pp; ++r) {
    auto& ops = s.ranks[size_t(r)];
    const int warmup = std::min(pp - r - 1, m);
    int f = 0, b = 0;
    for (; f < warmup; ++f) ops.push_back({OpKind::F, f, 0});
    while (f < m) {  // steady state: one forward, one backward
      ops.push_back({OpKind::F, f++, 0});
      ops.push_back({OpKind::B, b, 0});
      ops.push_back({OpKind::W, b++, 0});
    }
    for (; b < m; ++b) {
      ops.push_back({OpKind::B, b, 0});
      ops.push_back({OpKind::W, b, 0});
    }
  }
  return s;
}

Schedule make_interleaved_1f1b(int pp, int vpp, int m) {
  check_sizes(pp, vpp, m);
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

void add_p2p(Schedule& s) {
  const int last = s.stages() - 1;
  for (int r = 0; r < s.pp; ++r) {
    std::vector<Op> out;
    for (const Op& op : s.ranks[size_t(r)]) {
      const int v = s.virtual_stage(r, op.chunk);
      if (op.kind == OpKind::F) {
        if (v > 0) out.push_back({OpKind::recv_fwd, op.mb, op.chunk});
        out.push_back(op);
        if (v < last) out.push_back({OpKind::send_fwd, op.mb, op.chunk});
      } else if (op.kind == OpKind::B) {
        if (v < last) out.push_back({OpKind::recv_bwd, op.mb, op.chunk});
        out.push_back(op);
        if (v > 0) out.push_back({OpKind::send_bwd, op.mb, op.chunk});
      } else {
        out.push_back(op);
      }
    }
    s.ranks[size_t(r)] = std::move(out);
  }
}

void validate(const Schedule& s) {
  TESSEL_CHECK(int(s.ranks.size()) == s.pp, "schedule has {} ranks, pp is {}", s.ranks.size(), s.pp);
  for (int r = 0; r < s.pp; ++r) {
    std::map<std::tuple<int, int, int>, int> seen;  // (kind, mb, chunk) -> position
    const auto& ops = s.ranks[size_t(r)];
    for (int i = 0; i < int(ops.size()); ++i) {
      const Op& op = ops[size_t(i)];
      if (op.kind != OpKind::F && op.kind != OpKind::B && op.kind != OpKind::W) continue;
      TESSEL_CHECK(op.mb >= 0 && op.mb < s.micro_batches && op.chunk >= 0 && op.chunk < s.vpp,
                   "rank {}: {}({}, {}) out of range", r, op_name(op.kind), op.mb, op.chunk);
      const bool fresh = seen.emplace(std::make_tuple(int(op.kind), op.mb, op.chunk), i).second;
      TESSEL_CHECK(fresh, "rank {}: {}({}, {}) appears twice", r, op_name(op.kind), op.mb, op.chunk);
      if (op.kind != OpKind::F) {
        const OpKind before = op.kind == OpKind::B ? OpKind::F : OpKind::B;
        TESSEL_CHECK(seen.count(std::make_tuple(int(before), op.mb, op.chunk)), "rank {}: {}({}, {}) before its {}", r,
                     op_name(op.kind), op.mb, op.chunk, op_name(before));
      }
    }
    TESSEL_CHECK(int(seen.size()) == 3 * s.micro_batches * s.vpp, "rank {}: {} compute operations, expected {}", r,
                 seen.size(), 3 * s.micro_batches * s.vpp);
  }
}

}  // namespace tessel::pipeline
