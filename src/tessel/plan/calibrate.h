#pragma once
// `tessel plan calibrate`: this machine measured into a hardware profile, on a grid fixed here in
// advance (so a plan of any other model interpolates, it does not look its shapes up):
//   - GEMMs: every (M, N, K) of {128, 512, 2048}^3, bf16, f32 and FP8 (e4m3, per-tensor scales),
//     each variant tessel's layers call (forward "NT", input gradient "NN", weight gradient
//     "TN+acc"); the median of `repeats` runs, each after the caches were evicted (a training
//     step's GEMMs read their operands from memory); per kind the peak is the fastest point, each
//     point's efficiency its share of it;
//   - memory bandwidth (a large f32 add) and the kernel latency (the same add on 16 elements);
//   - every other op family and attention: timed inside real training steps of five fixed
//     calibration models (dense, MoE, latent attention, dense with FP8 delayed and block scaling;
//     kernels/op_log.h timing; each distinct call the median of its calls after the first step),
//     each family's efficiency fitted as its bytes (attention: FLOPs) over its time less the latency;
//   - collectives, when run under mpirun with 2 or more ranks: each kind over message sizes from
//     4 KiB to 16 MiB, a line (fixed latency + bus bytes / bandwidth) per kind, least squares in
//     relative error.
// Every rank measures at once and in step (a 2-rank profile is measured as 2 ranks share the
// machine in a training step, and its figures are the slowest rank's); rank 0 writes the file.
// Each figure is a typical run's (a median), not the fastest: a plan predicts a typical step (what
// `tessel bench` reports is the median step), and on a shared machine the fastest of a few runs is
// a moment of it that a step's hundreds of kernels do not all meet (docs/planner.md).
#include <functional>
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

// Runs `run` once (a warm-up: primitive creation, first touch), then `repeats` times, each after
// `before` (not timed); the median run counts (the upper one of an even count). Every rank of
// `world` calls it at once: a barrier starts each run on all ranks together and a run takes its
// slowest rank's time, the same on every rank. A step whose ranks meet in collectives (tensor,
// context, expert, data parallel) goes at the pace of the slowest rank at each meeting; on a 2-vCPU
// VM the slower is often 5-20% behind (two copies of one single-thread run at once: 353 and 432 ms
// a step), so each rank's own time priced those layouts 4-7% lower still (docs/planner.md).
double typical_seconds_in_step(comm::Communicator& world, int repeats, const std::function<void()>& run,
                               const std::function<void()>& before = {});

// The figures that calibration's training steps measure (every memory-bound family's efficiency,
// attention's, the host's time per kernel call), replaced on every rank by the slowest rank's:
// each efficiency the least of the ranks', the host time the greatest. The ranks must hold the
// same families and attention points in the same order (they ran the same calibration models);
// where they do not, every rank throws the same error.
void keep_slowest_rank(comm::Communicator& world, HardwareProfile& p);

}  // namespace tessel::plan
