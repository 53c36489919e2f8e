#include "tessel/nn/alike_calls.h"

#include <map>
#include <string>

#include "tessel/comm/comm_log.h"
#include "tessel/core/check.h"
#include "tessel/kernels/op_log.h"

namespace tessel::nn {
namespace {
thread_local bool t_once = false;
}  // namespace

AlikeCallsOnceScope::AlikeCallsOnceScope(bool on) : previous_(t_once) { t_once = on; }
AlikeCallsOnceScope::~AlikeCallsOnceScope() { t_once = previous_; }

void run_alike_calls(int64_t first, int64_t m, bool meta, const AlikeCalls& how,
                     const std::function<void(int64_t)>& call) {
  if (!meta || !t_once || m < 4) {
    for (int64_t i = first; i < first + m; ++i) call(i);
    return;
  }
  call(first);
  Allocator& a = allocator(Device::meta);
  kernels::OpLog& ops = kernels::op_log();
  comm::CommLog& comms = comm::comm_log();
  const size_t ops_before = ops.size(), comms_before = comms.size();
  std::vector<std::map<std::string, comm::CommStats>> stats_before;
  for (const comm::Communicator* g : how.groups) stats_before.push_back(g ? g->stats() : std::map<std::string, comm::CommStats>{});
  const MemoryStats memory_before = a.stats();
  const MemoryAmount cached_before = how.cached_bytes ? how.cached_bytes(first + 1) : MemoryAmount{};
  call(first + 1);
  const MemoryAmount left = MemoryAmount::between(memory_before, a.stats());
  const MemoryAmount cached = how.cached_bytes ? how.cached_bytes(first + 1) - cached_before : MemoryAmount{};
  // Every collective call 1 logged belongs to a group whose statistics are repeated.
  int64_t counted = 0;
  for (size_t i = 0; i < how.groups.size(); ++i)
    if (how.groups[i])
      for (const auto& [kind, st] : how.groups[i]->stats()) {
        const auto b = stats_before[i].find(kind);
        counted += st.calls - (b == stats_before[i].end() ? 0 : b->second.calls);
      }
  TESSEL_CHECK(!comms.enabled() || int64_t(comms.size() - comms_before) == counted,
               "alike calls: call 1 made {} collectives, {} of them on the groups named", comms.size() - comms_before,
               counted);
  const MemoryAmount kept = left - cached;
  for (size_t c = 0; c < size_t(kMemoryCategories); ++c)
    TESSEL_CHECK((how.saved || kept.blocks[c] == 0) && (how.module_held || cached.blocks[c] == 0),
                 "alike calls: call 1 kept {} bytes of {} with no owner for the calls not run", kept.blocks[c],
                 memory_category_name(MemoryCategory(c)));
  const int64_t rest = m - 3;
  ops.repeat(ops_before, ops.size(), rest);
  comms.repeat(comms_before, comms.size(), rest);
  for (size_t i = 0; i < how.groups.size(); ++i)
    if (how.groups[i]) how.groups[i]->repeat_stats_since(stats_before[i], rest);
  if (how.saved) how.saved->hold_meta_bytes(kept.times(rest));
  if (how.module_held) how.module_held->add(cached.times(rest));
  call(first + m - 1);
}

void for_each_sized(const std::vector<int64_t>& sizes, bool meta, const AlikeCalls& how,
                    const std::function<void(int64_t)>& call) {
  for (size_t i = 0; i < sizes.size();) {
    size_t end = i + 1;
    while (end < sizes.size() && sizes[end] == sizes[i]) ++end;
    if (sizes[i] > 0) run_alike_calls(int64_t(i), int64_t(end - i), meta, how, call);
    i = end;
  }
}

}  // namespace tessel::nn
