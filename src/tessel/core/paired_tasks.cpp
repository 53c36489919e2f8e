#include "tessel/core/paired_tasks.h"

#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>

#include "tessel/core/check.h"

namespace tessel {

namespace {

// One run_paired call: whose turn it is, which task has ended, and how.
struct Pair {
  std::mutex mu;
  std::condition_variable cv;
  int turn = 0;
  bool done[2] = {false, false};
  std::exception_ptr error[2];
  std::array<double, 2> held{0, 0};  // seconds each side held the turn
  std::vector<PairedTurn> turns;     // each turn held, in order
  std::chrono::steady_clock::time_point since = std::chrono::steady_clock::now();  // the last hand-over

  // Under mu: the turn goes to `to`, the time since the last hand-over to the side that held it.
  void hand_to(int to) {
    const auto now = std::chrono::steady_clock::now();
    held[size_t(turn)] += std::chrono::duration<double>(now - since).count();
    const auto seconds = [](std::chrono::steady_clock::time_point t) {
      return std::chrono::duration<double>(t.time_since_epoch()).count();
    };
    turns.push_back({turn, seconds(since), seconds(now)});
    since = now;
    turn = to;
    cv.notify_all();
  }
};

thread_local Pair* t_pair = nullptr;
thread_local int t_side = 0;

// The thread the second tasks run on: started by the first run_paired of a process (a forked child
// starts its own) and kept, so that its thread-local state persists between pairs. One left holding
// a task that will never resume (its first task failed) is abandoned for a new one.
class Helper {
 public:
  static Helper& instance() {
    std::lock_guard<std::mutex> lock(create_mu());
    Helper*& h = current();
    if (!h || h->owner_ != getpid()) h = new Helper;  // never destroyed: its thread may wait on it at exit
    return *h;
  }
  static void abandon() {
    std::lock_guard<std::mutex> lock(create_mu());
    current() = nullptr;
  }
  void post(std::function<void()> job) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      jobs_.push_back(std::move(job));
    }
    cv_.notify_one();
  }

 private:
  static std::mutex& create_mu() {
    static std::mutex m;
    return m;
  }
  static Helper*& current() {
    static Helper* h = nullptr;
    return h;
  }
  Helper() : owner_(getpid()), thread_([this] { loop(); }) { thread_.detach(); }
  void loop() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return !jobs_.empty(); });
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
    }
  }
  pid_t owner_;  // a fork's child inherits the pointer, not the thread
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::thread thread_;
};

// Runs `task` as side `side` of `p`: waits for its turn, runs, and ends. The second side hands the
// turn back for good; the first does so only if it succeeded (see run_paired).
void run_side(Pair& p, int side, const std::function<void()>& task) {
  t_pair = &p;
  t_side = side;
  {
    std::unique_lock<std::mutex> lock(p.mu);
    p.cv.wait(lock, [&] { return p.turn == side; });
  }
  std::exception_ptr error;
  try {
    task();
  } catch (...) {
    error = std::current_exception();
  }
  t_pair = nullptr;
  std::lock_guard<std::mutex> lock(p.mu);
  p.done[side] = true;
  const bool failed = bool(error);
  p.error[side] = std::move(error);  // this thread keeps no reference to the exception
  if (side == 1 || !failed) p.hand_to(1 - side);
}

}  // namespace

// Failure: an exception in the first task ends the pair at once, the second left suspended for good
// where it last yielded (its peers may have failed too, and resuming it could then wait forever; a
// failed step ends the process or rewinds it, and the next pair gets a new helper thread). An
// exception in the second task ends it; the first's next yield rethrows it, so both unwind.
std::array<double, 2> run_paired(const std::function<void()>& first, const std::function<void()>& second,
                                 std::vector<PairedTurn>* turns) {
  TESSEL_CHECK(t_pair == nullptr, "run_paired: called from inside a paired task (pairs do not nest)");
  // This thread owns the pair: the helper touches nothing of it after marking its task done (under
  // the lock), and holds no reference to it, so it is never the one to free it.
  auto p = std::make_unique<Pair>();
  Pair* pair = p.get();
  Helper::instance().post([pair, second] { run_side(*pair, 1, second); });  // its own copy of the task
  run_side(*p, 0, first);
  std::unique_lock<std::mutex> lock(p->mu);
  if (p->error[0]) {
    const std::exception_ptr error = p->error[0];
    if (!p->done[1]) {
      // The second task stays suspended on the pair for good: the pair is left to it, and the next
      // pair gets a new helper.
      Helper::abandon();
      lock.unlock();
      (void)p.release();
    }
    std::rethrow_exception(error);
  }
  p->cv.wait(lock, [&] { return p->done[1]; });
  if (p->error[1]) std::rethrow_exception(p->error[1]);
  if (turns) *turns = std::move(p->turns);
  return p->held;
}

void yield_to_paired_task() {
  Pair* p = t_pair;
  if (!p) return;
  const int me = t_side;
  std::unique_lock<std::mutex> lock(p->mu);
  if (p->done[1 - me]) {
    if (p->error[1 - me]) std::rethrow_exception(p->error[1 - me]);  // the second failed (the first never yields after failing)
    return;
  }
  p->hand_to(1 - me);
  p->cv.wait(lock, [&] { return p->turn == me; });
  if (p->done[1 - me] && p->error[1 - me]) std::rethrow_exception(p->error[1 - me]);
}

}  // namespace tessel
