// CUDA softmax kernels (see softmax.h). Rows are read three times (max, sum, write): they are
// short enough in the warp case to stay in L1, and the block case is bandwidth-bound either way.
#include "cuda/kernels/softmax.h"

#include <cmath>

#include "cuda/kernels/elementwise_util.h"

namespace stoke::cuda {
namespace {

using ew::from_float;
using ew::to_float;

// One row group (a warp with blockDim.y rows per block, or a whole block) per contiguous row.
// Rows past the end still take part in the reductions.
template <class T, bool Log>
__global__ void __launch_bounds__(256)
    softmax_rows_kernel(const T* x, T* y, int64_t rows, int64_t n) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool valid = row < rows;
  const T* p = x + (valid ? row * n : 0);
  T* q = y + (valid ? row * n : 0);
  float m = -INFINITY;
  if (valid)
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) m = fmaxf(m, to_float(p[j]));
  m = ew::row_reduce(m, ew::MaxOp{}, -INFINITY);
  float s = 0.f;
  if (valid)
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += expf(to_float(p[j]) - m);
  s = ew::row_reduce(s, ew::SumOp{}, 0.f);
  if (!valid) return;
  if constexpr (Log) {
    const float ls = logf(s);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
      q[j] = from_float<T>(to_float(p[j]) - m - ls);
  } else {
    const float inv = 1.f / s;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
      q[j] = from_float<T>(expf(to_float(p[j]) - m) * inv);
  }
}

template <class T, bool Log>
__global__ void __launch_bounds__(256)
    softmax_backward_rows_kernel(const T* g, const T* y, T* dx, int64_t rows, int64_t n) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool valid = row < rows;
  const int64_t base = valid ? row * n : 0;
  float s = 0.f;
  if (valid)
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
      s += Log ? to_float(g[base + j]) : to_float(g[base + j]) * to_float(y[base + j]);
  s = ew::row_reduce(s, ew::SumOp{}, 0.f);
  if (!valid) return;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const float gj = to_float(g[base + j]), yj = to_float(y[base + j]);
    dx[base + j] = from_float<T>(Log ? gj - expf(yj) * s : yj * (gj - s));
  }
}

// One thread per (outer, inner) column of [outer, n, inner], inner > 1.
template <class T, bool Log>
__global__ void __launch_bounds__(256)
    softmax_cols_kernel(const T* x, T* y, int64_t outer, int64_t n, int64_t inner) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < outer * inner;
       c += step) {
    const int64_t base = (c / inner) * n * inner + c % inner;
    float m = -INFINITY, s = 0.f;
    for (int64_t j = 0; j < n; ++j) m = fmaxf(m, to_float(x[base + j * inner]));
    for (int64_t j = 0; j < n; ++j) s += expf(to_float(x[base + j * inner]) - m);
    const float ls = logf(s), inv = 1.f / s;
    for (int64_t j = 0; j < n; ++j) {
      const float v = to_float(x[base + j * inner]) - m;
      y[base + j * inner] = from_float<T>(Log ? v - ls : expf(v) * inv);
    }
  }
}

template <class T, bool Log>
__global__ void __launch_bounds__(256)
    softmax_backward_cols_kernel(const T* g, const T* y, T* dx, int64_t outer, int64_t n,
                                 int64_t inner) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < outer * inner;
       c += step) {
    const int64_t base = (c / inner) * n * inner + c % inner;
    float s = 0.f;
    for (int64_t j = 0; j < n; ++j) {
      const int64_t k = base + j * inner;
      s += Log ? to_float(g[k]) : to_float(g[k]) * to_float(y[k]);
    }
    for (int64_t j = 0; j < n; ++j) {
      const int64_t k = base + j * inner;
      const float gj = to_float(g[k]), yj = to_float(y[k]);
      dx[k] = from_float<T>(Log ? gj - expf(yj) * s : yj * (gj - s));
    }
  }
}

// Row launches: a warp per row (4 rows per block) up to 1024 elements, a 256-thread block above.
dim3 row_block(int64_t n) {
  return n <= 1024 ? dim3(32, 4) : dim3(256, 1);
}
unsigned row_grid(int64_t rows, int64_t n) {
  return static_cast<unsigned>(n <= 1024 ? (rows + 3) / 4 : rows);
}

void check_sizes(const char* op, int64_t outer, int64_t n, int64_t inner) {
  STOKE_CHECK(outer >= 0 && n >= 0 && inner >= 0, op,
              "expected non-negative sizes [outer, n, inner], got [", outer, ", ", n, ", ", inner,
              "]");
}

}  // namespace

void softmax_forward(DType dtype, const void* x, void* y, int64_t outer, int64_t n, int64_t inner,
                     bool log, cudaStream_t stream) {
  STOKE_NVTX_RANGE("stoke::cuda::softmax_forward");
  const char* op = log ? "cuda::log_softmax" : "cuda::softmax";
  check_sizes(op, outer, n, inner);
  if (outer * n * inner == 0) return;
  ew::dispatch_floating(dtype, op, [&](auto tag) {
    using T = decltype(tag);
    const T* px = static_cast<const T*>(x);
    T* py = static_cast<T*>(y);
    if (inner == 1) {
      auto* k = log ? &softmax_rows_kernel<T, true> : &softmax_rows_kernel<T, false>;
      STOKE_LAUNCH(k, row_grid(outer, n), row_block(n), 0, stream)(px, py, outer, n);
    } else {
      auto* k = log ? &softmax_cols_kernel<T, true> : &softmax_cols_kernel<T, false>;
      STOKE_LAUNCH(k, ew::grid_for(outer * inner, 256), 256, 0, stream)(px, py, outer, n, inner);
    }
    STOKE_CUDA_CHECK(cudaGetLastError());
  });
}

void softmax_backward(DType dtype, const void* grad, const void* y, void* dx, int64_t outer,
                      int64_t n, int64_t inner, bool log, cudaStream_t stream) {
  STOKE_NVTX_RANGE("stoke::cuda::softmax_backward");
  const char* op = log ? "cuda::log_softmax_backward" : "cuda::softmax_backward";
  check_sizes(op, outer, n, inner);
  if (outer * n * inner == 0) return;
  ew::dispatch_floating(dtype, op, [&](auto tag) {
    using T = decltype(tag);
    const T* pg = static_cast<const T*>(grad);
    const T* py = static_cast<const T*>(y);
    T* pd = static_cast<T*>(dx);
    if (inner == 1) {
      auto* k =
          log ? &softmax_backward_rows_kernel<T, true> : &softmax_backward_rows_kernel<T, false>;
      STOKE_LAUNCH(k, row_grid(outer, n), row_block(n), 0, stream)(pg, py, pd, outer, n);
    } else {
      auto* k =
          log ? &softmax_backward_cols_kernel<T, true> : &softmax_backward_cols_kernel<T, false>;
      STOKE_LAUNCH(k, ew::grid_for(outer * inner, 256), 256, 0, stream)
      (pg, py, pd, outer, n, inner);
    }
    STOKE_CUDA_CHECK(cudaGetLastError());
  });
}

}  // namespace stoke::cuda
