#include "tessel/pipeline/trace.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#include <fmt/format.h>

#include "tessel/core/transfer_spans.h"

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
  // Rank r's ops on track r; its transfers, where it made any, on track ranks + r, sorted just below.
  const auto track = [&](size_t tid, size_t sort_index, const std::string& name) {
    add(fmt::format(R"({{"ph": "M", "pid": 0, "tid": {}, "name": "thread_name", "args": {{"name": "{}"}}}})", tid, name));
    add(fmt::format(R"({{"ph": "M", "pid": 0, "tid": {}, "name": "thread_sort_index", "args": {{"sort_index": {}}}}})",
                    tid, sort_index));
  };
  for (size_t r = 0; r < ranks.size(); ++r) {
    track(r, 2 * r, fmt::format("rank {}", r));
    bool transfers = false;
    for (const TraceSpan& s : ranks[r]) {
      const bool transfer = s.transfer >= 0;
      if (transfer && !transfers) track(ranks.size() + r, 2 * r + 1, fmt::format("rank {} transfers", r));
      transfers |= transfer;
      const std::string name = transfer ? traced_transfer_name(TracedTransfer(s.transfer)) : op_name(s.kind);
      add(fmt::format(R"({{"ph": "X", "pid": 0, "tid": {}, "name": "{}", "cat": "{}", "ts": {:.3f}, "dur": {:.3f}, )"
                      R"("args": {{"mb": {}, "chunk": {}, "stage": {}, "pair": {}{}}}}})",
                      transfer ? ranks.size() + r : r, name, is_compute(s.kind) && !transfer ? "compute" : "communication",
                      (s.start - origin) * 1e6, (s.end - s.start) * 1e6, s.mb, s.chunk, s.stage,
                      s.pair ? "true" : "false", transfer ? fmt::format(R"(, "made_by": "{}")", op_name(s.kind)) : ""));
    }
  }
  out += "\n]}\n";
  return out;
}

std::vector<RankTrace> gather_traces(comm::Communicator& pp, const RankTrace& mine) {
  // Seven i64 per span: kind, mb, chunk, stage and pair packed, start and end in nanoseconds, transfer.
  constexpr int kFields = 7, kTag = 1 << 20;
  const auto pack = [](const RankTrace& t) {
    std::vector<int64_t> v;
    for (const TraceSpan& s : t)
      v.insert(v.end(), {int64_t(s.kind), s.mb, s.chunk, int64_t(s.stage) * 2 + (s.pair ? 1 : 0),
                         int64_t(s.start * 1e9), int64_t(s.end * 1e9), s.transfer});
    return v;
  };
  const auto unpack = [](const std::vector<int64_t>& v) {
    RankTrace t;
    for (size_t i = 0; i + kFields <= v.size(); i += kFields)
      t.push_back({OpKind(v[i]), int(v[i + 1]), int(v[i + 2]), int(v[i + 3] / 2), v[i + 3] % 2 == 1,
                   double(v[i + 4]) * 1e-9, double(v[i + 5]) * 1e-9, int(v[i + 6])});
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
    // The window from the earliest start to the latest end: a transfer is listed after the op that
    // made it and ends inside it, so the last span listed need not end last.
    double busy = 0, first = r.front().start, last = r.front().end;
    for (const TraceSpan& s : r) {
      if (is_compute(s.kind) && s.transfer < 0) busy += s.end - s.start;
      first = std::min(first, s.start);
      last = std::max(last, s.end);
    }
    idle.push_back(last - first - busy);
  }
  return idle;
}

}  // namespace tessel::pipeline
