#pragma once
// A hardware profile: what the planner needs to price a step's kernel calls and collectives on one
// kind of device and network. Plain JSON files (configs/hardware/, written by `tessel plan
// calibrate`), or SimuMax's system JSON read as it is (../shared/simumax/system/).
//
// Compute-bound ops (GEMMs, attention) cost FLOPs / (peak x efficiency), the efficiency looked up by
// shape in a table of measured points and interpolated between them; memory-bound ops cost
// bytes / (bandwidth x efficiency of their op class); every kernel call adds a fixed latency.
// Collectives follow a ring model per network level (collective_seconds in cost_model.h).
#include <algorithm>
#include <initializer_list>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tessel::plan {

// One measured point: the shape (named dims in a fixed order per op kind, see cost_model.h), the
// variant (for GEMMs the transposes, "NT", and "+acc"; empty where there is none) and the
// efficiency measured there.
struct ShapePoint {
  std::vector<double> dims;
  std::string variant;
  double efficiency = 0;
};

// Efficiency by shape. An exact point is returned as it is; otherwise the nearest points of the
// same variant (all points when the variant has none) are blended by inverse squared distance in
// log2 space, so a shape between measured ones gets an efficiency between theirs. No points: the
// fallback.
struct EfficiencyTable {
  double fallback = 0;
  std::vector<ShapePoint> points;
  double at(std::span<const double> dims, std::string_view variant) const;
  double at(std::initializer_list<double> dims, std::string_view variant) const {
    return at(std::span<const double>(dims.begin(), dims.size()), variant);
  }
  // Shapes already looked up (a step calls the same few shapes thousands of times; the blend over
  // every point is what a planner's search would otherwise spend its time on), found without
  // copying the key. Not thread-safe.
  struct LookedUpOrder {
    using is_transparent = void;
    using Key = std::pair<std::string_view, std::span<const double>>;
    static Key view(const std::pair<std::string, std::vector<double>>& k) { return {k.first, k.second}; }
    static const Key& view(const Key& k) { return k; }
    template <class A, class B>
    bool operator()(const A& a, const B& b) const {
      const Key x = view(a), y = view(b);
      if (x.first != y.first) return x.first < y.first;
      return std::lexicographical_compare(x.second.begin(), x.second.end(), y.second.begin(), y.second.end());
    }
  };
  mutable std::map<std::pair<std::string, std::vector<double>>, double, LookedUpOrder> looked_up = {};

 private:
  double blend(std::span<const double> dims, std::string_view variant) const;
};

struct ComputeOpProfile {
  double peak_flops = 0;  // per second
  EfficiencyTable efficiency;
};

struct MemoryOpProfile {
  double efficiency = 0;  // of the device's memory bandwidth
};

// One collective on one network level: t = fixed_latency + steps x latency + bus bytes / (bandwidth x
// efficiency), bus bytes = message x scale x (n + offset) / n, steps = scale x (n + offset) (p2p: 1).
struct CollectiveProfile {
  double bandwidth = 0;   // bytes per second
  double efficiency = 1;
  double latency_s = 0;   // per ring step
  double fixed_latency_s = 0;
  double scale = 1, offset = -1;
  // Where a group size has a fixed latency of its own (SimuMax's fixed_latency_us_by_comm_num: an
  // all-to-all over 2 B200s costs 51 us more per call than one over 8), it replaces fixed_latency_s.
  std::map<int64_t, double> fixed_latency_s_by_group_size{};
  double fixed_latency_for(int64_t group_size) const {
    const auto it = fixed_latency_s_by_group_size.find(group_size);
    return it == fixed_latency_s_by_group_size.end() ? fixed_latency_s : it->second;
  }
};

// Keys of NetworkProfile::ops; tessel's kinds map onto them (broadcast: all_gather, reduce:
// reduce_scatter, send: p2p).
inline const std::vector<std::string> kCollectiveKinds = {"all_reduce", "all_gather", "reduce_scatter", "all2all",
                                                          "p2p"};

struct NetworkProfile {
  std::map<std::string, CollectiveProfile> ops;  // every kCollectiveKinds entry
};

struct HardwareProfile {
  std::string name;
  std::string source;        // the file it was read from
  std::string device = "gpu";  // "cpu": memory is what the cpu allocator's pool holds; "gpu": as requested
  int devices_per_node = 1;
  double memory_gib = 0;     // per device; 0: not known
  int threads = 0;           // cpu: the threads per rank it was measured with (0: not a cpu profile)
  // Compute-bound op kinds: "gemm.bf16", "gemm.f32", "fp8_gemm", "attention_fwd", "attention_bwd".
  std::map<std::string, ComputeOpProfile, std::less<>> compute;  // found by string_view, as priced
  double memory_bandwidth = 0;  // bytes per second
  // Memory-bound op classes by op family (kernels::OpRecord::op), and "default" for the rest.
  std::map<std::string, MemoryOpProfile, std::less<>> memory;
  double kernel_latency_s = 0;  // added to every kernel call
  // The host's time per kernel call outside the kernel (dispatch, allocation, the modules' code
  // between kernels), added to every call: a cpu rank runs it on the cores that compute. 0 for a
  // GPU profile, whose host launches run ahead of the device.
  double host_seconds_per_kernel = 0;
  double memory_latency_s = 0;  // added to every memory-bound kernel call (SimuMax: bandwidth latency_us)
  // Collectives progress while the device computes (NCCL on its own stream: yes; MPI on cpu ranks
  // sharing the cores: no, OpenMPI progresses only inside MPI calls).
  bool async_progress = true;
  std::map<std::string, NetworkProfile> networks;  // "intra_node", "inter_node"
};

// Reads a tessel profile (format "tessel-hardware-1") or a SimuMax system JSON (recognised by its
// "accelerator" object). Throws tessel::Error naming the file and the field: a missing network
// level, an unknown op kind or collective, a value out of range.
HardwareProfile load_hardware_profile(const std::string& path);
HardwareProfile hardware_profile_from_json_text(const std::string& text, const std::string& source);
void save_hardware_profile(const HardwareProfile& p, const std::string& path);
std::string hardware_profile_to_json_text(const HardwareProfile& p);

// The names a tessel profile may use for compute-bound op kinds.
inline const std::vector<std::string> kComputeOpKinds = {"gemm.bf16", "gemm.f32", "fp8_gemm", "attention_fwd",
                                                         "attention_bwd"};

}  // namespace tessel::plan
