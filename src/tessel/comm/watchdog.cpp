#include "tessel/comm/watchdog.h"

#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

namespace tessel::comm {
namespace {

namespace fs = std::filesystem;

int64_t steady_ms() {  // how long a wait lasted: immune to wall-clock steps
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t wall_ms() {  // heartbeat times: compared across ranks (and machines)
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// How often the heartbeat is rewritten and the wait checked: every heartbeat_interval_s, and at least
// four times per timeout.
double heartbeat_period(const WatchdogOptions& o) { return std::min(o.heartbeat_interval_s, o.timeout_s / 4); }

std::string heartbeat_path(const std::string& dir, int rank) { return fmt::format("{}/rank_{:05d}", dir, rank); }

// The process's watchdog: what the main thread reports, read by the watchdog's thread.
struct State {
  std::mutex mu;
  std::condition_variable wake;
  WatchdogOptions opt;
  std::map<std::string, int64_t> posted;     // per group key
  std::shared_ptr<const WaitInfo> waiting;   // the wait in progress (null: none)
  int64_t waiting_since_ms = 0;              // wall clock, for the heartbeat
  int64_t waiting_since_steady_ms = 0;       // what the timeout is measured with
  int untimed = 0;                           // open UntimedWaits scopes
  bool stop = false;
  std::thread thread;
};
std::atomic<bool> g_running{false};
State& state() {
  static State* s = new State;  // never destroyed: no joinable thread in a static destructor
  return *s;
}

Heartbeat snapshot_heartbeat(const State& s, int64_t now) {  // under s.mu
  Heartbeat h;
  h.rank = s.opt.world_rank;
  h.time_ms = now;
  if (s.waiting) {
    h.waiting_op = s.waiting->op;
    h.waiting_group = s.waiting->peer >= 0 ? fmt::format("{}:peer{}", s.waiting->group, s.waiting->peer) : s.waiting->group;
    h.waiting_since_ms = s.waiting_since_ms;
  }
  h.posted.assign(s.posted.begin(), s.posted.end());
  return h;
}

void write_heartbeat(const Heartbeat& h, const std::string& dir) {  // not under the lock: file I/O
  const std::string path = heartbeat_path(dir, h.rank);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << format_heartbeat(h);
    if (!out.good()) return;  // a full disk must not stop training: the heartbeat is advisory
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
}

std::string describe_activity(const Heartbeat& h) {
  return h.waiting_op.empty() ? std::string("computing, in no collective")
                              : fmt::format("waiting in {} on {}", h.waiting_op, h.waiting_group);
}

[[noreturn]] void report_timeout(const WaitInfo& w, double waited_s, const WatchdogOptions& o) {
  // A live rank rewrites its heartbeat every `interval`; one older than two intervals (and than half
  // the timeout, if that is longer) belongs to a rank that stopped.
  const double interval = heartbeat_period(o);
  const double stale_after = std::max(2 * interval, std::min(3 * interval + 2, o.timeout_s / 2));
  const auto why = diagnose_wait(w, o.heartbeat_dir, o.world_rank, wall_ms(), stale_after);
  std::string what = w.peer >= 0 ? fmt::format("{} with world rank {} on group {}", w.op, w.peer, w.group)
                                 : fmt::format("{} #{} on group {}", w.op, w.seq, w.group);
  std::string msg = fmt::format("error: rank {}: {} has waited {:.1f} s (resilience.collective_timeout_s = {:g})",
                                o.world_rank, what, waited_s, o.timeout_s);
  if (why.empty()) msg += "; every rank of the group reached it (slow, not stuck?)";
  for (const auto& line : why) msg += "\n  " + line;
  std::fprintf(stderr, "%s\nrank %d exits with status %d (collective timeout)\n", msg.c_str(), o.world_rank,
               kExitCodeCollectiveTimeout);
  std::fflush(stderr);
  std::this_thread::sleep_for(std::chrono::duration<double>(o.grace_s));
  std::_Exit(kExitCodeCollectiveTimeout);
}

void watchdog_loop() {
  State& s = state();
  std::unique_lock lock(s.mu);
  while (!s.stop) {
    // The timeout first: a heartbeat write stuck on a shared file system must not disable it.
    if (s.waiting && s.untimed == 0) {
      const double waited = double(steady_ms() - s.waiting_since_steady_ms) / 1e3;
      if (waited > s.opt.timeout_s) {
        const WaitInfo w = *s.waiting;
        const WatchdogOptions o = s.opt;
        lock.unlock();
        report_timeout(w, waited, o);
      }
    }
    const Heartbeat h = snapshot_heartbeat(s, wall_ms());
    lock.unlock();
    write_heartbeat(h, s.opt.heartbeat_dir);
    lock.lock();
    s.wake.wait_for(lock, std::chrono::duration<double>(heartbeat_period(s.opt)), [&] { return s.stop; });
  }
}

}  // namespace

int64_t Heartbeat::posted_on(const std::string& group) const {
  for (const auto& [g, n] : posted)
    if (g == group) return n;
  return -1;
}

std::string format_heartbeat(const Heartbeat& h) {
  std::string out = fmt::format("tessel-heartbeat 1\nrank {}\ntime_ms {}\n", h.rank, h.time_ms);
  if (h.waiting_op.empty())
    out += "waiting -\n";
  else
    out += fmt::format("waiting {} {} {}\n", h.waiting_op, h.waiting_group, h.waiting_since_ms);
  for (const auto& [g, n] : h.posted) out += fmt::format("posted {} {}\n", g, n);
  return out;
}

bool parse_heartbeat(const std::string& text, Heartbeat* out) {
  std::istringstream in(text);
  std::string magic;
  int version = 0;
  if (!(in >> magic >> version) || magic != "tessel-heartbeat" || version != 1) return false;
  Heartbeat h;
  for (std::string key; in >> key;) {
    if (key == "rank") {
      if (!(in >> h.rank)) return false;
    } else if (key == "time_ms") {
      if (!(in >> h.time_ms)) return false;
    } else if (key == "waiting") {
      if (!(in >> h.waiting_op)) return false;
      if (h.waiting_op == "-") {
        h.waiting_op.clear();
      } else if (!(in >> h.waiting_group >> h.waiting_since_ms)) {
        return false;
      }
    } else if (key == "posted") {
      std::string g;
      int64_t n = 0;
      if (!(in >> g >> n)) return false;
      h.posted.emplace_back(g, n);
    } else {
      return false;
    }
  }
  *out = h;
  return h.rank >= 0;
}

std::vector<std::string> diagnose_wait(const WaitInfo& w, const std::string& dir, int self, int64_t now_ms,
                                       double stale_after_s) {
  std::vector<std::string> out;
  const std::vector<int> peers = w.peer >= 0 ? std::vector<int>{w.peer} : w.members;
  for (int m : peers) {
    if (m == self) continue;
    std::ifstream in(heartbeat_path(dir, m));
    std::stringstream text;
    text << in.rdbuf();
    Heartbeat h;
    if (!in.good() && !in.eof()) {
      out.push_back(fmt::format("rank {} did not arrive: it has no heartbeat in {} (never started the watchdog?)", m, dir));
      continue;
    }
    if (!parse_heartbeat(text.str(), &h)) {
      out.push_back(fmt::format("rank {} did not arrive: its heartbeat {} is unreadable", m, heartbeat_path(dir, m)));
      continue;
    }
    const double age = double(now_ms - h.time_ms) / 1e3;
    if (age > stale_after_s) {
      out.push_back(fmt::format("rank {} did not arrive: not responding, its last heartbeat is {:.1f} s old (then {}): "
                                "stopped, or its machine is gone",
                                m, age, describe_activity(h)));
      continue;
    }
    if (w.peer >= 0) {
      out.push_back(fmt::format("rank {} (the other side) is alive and {}", m, describe_activity(h)));
      continue;
    }
    const int64_t reached = h.posted_on(w.group);
    if (reached < w.seq)
      out.push_back(fmt::format("rank {} did not arrive: alive, {}, and has posted {} of this group's collectives, not #{}", m,
                                describe_activity(h), std::max<int64_t>(reached, 0), w.seq));
  }
  return out;
}

void start_watchdog(const WatchdogOptions& o) {
  if (o.timeout_s <= 0 || g_running.exchange(true)) return;
  State& s = state();
  {
    const std::lock_guard lock(s.mu);
    s.opt = o;
    s.stop = false;
  }
  std::error_code ec;
  fs::create_directories(o.heartbeat_dir, ec);
  s.thread = std::thread(watchdog_loop);
}

void stop_watchdog() {
  if (!g_running.load()) return;
  State& s = state();
  {
    const std::lock_guard lock(s.mu);
    s.stop = true;
  }
  s.wake.notify_all();
  if (s.thread.joinable()) s.thread.join();
  g_running = false;
}

bool watchdog_running() { return g_running.load(); }

void note_collective_posted(const std::string& group, int64_t seq) {
  if (!g_running.load(std::memory_order_relaxed)) return;
  State& s = state();
  const std::lock_guard lock(s.mu);
  s.posted[group] = seq;
}

WaitWatch::WaitWatch(std::shared_ptr<const WaitInfo> info) {
  if (!info || !g_running.load(std::memory_order_relaxed)) return;
  State& s = state();
  const std::lock_guard lock(s.mu);
  if (s.waiting) return;  // nested (a blocking form calling its own wait): the outer one times it
  s.waiting = std::move(info);
  s.waiting_since_ms = wall_ms();
  s.waiting_since_steady_ms = steady_ms();
  active_ = true;
}

UntimedWaits::UntimedWaits() {
  State& s = state();
  const std::lock_guard lock(s.mu);
  ++s.untimed;
}

UntimedWaits::~UntimedWaits() {
  State& s = state();
  const std::lock_guard lock(s.mu);
  // A wait that began inside the scope and outlives it is timed from the scope's end.
  if (--s.untimed == 0 && s.waiting) s.waiting_since_steady_ms = steady_ms();
}

WaitWatch::~WaitWatch() {
  if (!active_) return;
  State& s = state();
  const std::lock_guard lock(s.mu);
  s.waiting.reset();
}

}  // namespace tessel::comm
