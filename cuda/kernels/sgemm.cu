// stoke's SGEMM versions (see sgemm.h). C = alpha * op(A) * op(B) + beta * C, row-major.
//
// What each version buys on a real GPU. The fractions of peak below are the usual ones for this
// progression on an A100-class part (~19.5 TFLOP/s f32, ~1.5-2 TB/s DRAM, ~19 TB/s shared
// memory), not measurements of this code: bench/kernels/stoke-kernel-sgemm measures them.
//
// v0 naive: thread (row, col) walks k and reads A(row, k) and B(k, col) from global memory: two
//   loads per FMA. threadIdx.x runs along the columns, so a warp's B and C accesses are coalesced
//   and its A access is one broadcast, but every operand is re-read from L2/DRAM by every thread
//   that needs it: the kernel is bound by memory traffic at ~1-3% of peak.
// v1 smem_tiled: a T x T block stages a T x T tile of op(A) and of op(B) in shared memory once per
//   k-step (each global element loaded once per block instead of once per thread, a T-fold cut in
//   global traffic) and each thread does T FMAs from shared memory. Now shared-memory bandwidth is
//   the limit (two shared loads per FMA): ~10-15% of peak. Transposed operands are loaded with
//   threadIdx.x along their contiguous dim (coalesced) and stored transposed into a tile padded to
//   T+1 columns so the transposed store is free of bank conflicts.
// v2 register_blocked: a 256-thread block computes a TILE x TILE tile of C (TILE = 32/64/128) in
//   8-deep k-slabs; each thread keeps a TM x TN (TILE/16 squared) block of C in registers and per
//   k reads TM values of A and TN of B from shared memory for TM*TN FMAs (an outer product; the
//   loop is gemm_tile.h's, shared with conv2d_implicit_gemm.cu): shared traffic per FMA drops by
//   TM*TN/(TM+TN) (4x at 8x8) and the kernel becomes compute-bound, ~50-70% of peak. Thread
//   (tx, ty) owns rows ty + 16i and columns tx + 16j: strided ownership keeps shared reads
//   conflict-free and C stores coalesced.
// v3 vectorized: version 2 with 128-bit memory instructions everywhere they fit: float4 global
//   loads of A and B along their contiguous dim (a quarter of the load instructions), float4 shared
//   reads of the A and B fragments (each thread owns rows 4*(ty + 16i) + 0..3 and columns
//   4*(tx + 16j) + 0..3, so its fragments are float4s of the k-major tiles), and float4 stores of
//   C. Fewer instructions per FMA: ~70-80% of peak; the remaining steps to cuBLAS are
//   double-buffered shared tiles (load slab k+1 while computing slab k), warp tiling and tensor
//   cores.
//
// Every version handles any m, n, k: tile loads outside the matrix read 0, stores outside are
// skipped. v3 needs 16-byte aligned A, B, C and leading dims that are multiples of 4; the launcher
// checks and otherwise runs v2's kernel with the same tile (same math, scalar accesses). Inside v3,
// a float4 that would straddle the matrix edge (k or n not a multiple of 4) falls back to scalar
// accesses for that vector only.
#include <algorithm>
#include <climits>
#include <iterator>

#include "core/enum_name.h"
#include "cuda/compat.h"
#include "cuda/kernels/gemm_tile.h"
#include "cuda/kernels/sgemm.h"

