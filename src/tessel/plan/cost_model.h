#pragma once
// Prices one kernel call or one collective on a hardware profile.
//   gemm, fp8_gemm: FLOPs / (peak x efficiency(M, N, K, variant)), the peak of gemm.<input dtype>.
//   attention_fwd/bwd (and the ring attention of context parallelism): FLOPs / (peak x
//     efficiency(batch, sequence, heads, kv heads, qk head dim, v head dim)).
//   every other op: (bytes read + written) / (memory bandwidth x its class's efficiency).
//   each call adds the profile's kernel latency.
// Collectives: the ring model of CollectiveProfile on the network level the group spans.
#include <string>
#include <string_view>

#include "tessel/comm/comm_log.h"
#include "tessel/comm/parallel_state.h"
#include "tessel/kernels/op_log.h"
#include "tessel/plan/hardware_profile.h"

namespace tessel::plan {

// Whether an op family is priced by a compute entry (GEMMs, attention) rather than by memory
// bandwidth: a memory efficiency for it would never be read.
bool priced_by_compute(std::string_view op);

// The compute-bound kind of an op record ("gemm.bf16", "attention_fwd", ...), or "" for a
// memory-bound op. Throws for a GEMM whose dtype the profile does not price.
std::string_view compute_kind(const kernels::OpRecord& r);

// The shape an efficiency table is keyed by, for a compute-bound record (see hardware_profile.h).
std::vector<double> efficiency_dims(const kernels::OpRecord& r);

double op_seconds(const HardwareProfile& hw, const kernels::OpRecord& r);

// The network level ("intra_node" or "inter_node") a group of the layout spans: a group whose ranks
// lie within one node of hw.devices_per_node consecutive ranks is intra-node. Throws when the level
// is missing from the profile, naming the group.
std::string network_level(const HardwareProfile& hw, const std::string& group, const comm::ParallelSizes& s, int dp);

// One collective's time on `level`; group_size 1 costs nothing.
double collective_seconds(const HardwareProfile& hw, const std::string& level, const comm::CommRecord& r);

}  // namespace tessel::plan
