#pragma once
// Activations: what a module's forward saves for its backward, for one micro-batch (and one model
// chunk). Owned by the caller (the trainer or a pipeline executor), so several micro-batches can be
// in flight and recompute can drop and rebuild them. Keys are the modules' parameter prefixes.
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tessel/core/memory.h"
#include "tessel/core/tensor.h"

namespace tessel::nn {

class Activations {
 public:
  void put(const std::string& key, Tensor t) { slots_[key] = std::move(t); }
  const Tensor& get(const std::string& key) const {
    auto it = slots_.find(key);
    TESSEL_CHECK(it != slots_.end(), "activation '{}' was not saved by forward (backward before forward?)", key);
    return it->second;
  }
  bool has(const std::string& key) const { return slots_.count(key) != 0; }
  void erase(const std::string& key) { slots_.erase(key); }
  void clear() {
    slots_.clear();
    scalars_.clear();
    host_.clear();
    meta_held_.release();
  }
  // Meta runs only: bytes standing for what calls that were not run (nn/alike_calls.h) would have
  // saved here (positive) or freed from here (negative), given back with the rest of this object.
  void hold_meta_bytes(const MemoryAmount& a) { meta_held_.add(a); }
  // Host index lists a backward needs (MoE routing: token order, rows per expert), copied to the
  // host once in forward: kept on the host, not in device memory.
  void put_host(const std::string& key, std::vector<int64_t> v) { host_[key] = std::move(v); }
  const std::vector<int64_t>& host(const std::string& key) const {
    auto it = host_.find(key);
    TESSEL_CHECK(it != host_.end(), "host values '{}' were not saved by forward (backward before forward?)", key);
    return it->second;
  }
  void erase_host(const std::string& key) { host_.erase(key); }
  // Host values a backward needs (a loss scale for recompute): kept on the host, not device memory.
  void put_scalar(const std::string& key, float v) { scalars_[key] = v; }
  float take_scalar(const std::string& key) {
    auto it = scalars_.find(key);
    TESSEL_CHECK(it != scalars_.end(), "value '{}' was not saved by forward (backward before forward?)", key);
    const float v = it->second;
    scalars_.erase(it);
    return v;
  }
  size_t bytes() const {
    size_t n = 0;
    for (const auto& [k, t] : slots_) n += t.nbytes();
    return n;
  }

 private:
  std::unordered_map<std::string, Tensor> slots_;
  std::unordered_map<std::string, float> scalars_;
  std::unordered_map<std::string, std::vector<int64_t>> host_;
  MetaBytesHeld meta_held_;
};

}  // namespace tessel::nn
