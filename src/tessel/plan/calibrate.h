#pragma once
// `tessel plan calibrate`: this machine measured into a hardware profile, on a grid fixed here in
// advance (so a plan of any other model interpolates, it does not look its shapes up):
//   - GEMMs: every (M, N, K) of {128, 512, 2048}^3, bf16, f32 and FP8 (e4m3, per-tensor scales),
//     each variant tessel's layers call (forward "NT", input gradient "NN", weight gradient
//     "TN+acc"); the best of `repeats` runs, each after the caches were evicted (a training step's
//     GEMMs read their operands from memory); per kind the peak is the best of them all, each
//     point's efficiency its share of it;
//   - memory bandwidth (a large f32 add) and the kernel latency (the same add on 16 elements);
//   - every other op family and attention: timed inside real training steps of five fixed
//     calibration models (dense, MoE, latent attention, dense with FP8 delayed and block scaling;
//     kernels/op_log.h timing), each family's
//     efficiency fitted as its bytes (attention: FLOPs) over its time less the latency;
//   - collectives, when run under mpirun with 2 or more ranks: each kind over message sizes from
//     4 KiB to 16 MiB, a line (fixed latency + bus bytes / bandwidth) per kind, least squares in
//     relative error.
// Every rank measures at once (a 2-rank profile is measured as 2 ranks share the machine); rank 0
// writes the file.
#include <string>

#include "tessel/comm/communicator.h"
#include "tessel/plan/hardware_profile.h"

namespace tessel::plan {

struct CalibrateOptions {
  std::string out;
  std::string name;  // default: "<cpu model>, N threads per rank, W ranks"
  int repeats = 3;
};

HardwareProfile calibrate_machine(comm::Communicator& world, const CalibrateOptions& o);

}  // namespace tessel::plan
