#pragma once
// A checkpoint's metadata.json, read and validated in one place: every key that loading uses is
// present with its type and range, and every tensor's element count fits in 64 bits. Any failure
// throws a tessel::Error naming the checkpoint and the key, so the checkpoint counts as damaged and
// the loader falls back to the previous one (as for a CRC failure).
#include <cstdint>
#include <map>
#include <string>

#include <vector>

#include <nlohmann/json.hpp>

#include "tessel/ckpt/block_range.h"
#include "tessel/core/tensor.h"

namespace tessel::ckpt {

// What the resilience detectors had learned when a checkpoint was saved, so that a restart goes on
// with it (docs/resilience.md): the spike windows (the losses and gradient norms of the last accepted
// steps, oldest first) and the steps of the rewinds that count against resilience.max_rewinds.
// metadata.json key "resilience", optional (empty when absent: checkpoints written before it).
struct ResilienceHistory {
  std::vector<double> loss_window, grad_norm_window;
  std::vector<int64_t> rewind_steps;
};
nlohmann::json resilience_history_json(const ResilienceHistory& h);

struct CheckpointMetadata {
  struct File {
    uint32_t crc32 = 0;
    int64_t bytes = 0;
  };
  std::string format;
  int64_t step = 0;
  int64_t consumed_samples = 0;
  double lr_scale = 1.0;  // "lr_scale", optional (1 when absent: checkpoints written before it)
  ResilienceHistory resilience;  // "resilience", optional
  int64_t optimizer_steps = 0;
  uint64_t seed = 0;
  std::map<std::string, File> files;           // by file name
  std::map<std::string, Shape> global_shapes;  // model tensors by name
  // tessel-checkpoint-2 (distributed): what each rank's file holds. key: a parameter's name,
  // "exp_avg.<name>", "exp_avg_sq.<name>" (values of that range, f32) or "state.<name>" (a whole
  // tensor of other training state); the file's tensor of that name holds the range's elements, 1-D.
  struct Piece {
    std::string key, file;
    Shape global_shape;
    BlockRange range;
    uint32_t crc32 = 0;  // of the piece's bytes: a rank verifies what it reads, not whole files
    // "crc32_blocks" (optional; written for f32 pieces larger than one block): the CRC-32 of each run
    // of block_bytes bytes of the piece (the last may be shorter), so a rank that needs part of a
    // piece reads and verifies only the blocks holding that part. Empty: the piece is read whole.
    int64_t block_bytes = 0;
    std::vector<uint32_t> block_crc32;
  };
  std::vector<Piece> pieces;
  std::string config;                          // the resolved config (YAML text)
  uint32_t crc32 = 0;                          // of metadata.json itself: ranks compare it
};

// Reads ckpt_dir/metadata.json. Throws naming the checkpoint and the missing or ill-typed key.
CheckpointMetadata read_checkpoint_metadata(const std::string& ckpt_dir);

// The same from metadata.json's text (where: the name used in messages).
CheckpointMetadata parse_checkpoint_metadata(const std::string& text, const std::string& where);

}  // namespace tessel::ckpt
