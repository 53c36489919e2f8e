#pragma once
// Checkpoints: one directory per saved step under checkpoint.dir. This file: tessel-checkpoint-1,
// whole tensors written by one rank (distributed_checkpoint.h: every rank writes its pieces;
// checkpoint_reader.h reads both, under any layout):
//   step_00000100/model.safetensors      parameters (fp32 masters) by name
//   step_00000100/optimizer.safetensors  AdamW moments: exp_avg.<name>, exp_avg_sq.<name>
//   step_00000100/metadata.json          format, step, consumed samples, optimizer steps, seed, the
//                                        learning-rate factor of rewinds so far (lr_scale), the
//                                        resolved config, per-file CRC-32 and size, and per tensor its
//                                        global shape and the slice this file holds (for resharding)
//   latest                               the name of the newest complete checkpoint
// A save is atomic: written into a temporary directory, fsynced, renamed; `latest` is replaced last.
// Loading verifies every file's size and CRC-32; a damaged checkpoint is reported by name and the
// previous valid one is used.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tessel/ckpt/checkpoint_metadata.h"
#include "tessel/comm/communicator.h"
#include "tessel/nn/params.h"
#include "tessel/optim/adamw.h"

namespace tessel::ckpt {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

struct TrainState {
  int64_t step = 0;              // optimizer steps completed
  int64_t consumed_samples = 0;  // data position
  uint64_t seed = 0;
  uint32_t metadata_crc = 0;     // set on load: CRC-32 of the metadata.json it came from
  double lr_scale = 1.0;         // the learning-rate factor of resilience rewinds (rewind_lr_scale) so far
  ResilienceHistory resilience{};  // the detectors' windows and the rewinds counted (checkpoint_metadata.h)
  int64_t bytes_read = 0;          // set on load: bytes of tensor data this rank read from the files
};

// An intact checkpoint saved from another model (tensor names, count or shapes): a configuration
// error, so loading never falls back past it. Every other error of a checkpoint counts as damage.
class ModelMismatch : public Error {
 public:
  using Error::Error;
};

// The optimizer's state laid out like the whole flat parameter buffer (a distributed optimizer
// gathers its shards into this form first, so checkpoints do not depend on the layout): the AdamW
// moments, and the fp32 masters when the parameter store holds only its shard of them.
struct FullOptimizerState {
  const float* exp_avg;
  const float* exp_avg_sq;
  int64_t optimizer_steps;
  const float* masters = nullptr;  // null: the store's own (whole) masters
};

// A save in three parts, so that a background thread can write the files (checkpoint.async_save):
//   stage   the collective part, done when the save is made: gathers, and with copy = true a copy of
//           every tensor to write, owned by the staged save, so training may change its buffers;
//   write   the file writes, fsynced: no communication, on any thread, once;
//   finish  collective, after write on every rank: what follows (the distributed format's metadata);
//           returns the complete temporary directory on the rank that publishes it, "" elsewhere.
// Publication (publish_checkpoint, checkpoint_files.h) is the caller's. A synchronous save runs the
// three in a row and publishes.
struct StagedSave {
  std::function<void()> write;
  std::function<std::string()> finish;
};

// Saves and prunes to the newest `keep` checkpoints. Returns the checkpoint's directory.
// Tensor-parallel shards are gathered over `tp` into whole tensors first, and pipeline stages' tensors
// over `pp` onto its rank 0 (collective: every rank of each group calls it), so a checkpoint loads
// under any layout; only ranks with write = true (a pp rank 0) write. extra_state: named tensors of
// other training state (FP8 scaling), the same on every rank of a stage, gathered over pp like the
// parameters and written to state.safetensors. ep: expert-parallel ranks' experts are gathered onto
// the group's rank 0 before the stages are (collective over ep).
std::string save_checkpoint(const std::string& dir, const nn::ParamStore& params, const FullOptimizerState& moments,
                            const TrainState& state, const std::string& config_yaml, int64_t keep,
                            comm::Communicator* tp = nullptr, bool write = true, comm::Communicator* pp = nullptr,
                            const NamedTensors& extra_state = {}, comm::Communicator* ep = nullptr, bool publish = true);
// save_checkpoint's stage (see StagedSave); only ranks with write = true write.
StagedSave stage_checkpoint(const std::string& dir, const nn::ParamStore& params, const FullOptimizerState& moments,
                            const TrainState& state, const std::string& config_yaml, int64_t keep,
                            comm::Communicator* tp, bool write, comm::Communicator* pp, const NamedTensors& extra_state,
                            comm::Communicator* ep, bool copy);
// Writes whole tensors (model: parameters by name; optim: exp_avg.<name>, exp_avg_sq.<name>; extra:
// other training state) as a tessel-checkpoint-1 under dir and publishes it; one writer.
// publish = false (here and in the savers above and in distributed_checkpoint.h): the complete,
// fsynced checkpoint stays in its temporary directory, which is returned, until the caller publishes
// it (publish_checkpoint, checkpoint_files.h) or removes it: resilience publishes a checkpoint only
// once the step after it passed the detectors.
std::string write_whole_checkpoint(const std::string& dir, const NamedTensors& model, const NamedTensors& optim,
                                   const NamedTensors& extra, const TrainState& state, int64_t optimizer_steps,
                                   const std::string& config_yaml, int64_t keep, bool publish = true);
// The same for an optimizer that owns every parameter.
std::string save_checkpoint(const std::string& dir, const nn::ParamStore& params, const optim::AdamW& opt,
                            const TrainState& state, const std::string& config_yaml, int64_t keep);

// Loads the newest valid checkpoint in dir into params/opt. Returns nullopt when dir holds none.
// Damaged checkpoints are passed to warn() and skipped; if every checkpoint is damaged, throws.
// A checkpoint of another model (names or shapes) throws ModelMismatch, naming the tensor. Damage is
// any other failure: a file missing, truncated or failing its CRC, metadata.json unreadable or with
// a missing or ill-typed key, tensors that disagree with metadata.json.
// partial: params hold one pipeline stage, so the checkpoint may hold more tensors than they do.
// world (collective when given): the ranks try the candidates together, so damage that only some
// ranks read (one rank's file of a distributed checkpoint) makes all of them fall back alike, and a
// mismatch any rank finds stops all of them.
std::optional<TrainState> load_latest_checkpoint(const std::string& dir, nn::ParamStore& params, optim::AdamW* opt,
                                                 const std::function<void(const std::string&)>& warn,
                                                 bool partial = false, NamedTensors* extra_state = nullptr,
                                                 comm::Communicator* world = nullptr);

// Loads one checkpoint directory (no fallback). A tensor-parallel shard takes its slice of the saved
// whole tensor. opt receives the moments of the range it owns.
// extra_state (optional) receives state.safetensors' tensors (empty when the checkpoint has none).
TrainState load_checkpoint(const std::string& ckpt_dir, nn::ParamStore& params, optim::AdamW* opt,
                           bool partial = false, NamedTensors* extra_state = nullptr);

// Every rank of `world` checks that all ranks loaded the same checkpoint (the same step and the same
// metadata.json, or none at all); collective. Throws on every rank alike, naming both ends, if not.
void check_ranks_loaded_same(comm::Communicator& world, const std::string& dir, const std::optional<TrainState>& st);

// What the ranks loaded, reduced over them: step -1 and CRC -1 stand for "no checkpoint".
struct LoadedRange {
  int64_t min_step, max_step, min_crc, max_crc;
};
// The verdict of check_ranks_loaded_same: throws naming dir and the steps when the ranks differ.
void check_loaded_range(const std::string& dir, const LoadedRange& r);

// Step directories present in dir, newest first.
std::vector<std::string> list_checkpoints(const std::string& dir);
// The order to try them in when loading: the one `latest` names first, then the rest newest first.
std::vector<std::string> checkpoint_candidates(const std::string& dir);

}  // namespace tessel::ckpt
