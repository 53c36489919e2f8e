// Zero-bubble and DualPipe schedules against their closed forms (REFERENCE.md, "Pipeline schedules":
// ZeroBubble arXiv 2401.10241, DualPipe), with zero communication, and the structure the executor
// relies on (validate, the V's bend, F&B pairs).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/error_of.h"
#include "tessel/core/check.h"
#include "tessel/core/transfer_spans.h"
#include "tessel/pipeline/simulate.h"
#include "tessel/pipeline/trace.h"

using namespace tessel;
using namespace tessel::pipeline;
using tessel::testing::error_of;

namespace {

Timeline priced(Schedule s, const Costs& c) {
  validate(s);
  add_p2p(s);
  validate(s);
  return simulate(s, c);
}

const Costs kCostSets[] = {{1, 1, 1, 0}, {1, 2, 1, 0}, {1, 1.5, 0.7, 0}, {1.2, 1, 0.4, 0}};

TEST(ZeroBubble, H1BubbleIsTheClosedFormWithOneFOneBsMemory) {
  for (int p : {1, 2, 3, 4, 8})
    for (int m : {p, 2 * p, 3 * p + 1})
      for (const Costs& c : kCostSets) {
        const Timeline t = priced(make_zb_h1(p, m), c);
        // (P - 1)(F + B - W), against 1F1B's (P - 1)(F + B) with the same split.
        EXPECT_NEAR(t.makespan, m * (c.f + c.b + c.w) + (p - 1) * (c.f + c.b - c.w), 1e-9)
            << "p " << p << " m " << m << " F " << c.f << " B " << c.b << " W " << c.w;
        EXPECT_NEAR(t.bubble, (p - 1) * (c.f + c.b - c.w), 1e-9);
        for (int r = 0; r < p; ++r) {
          EXPECT_LE(t.peak_activations[size_t(r)], p - r);  // 1F1B's in-flight count
          EXPECT_LE(t.peak_held[size_t(r)], p);             // the r deferred W's keep r more until W
        }
      }
}

TEST(ZeroBubble, H2BubbleIsTheClosedFormAboveTheRampOfOneStep) {
  for (int p : {2, 3, 4, 8})
    for (int m : {2 * p - 1, 2 * p, 3 * p + 1})
      for (const Costs& c : kCostSets) {
        const Timeline t = priced(make_zb_h2(p, m), c);
        // (P - 1)(F + B - 2W), but one step with a synchronous optimizer step cannot beat the
        // (P - 1) F before the last rank gets its first input.
        const double bubble = (p - 1) * std::max(c.f, c.f + c.b - 2 * c.w);
        EXPECT_NEAR(t.bubble, bubble, 1e-9) << "p " << p << " m " << m << " F " << c.f << " B " << c.b << " W " << c.w;
        EXPECT_EQ(t.peak_activations[0], 2 * p - 1);
        for (int r = 0; r < p; ++r) {
          EXPECT_LE(t.peak_activations[size_t(r)], 2 * (p - r) - 1);
          EXPECT_LE(t.peak_held[size_t(r)], 2 * p - 1) << "p " << p << " m " << m << " rank " << r;  // not O(M)
        }
      }
  try {
    make_zb_h2(4, 6);
    FAIL() << "zb-h2 with fewer than 2P - 1 micro-batches";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("at least 2 x pipeline size - 1 = 7 micro-batches"), std::string::npos)
        << e.what();
  }
}

TEST(ZeroBubble, VHalvesTheH1BubbleAtEqualCostsAndKeepsUpWithItOtherwise) {
  for (int p : {1, 2, 3, 4, 6, 8})
    for (int m : {1, p, 2 * p, 3 * p + 1})
      for (const Costs& c : kCostSets) {
        const Timeline v = priced(make_zb_v(p, m, {c.f, c.b, c.w}), c);
        const Timeline h1 = priced(make_zb_h1(p, m), c);
        // A list scheduler is a heuristic: on this grid it beats ZB-H1 but for one case (p 6, m 19,
        // B = 2W: 1.5 later), never by more than one chunk's F + B.
        EXPECT_LE(v.makespan, h1.makespan + (c.f + c.b) / 2 + 1e-9)
            << "p " << p << " m " << m << " F " << c.f << " B " << c.b;
        const bool equal = c.f == c.b && c.b == c.w;
        if (equal && p > 1) {
          EXPECT_LT(v.makespan, h1.makespan);
        }
        for (int r = 0; r < p; ++r) EXPECT_LE(v.peak_held[size_t(r)], 2 * p);  // chunks of half a stage: 1F1B's memory
        if (equal && m >= p) {
          // The floor: the last rank's first input needs P - 1 chunk forwards (F / 2 each).
          EXPECT_NEAR(v.bubble, (p - 1) * c.f / 2, 1e-9) << "p " << p << " m " << m;
        }
      }
}

