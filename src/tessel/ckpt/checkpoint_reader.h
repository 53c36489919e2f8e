#pragma once
// Reads any block of any saved tensor of one checkpoint directory, whatever layout saved it: the
// whole tensors of tessel-checkpoint-1 (one writer) or the pieces of tessel-checkpoint-2, which
// every rank wrote for what it owned (its tensor- and pipeline-parallel slice, its distributed
// optimizer shard). A rank under another layout asks for its own slice and shard, and the reader
// assembles them from whichever pieces overlap (resharding), opening only the files it needs.
//
// Keys: a parameter's name (its fp32 master values), "exp_avg.<name>" and "exp_avg_sq.<name>"
// (AdamW moments, laid out like the parameter), and "state.<name>" (other training state: FP8
// scaling, MoE expert biases; always whole).
//
// Every failure is a tessel::Error naming the checkpoint (damage: the loader falls back to the
// previous checkpoint). Every file's size is checked against metadata.json up front; tessel-
// checkpoint-1 verifies a file's CRC-32 when it is first opened, tessel-checkpoint-2 each piece's
// when it is read, so a rank reads only the pieces it needs. Of a piece saved with per-block CRC-32s
// ("crc32_blocks") a rank needing part of it reads and verifies only the blocks holding that part;
// other pieces are read whole.
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessel/ckpt/block_range.h"
#include "tessel/ckpt/checkpoint_metadata.h"
#include "tessel/ckpt/safetensors.h"

namespace tessel::ckpt {

class CheckpointReader {
 public:
  explicit CheckpointReader(std::string ckpt_dir);  // reads and checks metadata.json (format 1 or 2)
  const CheckpointMetadata& metadata() const { return md_; }
  const std::string& dir() const { return dir_; }
  bool distributed() const;  // tessel-checkpoint-2

  bool has(const std::string& key) const { return keys_.count(key) != 0; }
  const Shape& global_shape(const std::string& key) const;  // throws (damage) when absent
  // Elements [want.flat_begin, want.flat_end) of the box `want` of f32 tensor `key` into dst. Throws
  // (damage) when the saved pieces do not hold every one of them.
  void read(const std::string& key, const BlockRange& want, float* dst);
  Tensor read_whole(const std::string& key);  // the whole tensor: f32, or a state tensor's own dtype
  // The "state.<name>" tensors, by name without the prefix (empty when the checkpoint has none).
  std::vector<std::pair<std::string, Tensor>> state();
  // Bytes of tensor data read from the files so far (each piece's bytes, or the blocks read of it).
  int64_t bytes_read() const { return bytes_read_; }

 private:
  struct Piece {
    std::string file, tensor;  // the file, and the name of the piece's tensor in it
    BlockRange range;
    std::optional<uint32_t> crc32;  // of the piece's bytes (tessel-checkpoint-2; format 1 checks whole files)
    int64_t block_bytes = 0;        // with block_crc32: the piece can be read in part (f32 pieces only)
    std::vector<uint32_t> block_crc32;
  };
  struct Saved {
    Shape global_shape;
    std::vector<Piece> pieces;
  };
  SafetensorsReader& open(const std::string& file);  // verifies the file on first use
  const SafetensorsEntry& piece_entry(const std::string& key, const Piece& p, bool f32);  // checked against p
  Tensor read_piece(const std::string& key, const Piece& p, bool f32);
  // The blocks of an f32 piece holding its elements [first, last) (from its flat_begin), verified;
  // *held is the part of the piece they hold.
  Tensor read_piece_blocks(const std::string& key, const Piece& p, int64_t first, int64_t last, BlockRange* held);
  void index_whole_format();
  void index_distributed_format();

  std::string dir_;
  CheckpointMetadata md_;
  std::map<std::string, Saved> keys_;
  std::map<std::string, std::unique_ptr<SafetensorsReader>> open_;
  int64_t bytes_read_ = 0;
};

}  // namespace tessel::ckpt
