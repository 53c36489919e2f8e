#pragma once
// Distributed checkpoints (tessel-checkpoint-2, `checkpoint.distributed`): every rank writes what it
// owns, in parallel, with no gather of tensors:
//   step_00000100/rank_00003.safetensors  the pieces rank 3 owns and no lower rank holds: for each
//                                         parameter of its tensor- and pipeline-parallel slice, its
//                                         fp32 master values and AdamW moments over its distributed-
//                                         optimizer shard (all of the slice without one), and its
//                                         other training state (FP8 scaling, MoE expert biases), 1-D
//   step_00000100/metadata.json           as tessel-checkpoint-1's, plus "pieces": for each piece its
//                                         key, file, global shape, box (begin, shape) and flat range
//                                         within the box, its CRC-32 and, past 16 MiB, the CRC-32 of
//                                         each 16 MiB of it; and "parallel": the layout that saved it
// Replicas (data- and context-parallel copies, tensors every tensor-parallel rank holds whole,
// non-expert parameters under expert parallelism) are written once, by the lowest world rank that
// holds them. Loading under any layout reads the pieces each rank's blocks overlap
// (checkpoint_reader.h); `tessel ckpt consolidate` writes the whole-tensor form.
//
// Atomic as tessel-checkpoint-1: every rank writes into rank 0's step_N.tmp-PID, rank 0 writes
// metadata.json (with each file's size and CRC-32) only once every rank reported its file fsynced,
// then publishes. A rank that dies mid-save leaves the previous checkpoint the newest valid one.
#include <string>
#include <utility>
#include <vector>

#include "tessel/ckpt/checkpoint.h"

namespace tessel::ckpt {

// Collective over world (every rank of the job). layout: the parallel sizes, recorded in
// metadata.json for information. Returns the published directory on every rank (publish = false:
// on rank 0 the complete temporary directory, which it publishes later, "" elsewhere; see
// write_whole_checkpoint).
std::string save_distributed_checkpoint(const std::string& dir, const nn::ParamStore& params, const optim::AdamW& opt,
                                        const TrainState& state, const std::string& config_yaml, int64_t keep,
                                        comm::Communicator& world, const NamedTensors& extra_state,
                                        const std::vector<std::pair<std::string, int64_t>>& layout,
                                        bool publish = true);

// save_distributed_checkpoint's stage (StagedSave, checkpoint.h): every part collective over world;
// finish() returns the temporary directory on rank 0.
StagedSave stage_distributed_checkpoint(const std::string& dir, const nn::ParamStore& params, const optim::AdamW& opt,
                                        const TrainState& state, const std::string& config_yaml,
                                        comm::Communicator& world, const NamedTensors& extra_state,
                                        const std::vector<std::pair<std::string, int64_t>>& layout, bool copy);

// Writes the checkpoint ckpt_dir (either format) as a tessel-checkpoint-1 of whole tensors under
// out_dir (a checkpoint.dir: step_N and latest), with its step, data position, optimizer state and
// config. Returns the new step directory.
std::string consolidate_checkpoint(const std::string& ckpt_dir, const std::string& out_dir);

}  // namespace tessel::ckpt