TEST(DualPipe, PublishedCaseMakespan66Bubble6) {
  // PP 8, 20 micro-batches, F 1, full backward 2 (B 1 + W 1), F&B 3: makespan 60 + 6.
  Costs c{1, 1, 1, 0};
  c.fb = 3;
  const Timeline t = priced(make_dualpipe(8, 20), c);
  EXPECT_NEAR(t.makespan, 66, 1e-9);
  EXPECT_NEAR(t.bubble, 6, 1e-9);
}

TEST(DualPipe, BubbleIsTheClosedFormAndPeakActivationsArePPlus1AtAnyMicroBatchCount) {
  Costs c{1, 1, 1, 0};
  c.fb = 3;
  for (int p : {2, 4, 6, 8})
    for (int m : {2 * p, 2 * p + 2, 4 * p, 6 * p}) {
      const Timeline t = priced(make_dualpipe(p, m), c);
      // (PP/2 - 1)(F&B + B - 3W), B the full backward (2).
      EXPECT_NEAR(t.bubble, (p / 2 - 1) * (3 + 2 - 3), 1e-9) << "p " << p << " m " << m;
      for (int r = 0; r < p; ++r) EXPECT_EQ(t.peak_activations[size_t(r)], p + 1) << "p " << p << " m " << m;
    }
  for (const auto& [p, m] : {std::pair{3, 12}, std::pair{4, 9}, std::pair{4, 6}})
    EXPECT_THROW(make_dualpipe(p, m), Error) << "p " << p << " m " << m;
}

TEST(DualPipe, VBubbleIsTheClosedFormAndPeakActivationsAreStagesPlus1) {
  Costs c{1, 1, 1, 0};
  c.fb = 3;
  for (int p : {1, 2, 3, 4, 8})
    for (int m : {2 * p, 2 * p + 1, 4 * p}) {
      const Timeline t = priced(make_dualpipe_v(p, m), c);
      // 2P stages of half a rank each: (2P/2 - 1)(F&B + B - 3W) at half the costs.
      EXPECT_NEAR(t.bubble, (p - 1) * (1.5 + 1 - 1.5), 1e-9) << "p " << p << " m " << m;
      for (int r = 0; r < p; ++r) EXPECT_EQ(t.peak_activations[size_t(r)], 2 * p + 1) << "p " << p << " m " << m;
    }
  EXPECT_THROW(make_dualpipe_v(4, 7), Error);
}

TEST(DualPipe, OverlapShortensThePairsAndOnlyThem) {
  Costs serial{1, 1, 1, 0};
  Costs overlapped = serial;
  overlapped.fb = 2;  // the pair hides one unit of its three
  const Timeline a = priced(make_dualpipe(4, 16), serial), b = priced(make_dualpipe(4, 16), overlapped);
  int pairs = 0;
  const Schedule s = make_dualpipe(4, 16);
  for (const Op& op : s.ranks[0]) pairs += op.overlapped ? 1 : 0;
  EXPECT_GT(pairs, 0);
  EXPECT_NEAR(a.busy[0] - b.busy[0], pairs * 1.0, 1e-9);
}

// Fused pairs hide each pass's transfers behind the other pass's compute: a pair of F 1 (0.3 of it
// all-to-all) and B 1 (0.8) with W 1 saves min(0.3, 1 - 0.8) + min(0.8, 1 - 0.3) = 0.2 + 0.7 = 0.9,
// by hand (each transfer hides only behind the other pass's compute: not the 1.1 of both transfers).
// Hidable times outside [0, the pass] are refused, naming the stage.
TEST(DualPipe, FusedPairsHideTheirTransfersBehindTheOtherPass) {
  Schedule s = make_dualpipe(4, 16);
  add_p2p(s);
  const size_t stages = size_t(s.stages());
  StageCosts plain;
  plain.f = plain.b = plain.w = std::vector<double>(stages, 1.0);
  StageCosts fused = plain;
  fused.f_hidable.assign(stages, 0.3);
  fused.b_hidable.assign(stages, 0.8);
  const Timeline a = simulate(s, plain), b = simulate(s, fused);
  for (int r = 0; r < 4; ++r) {
    int pairs = 0;
    for (const Op& op : s.ranks[size_t(r)]) pairs += op.overlapped ? 1 : 0;
    EXPECT_GT(pairs, 0);
    EXPECT_NEAR(a.busy[size_t(r)] - b.busy[size_t(r)], pairs * 0.9, 1e-9) << "rank " << r;
    EXPECT_NEAR(b.hidden[size_t(r)], pairs * 0.9, 1e-9) << "rank " << r;
    EXPECT_EQ(a.hidden[size_t(r)], 0.0);
    // Each pair's three parts take 3 - 0.9 between them.
    const std::vector<Event>& ev = b.ranks[size_t(r)];
    for (size_t i = 0; i + 2 < ev.size(); ++i)
      if (ev[i].op.overlapped) {
        EXPECT_NEAR(ev[i + 2].end - ev[i].start, 2.1, 1e-9) << "rank " << r << " event " << i;
      }
  }
  EXPECT_LT(b.makespan, a.makespan);
  StageCosts bad = fused;
  bad.b_hidable[3] = 1.5;
  EXPECT_HAS(error_of([&] { simulate(s, bad); }), "stage 3's B has 1.5 s of hidable transfers, outside [0, its 1 s]");
  StageCosts twice = fused;
  twice.fb_scale = 0.9;  // a measured pair scale and hidable transfers would count the overlap twice
  EXPECT_HAS(error_of([&] { simulate(s, twice); }), "an F&B scale (0.9) and hidable transfer times both shorten");
  bad.b_hidable.pop_back();
  EXPECT_HAS(error_of([&] { simulate(s, bad); }), "3 hidable B transfer times for 4 virtual stages");
}

