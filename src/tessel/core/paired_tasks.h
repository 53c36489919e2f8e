#pragma once
// Two tasks run as coroutines on two threads, one thread at a time: control passes from one task to
// the other only where the running task calls yield_to_paired_task() (after it has started a
// non-blocking transfer) and where it ends. An F&B pair of DualPipe runs this way
// (parallel.overlap_moe_expert_parallel_comm): one micro-batch's forward computes while the other's
// backward has its MoE all-to-all in flight, and the other way round (DeepSeek-V3 report, section
// 3.2.1).
//
// Invariants:
//  - exactly one of the two threads runs at any time, and each hand-over goes through a mutex, so the
//    tasks need no more thread safety than one thread would (MPI runs at MPI_THREAD_SERIALIZED);
//  - where control passes is fixed by the yield points alone, so every rank of a group makes its
//    collectives in the same order;
//  - the first task starts; the second runs first at the first task's first yield (or its end).
// The second task runs on a helper thread kept for the process (its OpenMP team is reused); a
// thread-local setting of the caller that the second task needs, the task sets itself.
// Failure, without waiting on peers that may be gone: an exception in the first task is rethrown by
// run_paired at once, the second task left suspended for good where it last yielded (the next pair
// gets a new helper thread); an exception in the second task ends it, and the first task's next
// yield (or run_paired, once the first has ended) rethrows it.
#include <array>
#include <functional>
#include <vector>

namespace tessel {

// One stretch of time a task held the turn: task 0 (first) or 1 (second), on the steady clock in
// seconds (core/transfer_spans.h: steady_seconds).
struct PairedTurn {
  int task;
  double start, end;
};

// Returns the seconds each task held the turn (their sum is the call's wall time, less the hand-overs);
// `turns`, where given, receives each turn in the order they were held.
std::array<double, 2> run_paired(const std::function<void()>& first, const std::function<void()>& second,
                                 std::vector<PairedTurn>* turns = nullptr);

// In a task of run_paired: lets the other task run until it yields or ends, then returns. Elsewhere,
// or once the other task has ended: returns at once.
void yield_to_paired_task();

}  // namespace tessel
