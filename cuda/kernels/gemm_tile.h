// The register-blocked GEMM micro-tile that sgemm.cu (v2 and v3) and conv2d_implicit_gemm.cu share:
// each thread of a 16 x 16-thread block keeps a TM x TN block of the output in registers and, for
// every k of a k-major slab staged in shared memory, reads a TM-long fragment of A and a TN-long
// fragment of B into registers and accumulates their outer product (TM * TN FMAs for TM + TN shared
// loads).
//
// Kernels-only header (device code for cuda/kernels/*.cu, not part of stoke's API). The loop that
// the kernels' speed rests on is written once here so that the copies cannot drift apart; the tile
// loads and the epilogues stay in each kernel, where they differ (scalar or float4 loads of a
// matrix, the implicit im2col gather; C with alpha and beta, NCHW with bias). Everything is
// __forceinline__ with compile-time trip counts, fully unrolled (STOKE_UNROLL), so that acc, a and
// b live in registers and the code is that of the loops written in place (checked with ptxas for
// sm_80 and sm_90: the same PTX for the conv and v2 kernels, in v3 up to the names of four
// registers; the same registers and spills for every instance).
#pragma once

#include "cuda/compat.h"

namespace stoke::cuda::gemm_tile {

// Threads along each dim of the 256-thread block; a thread's fragment elements are this far apart
// (strided ownership: a warp's shared reads are conflict-free and its output stores coalesced).
constexpr int kStride = 16;

// The fragments of one k-row of each shared tile: a[i] = As_k[a0 + kStride * i] and
// b[j] = Bs_k[b0 + kStride * j] (all of a, then b).
template <int TM, int TN, int LDA, int LDB>
__device__ __forceinline__ void load_fragments(float (&a)[TM], float (&b)[TN],
                                               const float (&As_k)[LDA], int a0,
                                               const float (&Bs_k)[LDB], int b0) {
  STOKE_UNROLL
  for (int i = 0; i < TM; ++i) a[i] = As_k[a0 + kStride * i];
  STOKE_UNROLL
  for (int j = 0; j < TN; ++j) b[j] = Bs_k[b0 + kStride * j];
}

// The same from float4 tiles (128-bit shared loads): a[4v .. 4v+3] = As_k[a0 + kStride * v], the
// thread owning 4 consecutive elements per float4; a's and b's vectors are loaded in turn.
template <int TM, int TN, int LDA, int LDB>
__device__ __forceinline__ void load_fragments(float (&a)[TM], float (&b)[TN],
                                               const float4 (&As_k)[LDA], int a0,
                                               const float4 (&Bs_k)[LDB], int b0) {
  static_assert(TM == TN && TM % 4 == 0, "float4 fragments: a square micro-tile, 4 | TM");
  STOKE_UNROLL
  for (int v = 0; v < TM / 4; ++v) {
    const float4 av = As_k[a0 + kStride * v], bv = Bs_k[b0 + kStride * v];
    a[4 * v] = av.x;
    a[4 * v + 1] = av.y;
    a[4 * v + 2] = av.z;
    a[4 * v + 3] = av.w;
    b[4 * v] = bv.x;
    b[4 * v + 1] = bv.y;
    b[4 * v + 2] = bv.z;
    b[4 * v + 3] = bv.w;
  }
}

// One thread's TM x TN accumulator and the fragments it multiplies. Declare it in the kernel, clear
// it, call accumulate_slab once per shared slab (between the kernel's barriers), read acc.
template <int TM, int TN>
struct MicroTile {
  // The fragments come before acc on purpose: so laid out the compiler's IR and ptxas's register
  // allocation are those of the hand-written loops. With acc first, or the fragments as locals of
  // accumulate_slab, the program is the same but its accumulators are numbered in another order
  // and ptxas allocates differently (up to 10 registers apart at TILE 128).
  float a[TM], b[TN];
  float acc[TM][TN];

  __device__ __forceinline__ void clear() {
    STOKE_UNROLL
    for (int i = 0; i < TM; ++i) {
      STOKE_UNROLL
      for (int j = 0; j < TN; ++j) acc[i][j] = 0.f;
    }
  }

  // acc += op(A)_slab * op(B)_slab for one KS-deep slab of k-major tiles: for each k, the fragment
  // of As[k] from a0 and of Bs[k] from b0, then their outer product. T is float or float4; the
  // two tiles' rows may differ in length (a +1-padded tile).
  template <int KS, typename T, int LDA, int LDB>
  __device__ __forceinline__ void accumulate_slab(const T (&As)[KS][LDA], int a0,
                                                  const T (&Bs)[KS][LDB], int b0) {
    STOKE_UNROLL
    for (int k = 0; k < KS; ++k) {
      load_fragments(a, b, As[k], a0, Bs[k], b0);
      STOKE_UNROLL
      for (int i = 0; i < TM; ++i) {
        STOKE_UNROLL
        for (int j = 0; j < TN; ++j) acc[i][j] += a[i] * b[j];
      }
    }
  }
};

}  // namespace stoke::cuda::gemm_tile
