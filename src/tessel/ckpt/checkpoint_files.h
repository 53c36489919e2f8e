#pragma once
// The file operations every checkpoint writer shares: durable writes (fsync), CRC-32s, and the
// publication of a finished checkpoint directory. A checkpoint is written into
// DIR/step_N.tmp-PID, then published: any previous step_N is moved aside, the new one renamed in,
// `latest` replaced by rename, and the checkpoints beyond the newest `keep` removed. A crash at any
// point leaves either the previous state or the new one; remove_stale_saves (checkpoint_dir.h)
// clears what an interrupted save left behind.
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace tessel::ckpt {

inline constexpr const char* kFormatWhole = "tessel-checkpoint-1";        // whole tensors, written by one rank
inline constexpr const char* kFormatDistributed = "tessel-checkpoint-2";  // every rank writes its pieces

std::string step_name(int64_t step);  // step_00000100
// DIR/step_N.tmp-PID: where a save of step N by process PID is assembled.
std::filesystem::path temporary_step_dir(const std::string& dir, int64_t step, int64_t pid);

void fsync_path(const std::filesystem::path& p, bool directory);
std::pair<uint32_t, int64_t> file_crc(const std::filesystem::path& p);  // CRC-32 (zlib) and size
uint32_t bytes_crc32(const void* data, size_t n);                        // CRC-32 (zlib) of a buffer
uint32_t crc32_update(uint32_t crc, const void* data, size_t n);         // the CRC-32 of what came before, then data
// The CRC-32 of a buffer and, when it is longer than block_bytes, of each run of block_bytes bytes
// (the last may be shorter; empty otherwise), in one pass: the whole from the blocks'
// (zlib's crc32_combine).
struct BlockCrcs {
  uint32_t whole = 0;
  std::vector<uint32_t> blocks;
};
BlockCrcs block_crc32s(const void* data, size_t n, size_t block_bytes);
// The CRC-32 of n bytes from the CRC-32s of their runs of block_bytes (the last may be shorter).
uint32_t combine_block_crc32s(const std::vector<uint32_t>& blocks, int64_t n, int64_t block_bytes);
void write_text_file(const std::filesystem::path& p, const std::string& text);  // fsynced
std::string read_text_file(const std::filesystem::path& p);

// Publishes the complete, fsynced directory tmp as DIR/step_N and prunes to the newest `keep`.
// Returns the published directory.
std::string publish_checkpoint(const std::string& dir, int64_t step, const std::filesystem::path& tmp, int64_t keep);

}  // namespace tessel::ckpt
