// CUDA dropout kernels (see dropout.h). One thread handles one Philox block, i.e. 4 consecutive
// elements, with a 4-element vector load/store when the pointers allow it.
#include "cuda/kernels/dropout.h"

#include <cmath>

#include "core/philox.h"
#include "cuda/kernels/elementwise_util.h"

namespace stoke::cuda {
namespace {

using ew::from_float;
using ew::to_float;

// Philox4x32-10 of counter (ctr, 0) under `key` (core/philox.h, the CPU's definition).
__host__ __device__ __forceinline__ void philox(uint64_t ctr, uint64_t key, uint32_t (&r)[4]) {
  uint32_t c0 = static_cast<uint32_t>(ctr), c1 = static_cast<uint32_t>(ctr >> 32), c2 = 0, c3 = 0;
  philox4x32_10(c0, c1, c2, c3, key);
  r[0] = c0;
  r[1] = c1;
  r[2] = c2;
  r[3] = c3;
}

using ew::Quad;

// Thread b (grid-stride) handles elements 4b .. 4b+3 with Philox block offset + b. `vec`: x and
// out are aligned to 4 elements and mask to 4 bytes, so full quads move as single accesses.
template <class T>
__global__ void __launch_bounds__(1024)
    dropout_kernel(const T* x, T* out, uint8_t* mask, int64_t n, uint32_t threshold, float scale,
                   uint64_t seed, uint64_t offset, bool vec) {
  const int64_t blocks = (n + 3) / 4;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; b < blocks;
       b += step) {
    uint32_t r[4];
    philox(offset + static_cast<uint64_t>(b), seed, r);
    bool keep[4];
    STOKE_UNROLL
    for (int k = 0; k < 4; ++k) keep[k] = (r[k] >> 8) < threshold;
    const int64_t i0 = 4 * b;
    if (vec && i0 + 4 <= n) {
      Quad<T> q = reinterpret_cast<const Quad<T>*>(x)[b];
      uint32_t m = 0;
      STOKE_UNROLL
      for (int k = 0; k < 4; ++k) {
        // x * 0 keeps NaN for dropped elements, as the CPU's x * mask does.
        q.v[k] = from_float<T>(to_float(q.v[k]) * (keep[k] ? scale : 0.f));
        m |= static_cast<uint32_t>(keep[k]) << (8 * k);  // little-endian byte k
      }
      reinterpret_cast<Quad<T>*>(out)[b] = q;
      reinterpret_cast<uint32_t*>(mask)[b] = m;
    } else {
      for (int k = 0; k < 4 && i0 + k < n; ++k) {
        out[i0 + k] = from_float<T>(to_float(x[i0 + k]) * (keep[k] ? scale : 0.f));
        mask[i0 + k] = keep[k] ? 1 : 0;
      }
    }
  }
}

template <class T>
__global__ void __launch_bounds__(256)
    dropout_backward_kernel(const T* g, const uint8_t* mask, T* dx, int64_t n, float scale) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    dx[i] = from_float<T>(to_float(g[i]) * static_cast<float>(mask[i]) * scale);
}

}  // namespace

void dropout_forward(DType dtype, const void* x, void* out, uint8_t* mask, int64_t n, double p,
                     uint64_t seed, uint64_t offset, cudaStream_t stream,
                     const DropoutLaunch& launch) {
  STOKE_NVTX_RANGE("stoke::cuda::dropout_forward");
  const char* op = "cuda::dropout";
  STOKE_CHECK(p > 0 && p < 1, op, "expected 0 < p < 1, got ", p);
  STOKE_CHECK(
      launch.block_threads >= 32 && launch.block_threads <= 1024 && launch.block_threads % 32 == 0,
      op, "expected block_threads a multiple of 32 in [32, 1024], got ", launch.block_threads);
  STOKE_CHECK(n >= 0, op, "expected n >= 0, got ", n);
  if (n == 0) return;
  // The CPU's rule: kept when the 24-bit uniform (r >> 8) * 2^-24 is below 1 - p.
  const uint32_t threshold = static_cast<uint32_t>(std::ceil((1.0 - p) * 0x1p24));
  const float scale = static_cast<float>(1.0 / (1.0 - p));
  ew::dispatch_floating(dtype, op, [&](auto tag) {
    using T = decltype(tag);
    const bool vec =
        ew::aligned(x, 4 * sizeof(T)) && ew::aligned(out, 4 * sizeof(T)) && ew::aligned(mask, 4);
    const int64_t cap = launch.max_blocks > 0 ? launch.max_blocks : 4096;
    auto* k = &dropout_kernel<T>;
    STOKE_LAUNCH(k, ew::grid_for((n + 3) / 4, launch.block_threads, cap), launch.block_threads, 0,
                 stream)
    (static_cast<const T*>(x), static_cast<T*>(out), mask, n, threshold, scale, seed, offset, vec);
    STOKE_CUDA_CHECK(cudaGetLastError());
  });
}

void dropout_backward(DType dtype, const void* grad, const uint8_t* mask, void* dx, int64_t n,
                      double p, cudaStream_t stream) {
  STOKE_NVTX_RANGE("stoke::cuda::dropout_backward");
  const char* op = "cuda::dropout_backward";
  STOKE_CHECK(p >= 0 && p <= 1, op, "expected a probability p in [0, 1], got ", p);
  if (n <= 0) return;
  const float scale = p < 1 ? static_cast<float>(1.0 / (1.0 - p)) : 0.f;
  ew::dispatch_floating(dtype, op, [&](auto tag) {
    using T = decltype(tag);
    auto* k = &dropout_backward_kernel<T>;
    STOKE_LAUNCH(k, ew::grid_for(n, 256), 256, 0, stream)
    (static_cast<const T*>(grad), mask, static_cast<T*>(dx), n, scale);
    STOKE_CUDA_CHECK(cudaGetLastError());
  });
}

}  // namespace stoke::cuda
