// Device helpers shared by the elementwise-family kernels (elementwise, reduce, softmax,
// cross_entropy, dropout, cast, index, normalize): f16/bf16 loads and stores with f32 math,
// 128-bit packs, warp and block reductions, grid sizing, and the strided offset calculator that
// broadcasting launchers take by value. Everything here is in stoke::cuda::ew so that it cannot
// collide with another kernel family's helpers of the same name.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/dtype.h"
#include "core/error.h"
#include "cuda/compat.h"
#include "cuda/kernels/dispatch.h"

namespace stoke::cuda {

// The most dims a strided launcher accepts after merging contiguous dims.
constexpr int kMaxDims = 8;

// Sizes of an iteration space and the strides (in elements, 0 on broadcast dims) of N operands
// over it; operand 0 is the output by convention. Passed to kernels by value (a POD). Built on
// the host by make_strided_offsets, which merges dims that are contiguous for every operand.
template <int N>
struct StridedOffsets {
  int32_t ndim = 0;
  int64_t size[kMaxDims] = {};
  int64_t stride[N][kMaxDims] = {};

  // Offsets (in elements) of every operand for row-major position `linear`.
  __host__ __device__ __forceinline__ void get(int64_t linear, int64_t (&off)[N]) const {
    STOKE_UNROLL
    for (int k = 0; k < N; ++k) off[k] = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      const int64_t i = linear % size[d];
      linear /= size[d];
      STOKE_UNROLL
      for (int k = 0; k < N; ++k) off[k] += i * stride[k][d];
    }
  }

  // True when every operand is contiguous over the whole space (one dim of stride 1, or none).
  bool contiguous() const {
    if (ndim == 0) return true;
    if (ndim > 1) return false;
    for (int k = 0; k < N; ++k)
      if (stride[k][0] != 1) return false;
    return true;
  }
};

// Builds the offsets of N operands over `shape` (ndim dims), strides[k] being operand k's
// strides already broadcast to `shape` (0 on broadcast dims). Size-1 dims are dropped and
// adjacent dims merged where every operand allows it; more than kMaxDims remaining dims is an
// error naming `op`.
template <int N>
StridedOffsets<N> make_strided_offsets(const char* op, const int64_t* shape, int ndim,
                                       const int64_t* const (&strides)[N]) {
  StridedOffsets<N> r;
  int64_t size[64];
  int64_t st[N][64];
  STOKE_CHECK(ndim >= 0 && ndim <= 64, op, "expected at most 64 dims, got ", ndim);
  int m = 0;
  for (int d = 0; d < ndim; ++d) {
    if (shape[d] == 1) continue;
    size[m] = shape[d];
    for (int k = 0; k < N; ++k) st[k][m] = strides[k][d];
    ++m;
  }
  // Merge dim j into the previous kept dim when, for every operand, stepping the outer dim equals
  // stepping the inner one size times.
  int out = 0;
  for (int j = 0; j < m; ++j) {
    bool merge = out > 0;
    for (int k = 0; k < N && merge; ++k) merge = st[k][out - 1] == st[k][j] * size[j];
    if (merge) {
      size[out - 1] *= size[j];
      for (int k = 0; k < N; ++k) st[k][out - 1] = st[k][j];
    } else {
      size[out] = size[j];
      for (int k = 0; k < N; ++k) st[k][out] = st[k][j];
      ++out;
    }
  }
  STOKE_CHECK(out <= kMaxDims, op, "expected at most ", kMaxDims,
              " dims after merging contiguous dims, got ", out);
  r.ndim = out;
  for (int d = 0; d < out; ++d) {
    r.size[d] = size[d];
    for (int k = 0; k < N; ++k) r.stride[k][d] = st[k][d];
  }
  return r;
}

namespace ew {

// Loads and stores of the storage dtypes; all math is f32.
__host__ __device__ __forceinline__ float to_float(float v) {
  return v;
}
__host__ __device__ __forceinline__ float to_float(__half v) {
  return __half2float(v);
}
__host__ __device__ __forceinline__ float to_float(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

// Round-to-nearest-even conversion from f32 (the same rounding as core/half.h).
template <class T>
__host__ __device__ __forceinline__ T from_float(float v);
template <>
__host__ __device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__host__ __device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__host__ __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// *p widened to f32, and v rounded (to nearest even) into *p, whatever the storage dtype.
template <class T>
__host__ __device__ __forceinline__ float load_f32(const T* p) {
  return to_float(*p);
}
template <class T>
__host__ __device__ __forceinline__ void store_f32(T* p, float v) {
  *p = from_float<T>(v);
}

// 16 bytes of T: one 128-bit load or store when the address is 16-byte aligned.
template <class T>
struct alignas(16) Pack {
  static constexpr int kN = static_cast<int>(16 / sizeof(T));
  T v[kN];
};

// True when p is aligned to `bytes`.
__host__ __device__ __forceinline__ bool aligned(const void* p, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

constexpr unsigned kFullMask = 0xffffffffu;

// Device-only helpers: visible to kernel files (nvcc, emu) but not to host code that includes a
// launcher header through this file and is compiled by the host compiler in the real build
// (ops/cuda/), where threadIdx and the warp intrinsics do not exist.
#if defined(__CUDACC__) || defined(STOKE_CUDA_EMU)
struct SumOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};
struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// Reduction over the 32 lanes of a warp; every lane gets the result.
template <class Op>
__device__ __forceinline__ float warp_reduce(float v, Op op) {
  STOKE_UNROLL
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

// Reduction over a 1-D block (blockDim.x a multiple of 32, at most 1024); every thread gets the
// result. Safe to call repeatedly: the first barrier keeps a previous call's readers from
// seeing this call's partials.
template <class Op>
__device__ __forceinline__ float block_reduce(float v, Op op, float identity) {
  __shared__ float partial[32];
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  v = warp_reduce(v, op);
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  const int warps = static_cast<int>((blockDim.x + 31) / 32);
  v = lane < warps ? partial[lane] : identity;
  return warp_reduce(v, op);
}

// Reduction over the threads of a row group: a warp (blockDim.x == 32, several rows per block
// along y) or the whole block (blockDim.y == 1). The branch is uniform over the block.
template <class Op>
__device__ __forceinline__ float row_reduce(float v, Op op, float identity) {
  if (blockDim.x == 32) return warp_reduce(v, op);
  return block_reduce(v, op, identity);
}
#endif  // __CUDACC__ || STOKE_CUDA_EMU

// The dtype dispatchers (dispatch_floating, dispatch_all) live in cuda/kernels/dispatch.h.
using cuda::dispatch_all;
using cuda::dispatch_floating;

// Blocks for a grid-stride loop over `work` items with `threads` per block, capped so that huge
// tensors loop instead of launching millions of blocks.
inline unsigned grid_for(int64_t work, int threads, int64_t cap = 4096) {
  int64_t b = (work + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > cap) b = cap;
  return static_cast<unsigned>(b);
}

// Four elements, aligned for one vector access (the vectorized paths of cast and dropout).
template <class T>
struct alignas(4 * sizeof(T)) Quad {
  T v[4];
};

}  // namespace ew
}  // namespace stoke::cuda
