#pragma once
// Counter-based RNG: Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11).
// A value is a pure function of (seed, stream, index), so any shard of a tensor can draw exactly the
// values the unsharded tensor would hold at the same global indices.
#include <array>
#include <cstdint>
#include <string_view>

namespace tessel {

using Philox4 = std::array<uint32_t, 4>;

Philox4 philox4x32_10(Philox4 counter, std::array<uint32_t, 2> key);

// 64-bit FNV-1a: the stream id of a named tensor.
uint64_t stream_id(std::string_view name);

// Uniform in (0, 1) and standard normal for element `index` of stream `stream`.
float philox_uniform(uint64_t seed, uint64_t stream, uint64_t index);
float philox_normal(uint64_t seed, uint64_t stream, uint64_t index);

// Fills out[r - row_begin][c - col_begin] for a [rows, cols] slice at (row_begin, col_begin) of a
// tensor whose global row length is global_cols, with mean + std * N(0,1) drawn at the global
// row-major index r * global_cols + c.
void fill_normal_slice(uint64_t seed, uint64_t stream, int64_t global_cols, int64_t row_begin, int64_t rows,
                       int64_t col_begin, int64_t cols, float mean, float std, float* out);

}  // namespace tessel