namespace stoke::cuda {
namespace sgemm_detail {

constexpr int kThreads = 256;  // threads per block of v2 and v3 (16 x 16)
constexpr int kSlab = 8;       // k-depth of the shared tiles of v2 and v3

// Element (row, col) of op(X) for a row-major X with leading dim ld.
template <bool kTrans>
__device__ __forceinline__ float load_op(const float* __restrict__ x, int64_t ld, int row,
                                         int col) {
  return kTrans ? x[static_cast<int64_t>(col) * ld + row] : x[static_cast<int64_t>(row) * ld + col];
}

// C = alpha * acc + beta * C, without reading C when beta == 0.
__device__ __forceinline__ void store_c(float* c, float acc, float alpha, float beta) {
  *c = beta == 0.f ? alpha * acc : alpha * acc + beta * *c;
}

// Split-K (sgemm_split_k): block z of the grid takes k in [z * k_slice, min(K, (z + 1) * k_slice))
// and writes its partial product to its own C at C + z * c_stride. The plain sgemm launches one z
// with k_slice = K, which changes nothing. k_slice is a multiple of 16, so a slice's first column
// of a k-contiguous operand stays 16-byte aligned for the float4 loads.
struct KSlice {
  int K;            // this block's k
  int64_t a, b, c;  // offsets into A, B and C
};
template <bool TA, bool TB>
__device__ __forceinline__ KSlice select_k_slice(int K, int64_t lda, int64_t ldb, int k_slice,
                                                 int64_t c_stride) {
  const int z = static_cast<int>(blockIdx.z);
  const int k0 = z * k_slice;
  return {K - k0 < k_slice ? K - k0 : k_slice, TA ? static_cast<int64_t>(k0) * lda : k0,
          TB ? k0 : static_cast<int64_t>(k0) * ldb, z * c_stride};
}

// Loads one kSlab x TILE slab of op(X) (X = A with rows = m, or X = B^T with rows = n) into the
// k-major shared tile s[k][r] with scalar accesses. `kContiguousK` says which dim of op(X) is
// contiguous in memory: threads run fastest along it so that a warp's loads are coalesced.
template <int TILE, bool kContiguousK>
__device__ __forceinline__ void load_slab_scalar(const float* __restrict__ x, int64_t ld, int rows,
                                                 int K, int r0, int k0, float (*s)[TILE]) {
  for (int e = threadIdx.x; e < TILE * kSlab; e += kThreads) {
    const int r = kContiguousK ? e / kSlab : e % TILE;
    const int k = kContiguousK ? e % kSlab : e / TILE;
    const int gr = r0 + r, gk = k0 + k;
    float v = 0.f;
    if (gr < rows && gk < K)
      v = kContiguousK ? x[static_cast<int64_t>(gr) * ld + gk]
                       : x[static_cast<int64_t>(gk) * ld + gr];
    s[k][r] = v;
  }
}

// The same slab with float4 global loads (x 16-byte aligned, ld % 4 == 0). With k contiguous a
// float4 covers 4 k's of one row and is scattered into the k-major tile; with rows contiguous it
// covers 4 rows of one k and is stored as one float4. Vectors crossing the edge load scalars.
template <int TILE, bool kContiguousK>
__device__ __forceinline__ void load_slab_vec(const float* __restrict__ x, int64_t ld, int rows,
                                              int K, int r0, int k0, float4 (*s4)[TILE / 4]) {
  float(*s)[TILE] = reinterpret_cast<float(*)[TILE]>(s4);
  for (int e = threadIdx.x; e < TILE * kSlab / 4; e += kThreads) {
    if (kContiguousK) {
      const int r = e / (kSlab / 4), k = (e % (kSlab / 4)) * 4;
      const int gr = r0 + r, gk = k0 + k;
      const float* p = x + static_cast<int64_t>(gr) * ld + gk;
      float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
      if (gr < rows && gk + 3 < K) {
        v = *reinterpret_cast<const float4*>(p);
      } else if (gr < rows) {
        v.x = gk < K ? p[0] : 0.f;
        v.y = gk + 1 < K ? p[1] : 0.f;
        v.z = gk + 2 < K ? p[2] : 0.f;
        v.w = gk + 3 < K ? p[3] : 0.f;
      }
      s[k][r] = v.x;
      s[k + 1][r] = v.y;
      s[k + 2][r] = v.z;
      s[k + 3][r] = v.w;
    } else {
      const int k = e / (TILE / 4), r = (e % (TILE / 4)) * 4;
      const int gr = r0 + r, gk = k0 + k;
      const float* p = x + static_cast<int64_t>(gk) * ld + gr;
      float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
      if (gk < K && gr + 3 < rows) {
        v = *reinterpret_cast<const float4*>(p);
      } else if (gk < K) {
        v.x = gr < rows ? p[0] : 0.f;
        v.y = gr + 1 < rows ? p[1] : 0.f;
        v.z = gr + 2 < rows ? p[2] : 0.f;
        v.w = gr + 3 < rows ? p[3] : 0.f;
      }
      s4[k][r / 4] = v;
    }
  }
}

}  // namespace sgemm_detail

using sgemm_detail::kSlab;
using sgemm_detail::kThreads;
using sgemm_detail::load_op;
using sgemm_detail::store_c;

// v0: one thread per element of C, blockDim (B, B); x runs along the columns of C.
template <bool TA, bool TB>
__global__ void sgemm_naive_kernel(int M, int N, int K, float alpha, const float* __restrict__ A,
                                   int64_t lda, const float* __restrict__ B, int64_t ldb,
                                   float beta, float* __restrict__ C, int64_t ldc, int k_slice,
                                   int64_t c_stride) {
  const sgemm_detail::KSlice ks =
      sgemm_detail::select_k_slice<TA, TB>(K, lda, ldb, k_slice, c_stride);
  K = ks.K;
  A += ks.a;
  B += ks.b;
  C += ks.c;
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  const int row = blockIdx.y * blockDim.y + threadIdx.y;
  if (row >= M || col >= N) return;
  float acc = 0.f;
  for (int k = 0; k < K; ++k) acc += load_op<TA>(A, lda, row, k) * load_op<TB>(B, ldb, k, col);
  store_c(C + static_cast<int64_t>(row) * ldc + col, acc, alpha, beta);
}

// v1: T x T threads, T x T tiles of op(A) and op(B) in shared memory, one C element per thread.
template <int T, bool TA, bool TB>
__global__ void __launch_bounds__(T* T)
    sgemm_smem_tiled_kernel(int M, int N, int K, float alpha, const float* __restrict__ A,
                            int64_t lda, const float* __restrict__ B, int64_t ldb, float beta,
                            float* __restrict__ C, int64_t ldc, int k_slice, int64_t c_stride) {
  const sgemm_detail::KSlice ks =
      sgemm_detail::select_k_slice<TA, TB>(K, lda, ldb, k_slice, c_stride);
  K = ks.K;
  A += ks.a;
  B += ks.b;
  C += ks.c;
  __shared__ float As[T][T + 1];  // As[i][kk] = op(A)(row0 + i, k0 + kk)
  __shared__ float Bs[T][T + 1];  // Bs[kk][j] = op(B)(k0 + kk, col0 + j)
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row0 = blockIdx.y * T, col0 = blockIdx.x * T;
  const int row = row0 + ty, col = col0 + tx;
  float acc = 0.f;
  for (int k0 = 0; k0 < K; k0 += T) {
    // tx runs along each operand's contiguous dim: A's k (or m when transposed), B's n (or k).
    if (TA) {
      const int r = row0 + tx, kk = k0 + ty;
      As[tx][ty] = r < M && kk < K ? A[static_cast<int64_t>(kk) * lda + r] : 0.f;
    } else {
      const int kk = k0 + tx;
      As[ty][tx] = row < M && kk < K ? A[static_cast<int64_t>(row) * lda + kk] : 0.f;
    }
    if (TB) {
      const int kk = k0 + tx, c = col0 + ty;
      Bs[tx][ty] = kk < K && c < N ? B[static_cast<int64_t>(c) * ldb + kk] : 0.f;
    } else {
      const int kk = k0 + ty;
      Bs[ty][tx] = kk < K && col < N ? B[static_cast<int64_t>(kk) * ldb + col] : 0.f;
    }
    __syncthreads();
    STOKE_UNROLL
    for (int kk = 0; kk < T; ++kk) acc += As[ty][kk] * Bs[kk][tx];
    __syncthreads();  // the next iteration overwrites the tiles
  }
  if (row < M && col < N) store_c(C + static_cast<int64_t>(row) * ldc + col, acc, alpha, beta);
}

// v2: 256 threads compute a TILE x TILE tile of C; thread (tx, ty) owns rows ty + 16i and columns
// tx + 16j (i, j < TILE / 16), accumulated in registers over kSlab-deep shared slabs.
template <int TILE, bool TA, bool TB>
__global__ void __launch_bounds__(256)
    sgemm_register_blocked_kernel(int M, int N, int K, float alpha, const float* __restrict__ A,
                                  int64_t lda, const float* __restrict__ B, int64_t ldb, float beta,
                                  float* __restrict__ C, int64_t ldc, int k_slice,
                                  int64_t c_stride) {
  const sgemm_detail::KSlice ks =
      sgemm_detail::select_k_slice<TA, TB>(K, lda, ldb, k_slice, c_stride);
  K = ks.K;
  A += ks.a;
  B += ks.b;
  C += ks.c;
  constexpr int TM = TILE / 16;
  __shared__ float As[kSlab][TILE];  // As[k][i] = op(A)(row0 + i, k0 + k)
  __shared__ float Bs[kSlab][TILE];  // Bs[k][j] = op(B)(k0 + k, col0 + j)
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int row0 = blockIdx.y * TILE, col0 = blockIdx.x * TILE;
  gemm_tile::MicroTile<TM, TM> t;  // the thread's TM x TM block of C in t.acc
  t.clear();
  for (int k0 = 0; k0 < K; k0 += kSlab) {
    // op(A) is contiguous along k unless transposed; op(B) (seen as B^T's rows) the other way.
    sgemm_detail::load_slab_scalar<TILE, !TA>(A, lda, M, K, row0, k0, As);
    sgemm_detail::load_slab_scalar<TILE, TB>(B, ldb, N, K, col0, k0, Bs);
    __syncthreads();
    t.accumulate_slab(As, ty, Bs, tx);
    __syncthreads();
  }
  STOKE_UNROLL
  for (int i = 0; i < TM; ++i) {
    const int row = row0 + ty + 16 * i;
    if (row >= M) continue;
    STOKE_UNROLL
    for (int j = 0; j < TM; ++j) {
      const int col = col0 + tx + 16 * j;
      if (col < N) store_c(C + static_cast<int64_t>(row) * ldc + col, t.acc[i][j], alpha, beta);
    }
  }
}

// v3: v2's tiling with float4 accesses (TILE = 64 or 128). Thread (tx, ty) owns rows
// 4 * (ty + 16i) + 0..3 and columns 4 * (tx + 16j) + 0..3 (i, j < TILE / 64), so each fragment it
// reads from the k-major tiles is a float4 and each row of its C block is float4 stores.
template <int TILE, bool TA, bool TB>
__global__ void __launch_bounds__(256)
    sgemm_vectorized_kernel(int M, int N, int K, float alpha, const float* __restrict__ A,
                            int64_t lda, const float* __restrict__ B, int64_t ldb, float beta,
                            float* __restrict__ C, int64_t ldc, int k_slice, int64_t c_stride) {
  const sgemm_detail::KSlice ks =
      sgemm_detail::select_k_slice<TA, TB>(K, lda, ldb, k_slice, c_stride);
  K = ks.K;
  A += ks.a;
  B += ks.b;
  C += ks.c;
  constexpr int TV = TILE / 64;  // float4 fragments per thread and dim
  constexpr int TM = 4 * TV;
  __shared__ float4 As[kSlab][TILE / 4];  // As[k][i / 4] = op(A)(row0 + i..i+3, k0 + k)
  __shared__ float4 Bs[kSlab][TILE / 4];  // Bs[k][j / 4] = op(B)(k0 + k, col0 + j..j+3)
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int row0 = blockIdx.y * TILE, col0 = blockIdx.x * TILE;
  gemm_tile::MicroTile<TM, TM> t;  // the thread's TM x TM block of C in t.acc
  t.clear();
  for (int k0 = 0; k0 < K; k0 += kSlab) {
    sgemm_detail::load_slab_vec<TILE, !TA>(A, lda, M, K, row0, k0, As);
    sgemm_detail::load_slab_vec<TILE, TB>(B, ldb, N, K, col0, k0, Bs);
    __syncthreads();
    t.accumulate_slab(As, ty, Bs, tx);
    __syncthreads();
  }
  STOKE_UNROLL
  for (int i = 0; i < TM; ++i) {
    const int row = row0 + 4 * (ty + 16 * (i / 4)) + i % 4;
    if (row >= M) continue;
    float* crow = C + static_cast<int64_t>(row) * ldc;
    STOKE_UNROLL
    for (int v = 0; v < TV; ++v) {
      const int col = col0 + 4 * (tx + 16 * v);
      const float* r = &t.acc[i][4 * v];
      if (col + 3 < N) {
        float4* p = reinterpret_cast<float4*>(crow + col);
        float4 out = make_float4(alpha * r[0], alpha * r[1], alpha * r[2], alpha * r[3]);
        if (beta != 0.f) {
          const float4 old = *p;
          out.x += beta * old.x;
          out.y += beta * old.y;
          out.z += beta * old.z;
          out.w += beta * old.w;
        }
        *p = out;
      } else {
        for (int t = 0; t < 4 && col + t < N; ++t) store_c(crow + col + t, r[t], alpha, beta);
      }
    }
  }
}

// Split-K's second pass: C = alpha * (sum of the slices' partial products) + beta * C, one thread
// per element of C. The partials are added in slice order, so the result does not depend on which
// block finished first (no atomics: the same inputs give the same bits).
__global__ void sgemm_split_k_reduce_kernel(int M, int N, int slices,
                                            const float* __restrict__ partial, float alpha,
                                            float beta, float* __restrict__ C, int64_t ldc) {
  const int64_t mn = static_cast<int64_t>(M) * N;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= mn) return;
  float acc = 0.f;
  for (int z = 0; z < slices; ++z) acc += partial[z * mn + i];
  store_c(C + i / N * ldc + i % N, acc, alpha, beta);
}

