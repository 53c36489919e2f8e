#pragma once
// The pipeline executor: runs one rank's operations of any schedule (schedule.h, with add_p2p's
// send/recv) over the chunks of its nn::Model. Activations ([B*T, d] f32, the residual stream) go to
// the next virtual stage and their gradients come back over the pipeline group; sends are
// non-blocking and receives blocking, so any schedule the simulator accepts runs without deadlock.
// Messages are tagged by (micro-batch, receiving chunk, direction), so their order does not matter.
#include <functional>
#include <string>
#include <vector>

#include "tessel/comm/communicator.h"
#include "tessel/data/batch.h"
#include "tessel/nn/model.h"
#include "tessel/pipeline/schedule.h"
#include "tessel/pipeline/trace.h"

namespace tessel::pipeline {

// One optimizer step's forward and backward of every micro-batch. Gradients of (loss * grad_scale)
// accumulate in the model's fp32 grads; ready() reports ranges during the last micro-batch's W ops.
// local: this rank's part of each micro-batch (context parallelism's chunks: 1 of `parts` equal
// shares of its tokens), cut by the forwards that read tokens or targets; by default the whole.
// Returns this rank's summed loss (non-zero only on the rank holding the last virtual stage).
struct LocalPart {
  std::function<data::Batch(const data::Batch&)> cut;  // empty: the whole micro-batch
  int64_t parts = 1;
};
// How the executor runs: trace (optional) receives this rank's spans, one per operation, on the
// steady clock; prefetch posts each receive before the compute operation that precedes it, so the
// transfer is in flight during that computation (parallel.overlap_p2p_comm).
// fused_pairs runs each F&B pair's F and B interleaved (core/paired_tasks.h): the F once its input is
// here, the B after waiting for its own in its first turn, each MoE all-to-all of one in flight while
// the other computes, each pass sending its output as it ends; then the pair's W
// (parallel.overlap_moe_expert_parallel_comm). Real devices only: a meta run prices
// a pair as its F, B and W one after the other, and runs them so.
struct RunOptions {
  RankTrace* trace = nullptr;
  bool prefetch = false;
  bool fused_pairs = false;
};
double run_schedule(const Schedule& s, nn::Model& model, comm::Communicator& pp,
                    const std::vector<data::Batch>& micro_batches, float grad_scale,
                    const nn::Model::GradsReady& ready = nullptr, const LocalPart& local = {},
                    const RunOptions& options = {});

// Evaluation: one batch forward through every stage in order, nothing kept, the stages placed as a
// training schedule of that placement places them. Returns the summed loss on every rank of the
// pipeline group.
double forward_only_loss(nn::Model& model, comm::Communicator& pp, const data::Batch& batch,
                         Placement placement = Placement::interleaved);

// The schedule parallel.pipeline_schedule names (schedule_kinds(); 1f1b with vpp > 1 runs
// interleaved), validated, with send/recv added. vpp: the configured chunks per rank.
Schedule make_training_schedule(const std::string& kind, int pp, int vpp, int micro_batches);

}  // namespace tessel::pipeline
