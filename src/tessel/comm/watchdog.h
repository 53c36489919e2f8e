#pragma once
// The collective watchdog (resilience.collective_timeout_s): a collective or transfer that waits
// longer than the timeout becomes an error on the rank waiting for it, naming the operation, the
// group and the ranks that did not arrive, and the process exits with kExitCodeCollectiveTimeout
// (mpirun then ends the job; `tessel launch` restarts it). No silent hang.
//
// Naming the missing rank needs information from outside the stuck collective: a rank stopped by
// SIGSTOP or stuck elsewhere cannot answer. So every rank keeps a heartbeat on a side channel, a small
// file DIR/rank_NNNNN rewritten by a thread of its own every second or so: the wall-clock time, the
// operation it is waiting in (if any), and for each of its groups how many collectives it has posted.
// A rank that times out in the k-th collective of a group reads its peers' heartbeats: a peer whose
// heartbeat stopped is not responding (stopped, or its machine gone); a peer whose count for that
// group is below k has not reached the collective (it is computing, or waiting in another one, which
// its heartbeat names). DIR must be visible to every rank (the run's log.dir on a shared file system).
//
// The MPI backend reports to it (no MPI call is made from the watchdog's thread); with no watchdog
// started every hook returns at once.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tessel::comm {

// Exit status of a rank whose collective timed out (EX_PROTOCOL of sysexits.h).
inline constexpr int kExitCodeCollectiveTimeout = 76;

// One wait the watchdog can time: a collective (the seq-th one this rank posted on `group`) or a
// transfer with world rank `peer`.
struct WaitInfo {
  std::string op;            // "all_reduce", "recv", ...
  std::string group;         // the group's key: its label and its members' world ranks, "dp[0,2]"
  std::vector<int> members;  // world ranks of the group
  int64_t seq = 0;           // collectives: this rank's count of collectives posted on the group, this one included
  int peer = -1;             // transfers: the other side's world rank (-1: a collective)
};

struct WatchdogOptions {
  double timeout_s = 0;       // 0: no watchdog
  std::string heartbeat_dir;  // shared by every rank
  int world_rank = 0;
  double heartbeat_interval_s = 1.0;
  double grace_s = 2.0;  // after reporting, before exiting: the other waiting ranks report too
};

// Starts the heartbeat and watchdog thread (once per process); stop_watchdog or exit ends it.
void start_watchdog(const WatchdogOptions& o);
void stop_watchdog();
bool watchdog_running();

// This rank posted the seq-th collective on `group` (counted by the communicator).
void note_collective_posted(const std::string& group, int64_t seq);

// While alive, this thread waits in `info` (null: nothing to watch).
class WaitWatch {
 public:
  explicit WaitWatch(std::shared_ptr<const WaitInfo> info);
  ~WaitWatch();
  WaitWatch(const WaitWatch&) = delete;
  WaitWatch& operator=(const WaitWatch&) = delete;

 private:
  bool active_ = false;
};

// While one is alive, waits are not timed out (their heartbeat still names them): the ranks waiting
// for a checkpoint that one rank writes alone, whose time depends on the size and the disk, not on a
// fault. A dead rank still ends the job through mpirun.
class UntimedWaits {
 public:
  UntimedWaits();
  ~UntimedWaits();
  UntimedWaits(const UntimedWaits&) = delete;
  UntimedWaits& operator=(const UntimedWaits&) = delete;
};

// What a heartbeat file says (for the diagnosis and tests).
struct Heartbeat {
  int rank = -1;
  int64_t time_ms = 0;           // wall clock (ms since the epoch) when written
  std::string waiting_op;        // "" when not waiting
  std::string waiting_group;
  int64_t waiting_since_ms = 0;
  std::vector<std::pair<std::string, int64_t>> posted;  // per group: collectives posted
  int64_t posted_on(const std::string& group) const;    // -1 when the group is not listed
};
std::string format_heartbeat(const Heartbeat& h);
bool parse_heartbeat(const std::string& text, Heartbeat* out);

// The diagnosis of a timed-out wait from the peers' heartbeats (read from `dir` at wall time now_ms):
// one line per member that did not arrive (or for a transfer, the peer's state).
std::vector<std::string> diagnose_wait(const WaitInfo& w, const std::string& dir, int self, int64_t now_ms,
                                       double stale_after_s);

}  // namespace tessel::comm