namespace {

// Launch arguments shared by all versions.
struct GemmArgs {
  int M, N, K;
  float alpha;
  const float* A;
  int64_t lda;
  const float* B;
  int64_t ldb;
  float beta;
  float* C;
  int64_t ldc;
  int slices;        // grid.z: 1, or the k-slices of sgemm_split_k
  int k_slice;       // k per slice (K when slices == 1)
  int64_t c_stride;  // floats between the slices' partial C (0 when slices == 1)
};

dim3 tile_grid(const GemmArgs& g, int tile) {
  return dim3(static_cast<unsigned>((g.N + tile - 1) / tile),
              static_cast<unsigned>((g.M + tile - 1) / tile), static_cast<unsigned>(g.slices));
}

template <bool TA, bool TB>
void launch_naive(const GemmArgs& g, int tile, cudaStream_t stream) {
  auto* k = &sgemm_naive_kernel<TA, TB>;
  STOKE_LAUNCH(k, tile_grid(g, tile), dim3(tile, tile), 0, stream)
  (g.M, g.N, g.K, g.alpha, g.A, g.lda, g.B, g.ldb, g.beta, g.C, g.ldc, g.k_slice, g.c_stride);
}

template <int T, bool TA, bool TB>
void launch_smem(const GemmArgs& g, cudaStream_t stream) {
  auto* k = &sgemm_smem_tiled_kernel<T, TA, TB>;
  STOKE_LAUNCH(k, tile_grid(g, T), dim3(T, T), 0, stream)
  (g.M, g.N, g.K, g.alpha, g.A, g.lda, g.B, g.ldb, g.beta, g.C, g.ldc, g.k_slice, g.c_stride);
}

template <int T, bool TA, bool TB>
void launch_blocked(const GemmArgs& g, cudaStream_t stream) {
  auto* k = &sgemm_register_blocked_kernel<T, TA, TB>;
  STOKE_LAUNCH(k, tile_grid(g, T), dim3(kThreads), 0, stream)
  (g.M, g.N, g.K, g.alpha, g.A, g.lda, g.B, g.ldb, g.beta, g.C, g.ldc, g.k_slice, g.c_stride);
}

template <int T, bool TA, bool TB>
void launch_vectorized(const GemmArgs& g, cudaStream_t stream) {
  auto* k = &sgemm_vectorized_kernel<T, TA, TB>;
  STOKE_LAUNCH(k, tile_grid(g, T), dim3(kThreads), 0, stream)
  (g.M, g.N, g.K, g.alpha, g.A, g.lda, g.B, g.ldb, g.beta, g.C, g.ldc, g.k_slice, g.c_stride);
}

bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

template <bool TA, bool TB>
void dispatch(const GemmArgs& g, SgemmVersion version, int tile, cudaStream_t stream) {
  switch (version) {
    case SgemmVersion::naive:
      launch_naive<TA, TB>(g, tile, stream);
      return;
    case SgemmVersion::smem_tiled:
      if (tile == 8) launch_smem<8, TA, TB>(g, stream);
      if (tile == 16) launch_smem<16, TA, TB>(g, stream);
      if (tile == 32) launch_smem<32, TA, TB>(g, stream);
      return;
    case SgemmVersion::register_blocked:
      if (tile == 32) launch_blocked<32, TA, TB>(g, stream);
      if (tile == 64) launch_blocked<64, TA, TB>(g, stream);
      if (tile == 128) launch_blocked<128, TA, TB>(g, stream);
      return;
    case SgemmVersion::vectorized: {
      const bool vec = aligned16(g.A) && aligned16(g.B) && aligned16(g.C) && g.lda % 4 == 0 &&
                       g.ldb % 4 == 0 && g.ldc % 4 == 0;
      if (tile == 64)
        vec ? launch_vectorized<64, TA, TB>(g, stream) : launch_blocked<64, TA, TB>(g, stream);
      if (tile == 128)
        vec ? launch_vectorized<128, TA, TB>(g, stream) : launch_blocked<128, TA, TB>(g, stream);
      return;
    }
  }
}

}  // namespace

