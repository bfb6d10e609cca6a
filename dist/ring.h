// stoke's own ring allreduce, built on send/recv of any Communicator (docs/design.md, "The ring";
// docs/allreduce.md for how it runs, with pictures).
//
// The tensor is split into N chunks (N ranks; lengths differ by at most one, so any length works:
// 0, 1, not divisible by N). Reduce-scatter: for N-1 steps each rank sends one chunk to the next
// rank and adds the chunk it receives from the previous one into its copy; afterwards rank r holds
// chunk r reduced over all ranks. Allgather: N-1 more steps pass the finished chunks around. Each
// chunk travels in segments (CollectiveOptions::segment_bytes), pipelined: segment k+1 is posted
// (isend/irecv, into the other half of a double buffer) before segment k is reduced, so a rank
// reduces one segment while the next is on the wire (CollectiveOptions::pipelined = false: one
// blocking sendrecv per segment, the textbook form). Every rank sends and receives 2(N-1)/N of
// the tensor, whatever N: bus bandwidth = algorithm bandwidth x 2(N-1)/N. Cost in the alpha-beta
// model: 2(N-1) alpha + 2(N-1)/N n beta + (N-1)/N n gamma (gamma: reduce time per byte).
//
// Precision: f32 and f64 add in their own type. f16 and bf16 are loaded as f32, added, and rounded
// back to the storage type once per reduce step (N-1 roundings per element), as NCCL does. avg sums
// and divides once, on the rank that owns the chunk, before the allgather; max is exact. The
// allgather copies bytes, so every rank ends with bit-identical results.
//
// Requirement on the communicator: messages from one rank to another with the same tag arrive in
// order. Blocking sends need not be buffered: a step's send and receive are posted together
// (isend/irecv), or are one Communicator::sendrecv, which never deadlocks in a ring.
#pragma once

#include <cstdint>
#include <ostream>

#include "dist/collective_options.h"
#include "dist/communicator.h"

namespace stoke::dist {

// In place, on every rank; sum, avg or max; f32, f64, f16, bf16.
void ring_allreduce(Communicator& comm, Tensor& t, ReduceOp op = ReduceOp::sum,
                    const RingOptions& options = {});
// input has size() * output.numel() elements; rank r gets block r reduced over all ranks.
void ring_reduce_scatter(Communicator& comm, const Tensor& input, Tensor& output,
                         ReduceOp op = ReduceOp::sum, const RingOptions& options = {});
// output has size() * input.numel() elements; block r is rank r's input. Any dtype.
void ring_allgather(Communicator& comm, const Tensor& input, Tensor& output,
                    const RingOptions& options = {});

// Chunk c of a tensor of numel elements over `ranks` ranks: [begin, end). The first
// numel % ranks chunks have one element more.
struct RingChunk {
  int64_t begin = 0, end = 0;
};
RingChunk ring_chunk(int64_t numel, int ranks, int chunk);

}  // namespace stoke::dist
