#pragma once
// A meta run's shortcut for calls alike: m consecutive calls that run the same kernels and
// collectives on the same shapes in the same phase, and allocate and free the same (a MoE block's
// experts with equal row counts: their forwards, input gradients, weight gradients).
//
// On the meta device nothing is computed, so with the shortcut on (AlikeCallsOnceScope; the planner
// turns it on) calls 0, 1 and m - 1 run and calls 2 .. m - 2 are accounted as call 1 was:
//   - its kernel and collective records once more, standing for m - 3 calls each
//     (kernels::OpRecord::count, comm::CommRecord::count), and its groups' statistics m - 3 times;
//   - what it left allocated, m - 3 times: what it cached in its module across calls (an FP8
//     weight) held for the module's life, the rest (what it saved for backward, or freed of it)
//     held by its Activations, with which it is given back.
// Call 0 runs because first uses differ (a workspace grown once); call m - 1 runs after the others
// are accounted, so its own peak sits on all of theirs. The records priced and the peak are those of
// running every call: each call rises the same above the bytes in use when it starts, and those
// change by the same amount from call to call, so the highest point is in the first or the last
// (test plan.Estimate.FewMicroBatchesAndSharedStagesEqualTheFullMeasurement compares both).
#include <cstdint>
#include <functional>
#include <vector>

#include "tessel/comm/communicator.h"
#include "tessel/core/memory.h"
#include "tessel/nn/activations.h"

namespace tessel::nn {

// Turns the shortcut on (or off) for this thread while it lives; off by default.
class AlikeCallsOnceScope {
 public:
  explicit AlikeCallsOnceScope(bool on);
  ~AlikeCallsOnceScope();
  AlikeCallsOnceScope(const AlikeCallsOnceScope&) = delete;
  AlikeCallsOnceScope& operator=(const AlikeCallsOnceScope&) = delete;

 private:
  bool previous_;
};

struct AlikeCalls {
  // What the calls save for backward (or free from it), and what their modules hold across calls
  // (cached_bytes(i): call i's module's); null where the calls keep nothing (an error if they do).
  Activations* saved = nullptr;
  MetaBytesHeld* module_held = nullptr;
  std::function<MemoryAmount(int64_t)> cached_bytes;
  std::vector<comm::Communicator*> groups;  // every communicator the calls use (null: none)
};

// call(i) for i in [first, first + m), in order; on meta with the shortcut on and m >= 4, calls
// first, first + 1 and first + m - 1 (above). A call first + 1 that used a collective outside
// `groups`, or kept memory with no owner named for it, is an error.
void run_alike_calls(int64_t first, int64_t m, bool meta, const AlikeCalls& how,
                     const std::function<void(int64_t)>& call);

// call(i) for each i with sizes[i] > 0, in order, each row of equal sizes as calls alike.
void for_each_sized(const std::vector<int64_t>& sizes, bool meta, const AlikeCalls& how,
                    const std::function<void(int64_t)>& call);

}  // namespace tessel::nn