const char* sgemm_version_name(SgemmVersion version) {
  static constexpr const char* names[] = {"naive", "smem_tiled", "register_blocked", "vectorized"};
  static_assert(std::size(names) == enum_count(SgemmVersion::vectorized));
  return enum_name(version, names, "unknown");
}

std::vector<int> sgemm_tile_sizes(SgemmVersion version) {
  switch (version) {
    case SgemmVersion::naive:
      return {16, 8, 32};
    case SgemmVersion::smem_tiled:
      return {32, 16, 8};
    case SgemmVersion::register_blocked:
      return {128, 64, 32};
    case SgemmVersion::vectorized:
      return {128, 64};
  }
  return {};
}

namespace {

// The checks both entry points share; returns the tile to use.
int check_sgemm_args(const char* op, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                     const float* a, int64_t lda, const float* b, int64_t ldb, const float* c,
                     int64_t ldc, const SgemmOptions& options) {
  const int v = static_cast<int>(options.version);
  STOKE_CHECK(v >= 0 && v <= 3, op, "expected version 0..3 (naive, smem_tiled, register_blocked, ",
              "vectorized), got ", v);
  STOKE_CHECK(m >= 0 && n >= 0 && k >= 0, op, "expected sizes >= 0, got m=", m, " n=", n, " k=", k);
  STOKE_CHECK(m <= INT_MAX && n <= INT_MAX && k <= INT_MAX, op,
              "expected sizes that fit in 32 bits, got m=", m, " n=", n, " k=", k);
  const int64_t a_cols = trans_a ? m : k, b_cols = trans_b ? k : n;
  STOKE_CHECK(lda >= a_cols && lda >= 1 && ldb >= b_cols && ldb >= 1 && ldc >= n && ldc >= 1, op,
              "expected leading dims >= the row lengths (lda >= ", a_cols, ", ldb >= ", b_cols,
              ", ldc >= ", n, "), got lda=", lda, " ldb=", ldb, " ldc=", ldc);
  const std::vector<int> tiles = sgemm_tile_sizes(options.version);
  const int tile = options.tile == 0 ? tiles.front() : options.tile;
  bool known = false;
  for (int t : tiles) known = known || t == tile;
  STOKE_CHECK(known, op, "expected a tile size of ", sgemm_version_name(options.version),
              " from sgemm_tile_sizes (or 0), got ", options.tile);
  if (m == 0 || n == 0) return tile;
  STOKE_CHECK(a != nullptr || k == 0, op, "expected a non-null A");
  STOKE_CHECK(b != nullptr || k == 0, op, "expected a non-null B");
  STOKE_CHECK(c != nullptr, op, "expected a non-null C");
  STOKE_CHECK((m + tile - 1) / tile <= 65535, op, "expected m <= ", 65535LL * tile, " for tile ",
              tile, " (grid.y limit), got ", m);
  return tile;
}

void launch(bool trans_a, bool trans_b, const GemmArgs& g, SgemmVersion version, int tile,
            cudaStream_t stream) {
  if (!trans_a && !trans_b) dispatch<false, false>(g, version, tile, stream);
  if (!trans_a && trans_b) dispatch<false, true>(g, version, tile, stream);
  if (trans_a && !trans_b) dispatch<true, false>(g, version, tile, stream);
  if (trans_a && trans_b) dispatch<true, true>(g, version, tile, stream);
  STOKE_CUDA_CHECK(cudaGetLastError());
}

// k per slice when k is cut into at most `slices` slices: a multiple of 16 (select_k_slice).
int64_t k_per_slice(int64_t k, int64_t slices) {
  const int64_t per = (k + slices - 1) / slices;
  return std::max<int64_t>(16, (per + 15) / 16 * 16);
}

}  // namespace