TEST(Placement, TheVsBendStaysOnItsRankAndCostsNoTransfer) {
  Schedule s = make_zb_v(3, 6);
  EXPECT_EQ(s.stages(), 6);
  EXPECT_EQ(s.virtual_stage(0, 1), 5);
  EXPECT_EQ(s.holder(3, 0).rank, 2);
  add_p2p(s);
  for (const Op& op : s.ranks[2]) {  // rank 2 holds stages 2 and 3: nothing goes between its chunks
    if (op.kind == OpKind::send_fwd) {
      EXPECT_EQ(op.chunk, 1) << "stage 2 sends its output to itself";
    }
  }
  // One rank: the whole V on it, so communication costs nothing.
  Schedule one = make_zb_v(1, 4);
  add_p2p(one);
  Costs slow{1, 1, 1, 5};
  EXPECT_NEAR(simulate(one, slow).makespan, simulate(one, Costs{1, 1, 1, 0}).makespan, 1e-12);
}

TEST(Placement, DualPipeRunsEachMicroBatchOnOneCopyPerRank) {
  const Schedule s = make_dualpipe(4, 8);
  EXPECT_EQ(s.stages(), 4);
  // Ranks 0 and 3 hold stages 0 and 3, ranks 1 and 2 stages 1 and 2, the lower as chunk 0.
  EXPECT_EQ(s.virtual_stage(3, 0), 0);
  EXPECT_EQ(s.virtual_stage(3, 1), 3);
  EXPECT_EQ(s.virtual_stage(1, 1), 2);
  EXPECT_EQ(s.holder(0, 0).rank, 0);  // the first half enters at rank 0
  EXPECT_EQ(s.holder(0, 4).rank, 3);  // the second at rank 3
  EXPECT_EQ(s.holder(3, 4).rank, 0);
  EXPECT_EQ(s.holder(3, 4).chunk, 1);
  EXPECT_TRUE(s.runs(3, 5, 0));   // the second half meets stage 0 on rank 3
  EXPECT_FALSE(s.runs(3, 1, 0));  // the first half meets it on rank 0
  EXPECT_TRUE(s.runs(0, 5, 1));   // and stage 3 on rank 0
  Schedule wrong = s;
  for (Op& op : wrong.ranks[1])
    if (op.mb == 5) op.chunk = 1 - op.chunk;
  EXPECT_THROW(validate(wrong), Error);
}

TEST(Validate, AnOverlappedForwardNeedsABackwardAndItsWAfterIt) {
  Schedule s = make_1f1b(2, 2);
  s.ranks[1][0].overlapped = true;  // F(0) then B(0), W(0): a well-formed pair
  validate(s);
  Schedule broken = make_zb_h1(2, 3);
  for (Op& op : broken.ranks[1])  // rank 1 (lag 1) runs F(1) B(1) W(0): the W is not the pair's B's
    if (op.kind == OpKind::F && op.mb == 1) op.overlapped = true;
  EXPECT_THROW(validate(broken), Error);
}

