// Recursive halving-doubling ("rhd", Rabenseifner's allreduce) built on send/recv of any
// Communicator (Thakur, Rabenseifner and Gropp 2005; Rabenseifner 2004). docs/allreduce.md shows
// it running.
//
// With N = 2^k ranks: reduce-scatter by recursive halving, k steps: at the step of distance d
// (N/2, N/4, ..., 1) rank r exchanges with r xor d; the lower rank keeps the lower half of the
// range both hold, sends the upper half, and adds the partner's copy of the half it keeps. After k
// steps rank r holds block r (1/N of the tensor) reduced over all ranks. Allgather by recursive
// doubling, the same steps in reverse, each doubling the range a rank holds. 2 log2(N) messages
// and 2(N-1)/N of the tensor per rank, like the ring's bandwidth with the tree's latency:
// 2 log2(N) alpha + 2(N-1)/N n beta + (N-1)/N n gamma.
//
// N not a power of two (the standard fold): with N' the largest power of two below N and
// rem = N - N', ranks 2i and 2i+1 for i < rem pair up first: the even rank sends its whole tensor
// to the odd one, which adds it and stands for both in the halving-doubling among N' ranks; at the
// end it sends the result back. Extra cost: 2 alpha + 2 n beta + n gamma. In the reduce-scatter and
// allgather below the odd rank holds both ranks' blocks, which are adjacent, so the blocks stay in
// rank order.
//
// Precision as the ring's (one rounding per add for f16/bf16, avg divided once by the block's
// owner, max exact); the allgather copies bytes, so every rank ends bit-identical.
#pragma once

#include "dist/collective_options.h"
#include "dist/communicator.h"

namespace stoke::dist {

// In place, on every rank; sum, avg or max; f32, f64 (CPU), f16, bf16; any length.
void rhd_allreduce(Communicator& comm, Tensor& t, ReduceOp op = ReduceOp::sum,
                   const CollectiveOptions& options = {});
// input has size() * output.numel() elements; rank r gets block r reduced over all ranks.
void rhd_reduce_scatter(Communicator& comm, const Tensor& input, Tensor& output,
                        ReduceOp op = ReduceOp::sum, const CollectiveOptions& options = {});
// output has size() * input.numel() elements; block r is rank r's input. Any dtype.
void rhd_allgather(Communicator& comm, const Tensor& input, Tensor& output,
                   const CollectiveOptions& options = {});

}  // namespace stoke::dist