void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
           cudaStream_t stream, const SgemmOptions& options) {
  STOKE_NVTX_RANGE("stoke::cuda::sgemm");
  const int tile =
      check_sgemm_args("cuda::sgemm", trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, options);
  if (m == 0 || n == 0) return;
  const GemmArgs g{static_cast<int>(m),
                   static_cast<int>(n),
                   static_cast<int>(k),
                   alpha,
                   a,
                   lda,
                   b,
                   ldb,
                   beta,
                   c,
                   ldc,
                   1,
                   static_cast<int>(k),
                   0};
  launch(trans_a, trans_b, g, options.version, tile, stream);
}

int64_t sgemm_split_k_slices(int64_t m, int64_t n, int64_t k, const SgemmOptions& options) {
  const std::vector<int> tiles = sgemm_tile_sizes(options.version);
  const int64_t tile = options.tile == 0 ? tiles.front() : options.tile;
  const int64_t blocks = ((m + tile - 1) / tile) * ((n + tile - 1) / tile);
  if (blocks <= 0 || blocks >= kSgemmSplitKTargetBlocks) return 1;
  const int64_t by_blocks = (kSgemmSplitKTargetBlocks + blocks - 1) / blocks;
  const int64_t by_depth = k / kSgemmSplitKMinDepth;
  return std::clamp<int64_t>(std::min(by_blocks, by_depth), 1, kSgemmSplitKMaxSlices);
}

