#include "tessel/pipeline/trace.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#include <fmt/format.h>

namespace tessel::pipeline {

namespace {

bool is_compute(OpKind k) { return k == OpKind::F || k == OpKind::B || k == OpKind::W; }

}  // namespace

std::string chrome_trace(const std::string& title, const std::vector<RankTrace>& ranks) {
  double origin = std::numeric_limits<double>::infinity();
  for (const auto& r : ranks)
    for (const auto& s : r) origin = std::min(origin, s.start);
  std::string out = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  bool first = true;
  const auto add = [&](const std::string& event) {
    out += (first ? "  " : ",\n  ") + event;
    first = false;
  };
  add(fmt::format(R"({{"ph": "M", "pid": 0, "name": "process_name", "args": {{"name": "{}"}}}})", title));
  for (size_t r = 0; r < ranks.size(); ++r) {
    add(fmt::format(R"({{"ph": "M", "pid": 0, "tid": {}, "name": "thread_name", "args": {{"name": "rank {}"}}}})", r, r));
    for (const TraceSpan& s : ranks[r])
      add(fmt::format(R"({{"ph": "X", "pid": 0, "tid": {}, "name": "{}", "cat": "{}", "ts": {:.3f}, "dur": {:.3f}, )"
                      R"("args": {{"mb": {}, "chunk": {}, "stage": {}, "pair": {}}}}})",
                      r, op_name(s.kind), is_compute(s.kind) ? "compute" : "communication", (s.start - origin) * 1e6,
                      (s.end - s.start) * 1e6, s.mb, s.chunk, s.stage, s.pair ? "true" : "false"));
  }
  out += "\n]}\n";
  return out;
}

std::vector<RankTrace> gather_traces(comm::Communicator& pp, const RankTrace& mine) {
  // Six i64 per span: kind, mb, chunk, stage and pair packed, start and end in nanoseconds.
  constexpr int kFields = 6, kTag = 1 << 20;
  const auto pack = [](const RankTrace& t) {
    std::vector<int64_t> v;
    for (const TraceSpan& s : t)
      v.insert(v.end(), {int64_t(s.kind), s.mb, s.chunk, int64_t(s.stage) * 2 + (s.pair ? 1 : 0),
                         int64_t(s.start * 1e9), int64_t(s.end * 1e9)});
    return v;
  };
  const auto unpack = [](const std::vector<int64_t>& v) {
    RankTrace t;
    for (size_t i = 0; i + kFields <= v.size(); i += kFields)
      t.push_back({OpKind(v[i]), int(v[i + 1]), int(v[i + 2]), int(v[i + 3] / 2), v[i + 3] % 2 == 1,
                   double(v[i + 4]) * 1e-9, double(v[i + 5]) * 1e-9});
    return t;
  };
  if (pp.rank() != 0) {
    const std::vector<int64_t> v = pack(mine);
    const int64_t n = int64_t(v.size());
    pp.send(&n, 1, DType::i64, 0, kTag);
    if (n > 0) pp.send(v.data(), n, DType::i64, 0, kTag + 1);
    return {};
  }
  std::vector<RankTrace> all(size_t(pp.size()));
  all[0] = unpack(pack(mine));  // the same nanosecond rounding as the others'
  for (int r = 1; r < pp.size(); ++r) {
    int64_t n = 0;
    pp.recv(&n, 1, DType::i64, r, kTag);
    std::vector<int64_t> v(static_cast<size_t>(n));
    if (n > 0) pp.recv(v.data(), n, DType::i64, r, kTag + 1);
    all[size_t(r)] = unpack(v);
  }
  return all;
}

std::vector<double> idle_seconds(const std::vector<RankTrace>& ranks) {
  std::vector<double> idle;
  for (const RankTrace& r : ranks) {
    if (r.empty()) {
      idle.push_back(0);
      continue;
    }
    double busy = 0;
    for (const TraceSpan& s : r)
      if (is_compute(s.kind)) busy += s.end - s.start;
    idle.push_back(r.back().end - r.front().start - busy);
  }
  return idle;
}

}  // namespace tessel::pipeline
