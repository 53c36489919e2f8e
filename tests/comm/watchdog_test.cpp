// The collective watchdog: heartbeat files, the diagnosis of a timed-out wait from the peers'
// heartbeats, and the exit of a wait that outlives the timeout.
#include <gtest/gtest.h>
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "tessel/comm/watchdog.h"

namespace tessel::comm {
namespace {

namespace fs = std::filesystem;

struct HeartbeatDir {
  fs::path dir = fs::temp_directory_path() / ("tessel-heartbeats-" + std::to_string(::getpid()));
  HeartbeatDir() { fs::create_directories(dir); }
  ~HeartbeatDir() { fs::remove_all(dir); }
  void write(const Heartbeat& h) const {
    std::ofstream(dir / fmt::format("rank_{:05d}", h.rank)) << format_heartbeat(h);
  }
};

Heartbeat beat(int rank, int64_t time_ms, std::vector<std::pair<std::string, int64_t>> posted, std::string op = "",
               std::string group = "") {
  Heartbeat h;
  h.rank = rank;
  h.time_ms = time_ms;
  h.waiting_op = std::move(op);
  h.waiting_group = std::move(group);
  h.waiting_since_ms = h.waiting_op.empty() ? 0 : time_ms - 10;
  h.posted = std::move(posted);
  return h;
}

TEST(Heartbeat, FormatsAndParsesBack) {
  const Heartbeat h = beat(3, 1234567, {{"dp[1,3]", 42}, {"tp[2,3]", 7}}, "all_reduce", "dp[1,3]");
  Heartbeat back;
  ASSERT_TRUE(parse_heartbeat(format_heartbeat(h), &back));
  EXPECT_EQ(back.rank, 3);
  EXPECT_EQ(back.time_ms, 1234567);
  EXPECT_EQ(back.waiting_op, "all_reduce");
  EXPECT_EQ(back.waiting_group, "dp[1,3]");
  EXPECT_EQ(back.posted_on("dp[1,3]"), 42);
  EXPECT_EQ(back.posted_on("tp[2,3]"), 7);
  EXPECT_EQ(back.posted_on("pp[0,1]"), -1);
  EXPECT_FALSE(parse_heartbeat("tessel-heartbeat 2\nrank 1\n", &back));
  EXPECT_FALSE(parse_heartbeat("rank 1\n", &back));
}

TEST(DiagnoseWait, NamesTheStoppedAndTheLateRanksNotTheOnesThatArrived) {
  HeartbeatDir hb;
  const int64_t now = 1'000'000;
  const std::string g = "dp[0,1,2,3]";
  hb.write(beat(1, now - 500, {{g, 9}}, "all_reduce", g));  // arrived (posted #9)
  hb.write(beat(2, now - 20'000, {{g, 8}}));                 // heartbeat 20 s old: stopped
  hb.write(beat(3, now - 300, {{g, 8}}, "recv", "pp[3,7]:peer7"));  // alive, elsewhere
  const WaitInfo w{"all_reduce", g, {0, 1, 2, 3}, 9, -1};
  const auto why = diagnose_wait(w, hb.dir.string(), 0, now, 5.0);
  ASSERT_EQ(why.size(), 2u);
  EXPECT_NE(why[0].find("rank 2 did not arrive: not responding, its last heartbeat is 20.0 s old"), std::string::npos);
  EXPECT_NE(why[1].find("rank 3 did not arrive: alive, waiting in recv on pp[3,7]:peer7, and has posted 8"),
            std::string::npos);
}

TEST(DiagnoseWait, AMissingHeartbeatAndATransfersPeer) {
  HeartbeatDir hb;
  const auto none = diagnose_wait({"barrier", "world[0,1]", {0, 1}, 1, -1}, hb.dir.string(), 0, 1000, 5.0);
  ASSERT_EQ(none.size(), 1u);
  EXPECT_NE(none[0].find("rank 1 did not arrive: it has no heartbeat"), std::string::npos);
  hb.write(beat(5, 1000, {}));
  const auto peer = diagnose_wait({"recv", "pp[4,5]", {4, 5}, 0, 5}, hb.dir.string(), 4, 1200, 5.0);
  ASSERT_EQ(peer.size(), 1u);
  EXPECT_NE(peer[0].find("rank 5 (the other side) is alive and computing"), std::string::npos);
}

TEST(WatchdogDeathTest, AWaitBeyondTheTimeoutExitsNamingItAndTheMissingRank) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  HeartbeatDir hb;
  hb.write(beat(1, 0, {{"dp[0,1]", 2}}));  // written at the epoch: stopped long ago
  EXPECT_EXIT(
      {
        start_watchdog({0.4, hb.dir.string(), 0, 0.1, 0.0});
        note_collective_posted("dp[0,1]", 3);
        const WaitWatch waiting(std::make_shared<const WaitInfo>(WaitInfo{"all_reduce", "dp[0,1]", {0, 1}, 3, -1}));
        std::this_thread::sleep_for(std::chrono::seconds(20));
      },
      ::testing::ExitedWithCode(kExitCodeCollectiveTimeout),
      "rank 0: all_reduce #3 on group dp\\[0,1\\] has waited 0\\.[4-9] s.*\n.*rank 1 did not arrive: not responding");
}

TEST(Watchdog, AWaitWithinTheTimeoutPassesAndTheHeartbeatIsWritten) {
  HeartbeatDir hb;
  start_watchdog({5.0, hb.dir.string(), 0, 0.05, 0.0});
  note_collective_posted("tp[0,1]", 4);
  {
    const WaitWatch waiting(std::make_shared<const WaitInfo>(WaitInfo{"all_gather", "tp[0,1]", {0, 1}, 4, -1}));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  stop_watchdog();
  EXPECT_FALSE(watchdog_running());
  std::ifstream in(hb.dir / "rank_00000");
  std::stringstream text;
  text << in.rdbuf();
  Heartbeat h;
  ASSERT_TRUE(parse_heartbeat(text.str(), &h));
  EXPECT_EQ(h.posted_on("tp[0,1]"), 4);
}

}  // namespace
}  // namespace tessel::comm
