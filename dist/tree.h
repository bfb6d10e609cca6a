// A binomial-tree allreduce built on send/recv of any Communicator: a reduce to rank 0 up the
// tree, then a broadcast down it (MPICH's reduce and bcast for short messages; Thakur, Rabenseifner
// and Gropp 2005). docs/allreduce.md shows it running.
//
// Rank r's parent is r - lowbit(r) (lowbit: r's lowest set bit); its children are r + m for
// m = 1, 2, 4, ... below lowbit(r) (below N for rank 0) and r + m < N. Reduce: a rank receives
// from each child in that order, adds into its tensor, and sends the sum to its parent; rank 0 then
// holds the total (divided by N for avg). Broadcast: each rank receives the result from its parent
// and sends it to its children. ceil(log2 N) levels each way, so 2 ceil(log2 N) message latencies
// where the ring takes 2(N-1): the tree wins on small messages. But every message carries the whole
// tensor: 2 ceil(log2 N) alpha + 2 ceil(log2 N) n beta + ceil(log2 N) n gamma, against the ring's
// 2(N-1)/N n beta, so it loses on large ones. Segments (CollectiveOptions) are pipelined down a
// chain: a rank forwards segment k while it receives k+1.
//
// Precision as the ring's: f16/bf16 add in f32 and round once per add (at most N-1 roundings on
// any element's path), avg divides once at the root, max is exact; the broadcast copies bytes, so
// every rank ends bit-identical.
#pragma once

#include <vector>

#include "dist/collective_options.h"
#include "dist/communicator.h"

namespace stoke::dist {

// In place, on every rank; sum, avg or max; f32, f64 (CPU), f16, bf16; any length.
void tree_allreduce(Communicator& comm, Tensor& t, ReduceOp op = ReduceOp::sum,
                    const CollectiveOptions& options = {});

// The binomial tree over `ranks` ranks rooted at 0: rank's parent (-1 for rank 0) and its children
// in the order the reduce receives from them (nearest first).
struct TreeLinks {
  int parent = -1;
  std::vector<int> children;
};
TreeLinks binomial_tree(int ranks, int rank);

}  // namespace stoke::dist