int64_t sgemm_split_k_workspace_floats(int64_t m, int64_t n, int64_t slices) {
  return slices > 1 ? slices * m * n : 0;
}

void sgemm_split_k(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                   const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                   int64_t ldc, int64_t slices, float* workspace, cudaStream_t stream,
                   const SgemmOptions& options) {
  STOKE_NVTX_RANGE("stoke::cuda::sgemm_split_k");
  const char* op = "cuda::sgemm_split_k";
  const int tile = check_sgemm_args(op, trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, options);
  STOKE_CHECK(slices >= 1 && slices <= kSgemmSplitKMaxSlices, op, "expected 1..",
              kSgemmSplitKMaxSlices, " slices, got ", slices);
  if (m == 0 || n == 0) return;
  const int64_t per = k_per_slice(k, slices);
  const int64_t used = k == 0 ? 1 : (k + per - 1) / per;  // slices that get some k
  if (used <= 1) {
    sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, stream, options);
    return;
  }
  STOKE_CHECK(workspace != nullptr, op, "expected a workspace of ",
              sgemm_split_k_workspace_floats(m, n, slices), " floats for ", slices, " slices");
  // Pass 1: each slice's op(A) op(B) over its k-range into its own (m, n) block of the workspace.
  const GemmArgs g{static_cast<int>(m),
                   static_cast<int>(n),
                   static_cast<int>(k),
                   1.f,
                   a,
                   lda,
                   b,
                   ldb,
                   0.f,
                   workspace,
                   n,
                   static_cast<int>(used),
                   static_cast<int>(per),
                   m * n};
  launch(trans_a, trans_b, g, options.version, tile, stream);
  // Pass 2: C = alpha * (sum of the partials) + beta * C.
  constexpr int kThreadsReduce = 256;
  const int64_t blocks = (m * n + kThreadsReduce - 1) / kThreadsReduce;
  STOKE_LAUNCH(sgemm_split_k_reduce_kernel, dim3(static_cast<unsigned>(blocks)),
               dim3(kThreadsReduce), 0, stream)
  (static_cast<int>(m), static_cast<int>(n), static_cast<int>(used), workspace, alpha, beta, c,
   ldc);
  STOKE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace stoke::cuda
