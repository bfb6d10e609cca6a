// stoke's own single-precision GEMM in numbered versions, each one step further
// along the usual optimization path (naive -> shared-memory tiling -> register
// blocking -> 128-bit vector access). They exist to be studied and measured
// next to cuBLAS (bench/kernels/stoke-kernel-sgemm); the version is chosen at
// run time. cuda/kernels/sgemm.cu explains what each step buys on a GPU.
#pragma once

#include <cstdint>
#include <vector>

#include "cuda/compat.h"

namespace stoke::cuda {

// The numbered SGEMM versions; the numbers are stable (benchmarks print and
// parse them).
enum class SgemmVersion : int {
  naive = 0,             // one thread per C element, operands straight from global memory
  smem_tiled = 1,        // square tiles of A and B staged in shared memory, one C
                         // element a thread
  register_blocked = 2,  // 8-deep k-slabs in shared memory, a TM x TN block of C per thread
  vectorized = 3,        // version 2 with float4 global loads, shared loads and C stores
};

// Every version, in order (for sweeps).
inline constexpr SgemmVersion kSgemmVersions[] = {SgemmVersion::naive, SgemmVersion::smem_tiled,
                                                  SgemmVersion::register_blocked,
                                                  SgemmVersion::vectorized};

// "naive", "smem_tiled", "register_blocked" or "vectorized".
const char* sgemm_version_name(SgemmVersion version);

// The tile sizes `version` supports, default first: the block edge (threads)
// for naive and smem_tiled, the square C tile one 256-thread block computes for
// register_blocked/vectorized.
std::vector<int> sgemm_tile_sizes(SgemmVersion version);

// Which kernel runs and with which tile (0: the version's default).
struct SgemmOptions {
  SgemmVersion version = SgemmVersion::vectorized;
  int tile = 0;
};

// C = alpha * op(A) * op(B) + beta * C for row-major matrices with leading dims
// (elements between rows): op(A) is m x k (A is m x k, or k x m when trans_a),
// op(B) is k x n (B is k x n, or n x k when trans_b), C is m x n. NN is
// linear/matmul forward, NT is x * W^T (linear) and grad_x = g * W of matmul,
// TN is grad_W = g^T * x. With beta == 0, C is not read (NaN there does not
// propagate), as in BLAS. Any sizes (m, n, k >= 0); version 3 uses float4
// accesses only when A, B and C are 16-byte aligned and lda, ldb, ldc are
// multiples of 4, and otherwise runs version 2's scalar kernel with the same
// tile. Asynchronous on `stream`; throws stoke::Error on bad arguments or a
// launch error.
void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
           cudaStream_t stream, const SgemmOptions& options = {});

// Split-K. When C has few tiles but k is long (conv2d's weight gradient: m x n = K x C*kh*kw,
// k = samples * output pixels, often one tile deep in 100,000s of k), the plain sgemm runs a
// handful of blocks on a GPU of 100+ SMs, each walking all of k. sgemm_split_k cuts k into
// `slices` ranges computed by separate blocks (grid.z) into `workspace`, then adds the partials in
// slice order in a second kernel (deterministic: no atomics). Same arguments and result as sgemm.
inline constexpr int64_t kSgemmSplitKTargetBlocks = 256;  // blocks worth filling a large GPU
inline constexpr int64_t kSgemmSplitKMinDepth = 512;      // the least k a slice is worth
inline constexpr int64_t kSgemmSplitKMaxSlices = 256;

// The slices sgemm_split_k is worth for this shape and tile: 1 when C alone has
// kSgemmSplitKTargetBlocks tiles, else enough to reach that many blocks with at least
// kSgemmSplitKMinDepth of k each (at most kSgemmSplitKMaxSlices). Grows with k, so the slices for
// the longest k bound those of shorter ones.
int64_t sgemm_split_k_slices(int64_t m, int64_t n, int64_t k, const SgemmOptions& options = {});

// Floats of workspace sgemm_split_k needs for `slices` (0 for one slice).
int64_t sgemm_split_k_workspace_floats(int64_t m, int64_t n, int64_t slices);

// sgemm with k cut into up to `slices` (1..kSgemmSplitKMaxSlices) slices of a multiple of 16 each;
// one slice (or k too short for two) is the plain sgemm and does not touch the workspace.
void sgemm_split_k(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                   const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                   int64_t ldc, int64_t slices, float* workspace, cudaStream_t stream,
                   const SgemmOptions& options = {});

}  // namespace stoke::cuda