TEST(MakeSchedule, NamesTheKindsAndRefusesTheRest) {
  for (const auto& kind : schedule_kinds()) {
    const int m = 8;
    Schedule s = make_schedule(kind, 4, kind == "interleaved" ? 2 : 1, m);
    EXPECT_EQ(s.kind, kind);
    EXPECT_EQ(s.vpp, chunks_per_rank(kind, kind == "interleaved" ? 2 : 1));
    validate(s);
  }
  try {
    make_schedule("zb-h3", 4, 1, 8);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'zb-h3' is not supported (allowed: 1f1b, interleaved, zb-h1, zb-h2, zb-v, "
                                         "dualpipe, dualpipev)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(make_schedule("zb-v", 4, 2, 8), Error);  // vpp is for interleaved only
  EXPECT_EQ(chunks_per_rank("1f1b", 3), 3);              // runs interleaved
  EXPECT_EQ(chunks_per_rank("zb-v", 1), 2);
}

TEST(ChromeTrace, OneTrackPerRankWithEveryComputeSpanAndTheBusyTime) {
  Costs c{1, 2, 1, 0};
  c.fb = 3;
  Schedule s = make_dualpipe(4, 8);
  add_p2p(s);
  const Timeline t = simulate(s, c);
  const auto j = nlohmann::json::parse(chrome_trace(s, t, 1e-3));
  std::vector<double> busy_us(4, 0.0);
  std::vector<int> spans(4, 0), pairs(4, 0);
  for (const auto& e : j.at("traceEvents")) {
    if (e.at("ph") != "X") continue;
    const int r = e.at("tid").get<int>();
    busy_us[size_t(r)] += e.at("dur").get<double>();
    ++spans[size_t(r)];
    pairs[size_t(r)] += e.at("args").at("pair").get<bool>() ? 1 : 0;
  }
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(spans[size_t(r)], int(t.ranks[size_t(r)].size()));
    EXPECT_NEAR(busy_us[size_t(r)], t.busy[size_t(r)] * 1e3, 1e-3 * spans[size_t(r)]);  // 1 unit = 1 ms
    int overlapped = 0;
    for (const Op& op : s.ranks[size_t(r)]) overlapped += op.overlapped ? 1 : 0;
    EXPECT_EQ(pairs[size_t(r)], 3 * overlapped);  // F, B and W of each pair
  }
}

// A real step's fused pair: each pass drawn once per turn, and an all-to-all made by the F in flight
// across the B's turn, on the rank's transfer track. Transfers are not compute: the idle time is the
// window less the turns only.
TEST(ChromeTrace, TransfersGoOnTheirOwnTrackAndAreNotBusyTime) {
  const int dispatch = int(TracedTransfer::moe_dispatch);
  const RankTrace r0{{OpKind::F, 3, 0, 0, true, 10.0, 11.0},
                     {OpKind::B, 1, 1, 3, true, 11.0, 12.0},
                     {OpKind::F, 3, 0, 0, true, 12.0, 13.0},
                     {OpKind::F, 3, 0, 0, true, 10.5, 12.5, dispatch}};
  const RankTrace r1{{OpKind::W, 0, 0, 1, false, 10.0, 10.5}};
  const auto j = nlohmann::json::parse(chrome_trace("test", {r0, r1}));
  std::map<int, std::string> track;
  std::vector<nlohmann::json> spans;
  for (const auto& e : j.at("traceEvents")) {
    if (e.at("ph") == "M" && e.at("name") == "thread_name") track[e.at("tid").get<int>()] = e.at("args").at("name");
    if (e.at("ph") == "X") spans.push_back(e);
  }
  EXPECT_EQ(track, (std::map<int, std::string>{{0, "rank 0"}, {1, "rank 1"}, {2, "rank 0 transfers"}}));
  ASSERT_EQ(spans.size(), 5u);
  const auto& t = spans[3];
  EXPECT_EQ(t.at("tid"), 2);
  EXPECT_EQ(t.at("name"), "moe dispatch all_to_all");
  EXPECT_EQ(t.at("cat"), "communication");
  EXPECT_EQ(t.at("args").at("made_by"), "F");
  EXPECT_NEAR(t.at("ts").get<double>(), 0.5e6, 1e-3);
  EXPECT_NEAR(t.at("dur").get<double>(), 2.0e6, 1e-3);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(spans[i].at("cat"), "compute") << i;
  const std::vector<double> idle = idle_seconds({r0, r1});
  EXPECT_NEAR(idle[0], 0.0, 1e-12);  // 3 s of turns fill the 3 s window; the transfer adds nothing
  EXPECT_NEAR(idle[1], 0.0, 1e-12);
  // A transfer listed last but ending early does not shorten the window.
  RankTrace late = r0;
  late.push_back({OpKind::W, 3, 0, 0, true, 13.0, 14.0});
  late.push_back({OpKind::W, 3, 0, 0, true, 13.2, 13.4, dispatch});
  EXPECT_NEAR(idle_seconds({late})[0], 0.0, 1e-12);
}

}  // namespace
