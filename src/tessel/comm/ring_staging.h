#pragma once
// What the MPI backend's reductions hold while they run, shared with the meta communicator so that a
// dry run accounts the same communication memory as the real run.
//
// all_reduce, reduce_scatter and reduce_scatter_v run as a ring over point-to-point messages
// (comm/mpi_ring.h) of at most ring_chunk_bytes(): MPI's own reduction algorithms take temporaries of
// the whole message from malloc, out of sight of tessel's allocator (Open MPI's non-blocking
// all-reduce one as large as the buffer, its reduce-scatter the input and a block besides). The
// ring's staging is tensor memory in the communication category: per reduction, from its start until
// it is waited on, one or two buffers of at most one block and at most ring_chunk_bytes().
#include <cstdint>
#include <vector>

#include "tessel/core/dtype.h"

namespace tessel::comm {

// Bytes of one ring message (and of one staging buffer) at most.
int64_t ring_chunk_bytes();
// Tests lower it to reach the chunked paths with small buffers; 0 restores the default.
void set_ring_chunk_bytes_for_testing(int64_t bytes);

// A ring reduction's blocks, one per rank, as ranks + 1 boundaries (block r is [b[r], b[r + 1])):
// an all-reduce of `count` elements cuts [r * count / ranks, (r + 1) * count / ranks); a
// reduce-scatter of `each` elements per rank cuts [r * each, (r + 1) * each); an uneven one (_v)
// takes its counts in rank order.
std::vector<int64_t> ring_block_bounds(int64_t count, int ranks);
std::vector<int64_t> ring_equal_block_bounds(int64_t each, int ranks);
std::vector<int64_t> ring_counted_block_bounds(const std::vector<int64_t>& counts);
int64_t ring_largest_block(const std::vector<int64_t>& bounds);

// The staging buffers a ring reduction over `ranks` ranks holds while in flight, each of
// ring_staging_elements() elements of the reduced dtype (fp32 for bf16): a receive buffer, and,
// reducing out of place on more than two ranks, one for the partial sums it passes on.
int ring_staging_buffers(int ranks, bool in_place);
int64_t ring_staging_elements(int64_t largest_block, DType reduced);

}  // namespace tessel::comm
