// CUDA index kernels (see index.h). Forward kernels move raw elements (one instantiation per
// element size); backward kernels scatter with atomicAdd, one thread per gradient element.
#include "cuda/kernels/index.h"

#include "cuda/kernels/dispatch.h"

namespace stoke::cuda {
namespace {

constexpr int kIndexThreads = 256;

// p[0, n) = value. Used instead of cudaMemsetAsync so that the launchers work on any memory the
// kernels can reach (emu's runtime only memsets its own allocations) and set non-byte patterns.
template <class E>
__global__ void __launch_bounds__(kIndexThreads) index_fill_kernel(E* p, int64_t n, E value) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    p[i] = value;
}

// dst [outer, total_cols] columns [col0, col0 + cols) = src [outer, cols].
template <class E>
__global__ void __launch_bounds__(kIndexThreads)
    cat_copy_kernel(const E* src, E* dst, int64_t outer, int64_t cols, int64_t total_cols,
                    int64_t col0) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < outer * cols;
       i += step) {
    const int64_t o = i / cols, c = i % cols;
    dst[o * total_cols + col0 + c] = src[i];
  }
}

// out [outer, k, inner] = x [outer, n, inner] at index along the middle dim; 0 if out of range.
template <class E>
__global__ void __launch_bounds__(kIndexThreads)
    index_select_kernel(const E* x, const int64_t* index, E* out, int64_t outer, int64_t n,
                        int64_t k, int64_t inner) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < outer * k * inner; i += step) {
    const int64_t o = i / (k * inner), j = (i / inner) % k, c = i % inner;
    const int64_t src = index[j];
    out[i] = (src >= 0 && src < n) ? x[(o * n + src) * inner + c] : E(0);
  }
}

// grad_in [outer, n, inner] += grad [outer, k, inner] at index (atomically: indices repeat).
template <class T>
__global__ void __launch_bounds__(kIndexThreads)
    index_add_kernel(const T* grad, const int64_t* index, T* grad_in, int64_t outer, int64_t n,
                     int64_t k, int64_t inner) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < outer * k * inner; i += step) {
    const int64_t o = i / (k * inner), j = (i / inner) % k, c = i % inner;
    const int64_t dst = index[j];
    if (dst >= 0 && dst < n) atomicAdd(grad_in + (o * n + dst) * inner + c, grad[i]);
  }
}

// Offset in x of gather output element i (index's shape), or -1 for an out-of-range index.
__host__ __device__ __forceinline__ int64_t gather_offset(const GatherShape& s,
                                                          const int64_t* index, int64_t i) {
  int64_t rest = i, off = 0;
  for (int d = s.ndim - 1; d >= 0; --d) {
    const int64_t c = rest % s.index_size[d];
    rest /= s.index_size[d];
    if (d != s.dim) off += c * s.x_stride[d];
  }
  const int64_t v = index[i];
  return (v >= 0 && v < s.x_dim_size) ? off + v * s.x_stride[s.dim] : -1;
}

template <class E>
__global__ void __launch_bounds__(kIndexThreads)
    gather_kernel(const E* x, const int64_t* index, E* out, GatherShape shape, int64_t numel) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < numel;
       i += step) {
    const int64_t off = gather_offset(shape, index, i);
    out[i] = off >= 0 ? x[off] : E(0);
  }
}

template <class T>
__global__ void __launch_bounds__(kIndexThreads)
    gather_backward_kernel(const T* grad, const int64_t* index, T* grad_in, GatherShape shape,
                           int64_t numel) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < numel;
       i += step) {
    const int64_t off = gather_offset(shape, index, i);
    if (off >= 0) atomicAdd(grad_in + off, grad[i]);
  }
}

__global__ void __launch_bounds__(kIndexThreads)
    check_indices_kernel(const int64_t* index, int64_t n, int64_t bound, int32_t* first_bad) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t limit = n < kNoBadIndex - 1 ? n : kNoBadIndex - 1;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < limit;
       i += step)
    if (index[i] < 0 || index[i] >= bound) atomicMin(first_bad, static_cast<int32_t>(i));
}

template <class E>
void fill(E* p, int64_t n, E value, cudaStream_t stream) {
  if (n <= 0) return;
  auto* k = &index_fill_kernel<E>;
  STOKE_LAUNCH(k, ew::grid_for(n, kIndexThreads), kIndexThreads, 0, stream)(p, n, value);
  STOKE_CUDA_CHECK(cudaGetLastError());
}

void check_geometry(const char* op, int64_t outer, int64_t n, int64_t k, int64_t inner) {
  STOKE_CHECK(outer >= 0 && n >= 0 && k >= 0 && inner >= 0, op,
              "expected non-negative sizes (outer, n, k, inner), got (", outer, ", ", n, ", ", k,
              ", ", inner, ")");
}

template <class T>
void launch_index_add(const void* grad, const int64_t* index, void* grad_in, int64_t outer,
                      int64_t n, int64_t k, int64_t inner, cudaStream_t stream) {
  fill(static_cast<T*>(grad_in), outer * n * inner, ew::from_float<T>(0.f), stream);
  if (outer * k * inner == 0) return;
  auto* kern = &index_add_kernel<T>;
  STOKE_LAUNCH(kern, ew::grid_for(outer * k * inner, kIndexThreads), kIndexThreads, 0, stream)
  (static_cast<const T*>(grad), index, static_cast<T*>(grad_in), outer, n, k, inner);
  STOKE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void cat(size_t elem_size, int count, const void* const* srcs, const int64_t* sizes, int64_t outer,
         int64_t inner, void* dst, cudaStream_t stream) {
  STOKE_NVTX_RANGE("stoke::cuda::cat");
  const char* op = "cuda::cat";
  STOKE_CHECK(count >= 0 && outer >= 0 && inner >= 0, op,
              "expected non-negative count, outer and inner, got ", count, ", ", outer, ", ",
              inner);
  int64_t total = 0;
  for (int i = 0; i < count; ++i) {
    STOKE_CHECK(sizes[i] >= 0, op, "expected non-negative sizes, got ", sizes[i], " for input ", i);
    total += sizes[i];
  }
  dispatch_size(elem_size, op, [&](auto tag) {
    using E = decltype(tag);
    int64_t col0 = 0;
    for (int i = 0; i < count; ++i) {
      const int64_t cols = sizes[i] * inner;
      if (outer * cols > 0) {
        auto* k = &cat_copy_kernel<E>;
        STOKE_LAUNCH(k, ew::grid_for(outer * cols, kIndexThreads), kIndexThreads, 0, stream)
        (static_cast<const E*>(srcs[i]), static_cast<E*>(dst), outer, cols, total * inner, col0);
        STOKE_CUDA_CHECK(cudaGetLastError());
      }
      col0 += cols;
    }
  });
}

void index_select(size_t elem_size, const void* x, const int64_t* index, void* out, int64_t outer,
                  int64_t n, int64_t k, int64_t inner, cudaStream_t stream) {
  STOKE_NVTX_RANGE("stoke::cuda::index_select");
  const char* op = "cuda::index_select";
  check_geometry(op, outer, n, k, inner);
  if (outer * k * inner == 0) return;
  dispatch_size(elem_size, op, [&](auto tag) {
    using E = decltype(tag);
    auto* kern = &index_select_kernel<E>;
    STOKE_LAUNCH(kern, ew::grid_for(outer * k * inner, kIndexThreads), kIndexThreads, 0, stream)
    (static_cast<const E*>(x), index, static_cast<E*>(out), outer, n, k, inner);
    STOKE_CUDA_CHECK(cudaGetLastError());
  });
}

void index_select_backward(DType dtype, const void* grad, const int64_t* index, void* grad_in,
                           int64_t outer, int64_t n, int64_t k, int64_t inner,
                           cudaStream_t stream) {
  STOKE_NVTX_RANGE("stoke::cuda::index_select_backward");
  const char* op = "cuda::index_select_backward";
  check_geometry(op, outer, n, k, inner);
  ew::dispatch_floating(dtype, op, [&](auto tag) {
    launch_index_add<decltype(tag)>(grad, index, grad_in, outer, n, k, inner, stream);
  });
}

void embedding(size_t elem_size, const void* weight, const int64_t* indices, void* out,
               int64_t count, int64_t num_weights, int64_t dim, cudaStream_t stream) {
  STOKE_NVTX_RANGE("stoke::cuda::embedding");
  index_select(elem_size, weight, indices, out, 1, num_weights, count, dim, stream);
}

void embedding_backward(DType dtype, const void* grad, const int64_t* indices, void* grad_weight,
                        int64_t count, int64_t num_weights, int64_t dim, cudaStream_t stream) {
  STOKE_NVTX_RANGE("stoke::cuda::embedding_backward");
  index_select_backward(dtype, grad, indices, grad_weight, 1, num_weights, count, dim, stream);
}

GatherShape make_gather_shape(const int64_t* x_shape, const int64_t* index_shape, int ndim,
                              int64_t dim) {
  const char* op = "cuda::gather";
  STOKE_CHECK(ndim >= 1 && ndim <= kMaxDims, op, "expected 1 to ", kMaxDims, " dims, got ", ndim);
  STOKE_CHECK(dim >= 0 && dim < ndim, op, "expected dim in [0, ", ndim, "), got ", dim);
  GatherShape s;
  s.ndim = ndim;
  s.dim = static_cast<int32_t>(dim);
  int64_t stride = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    STOKE_CHECK(d == dim || index_shape[d] <= x_shape[d], op, "expected index.size(", d,
                ") <= input.size(", d, ") = ", x_shape[d], ", got ", index_shape[d]);
    s.index_size[d] = index_shape[d];
    s.x_stride[d] = stride;
    stride *= x_shape[d];
  }
  s.x_dim_size = x_shape[dim];
  return s;
}

void gather(size_t elem_size, const void* x, const int64_t* index, void* out,
            const GatherShape& shape, int64_t numel, cudaStream_t stream) {
  STOKE_NVTX_RANGE("stoke::cuda::gather");
  const char* op = "cuda::gather";
  if (numel <= 0) return;
  dispatch_size(elem_size, op, [&](auto tag) {
    using E = decltype(tag);
    auto* kern = &gather_kernel<E>;
    STOKE_LAUNCH(kern, ew::grid_for(numel, kIndexThreads), kIndexThreads, 0, stream)
    (static_cast<const E*>(x), index, static_cast<E*>(out), shape, numel);
    STOKE_CUDA_CHECK(cudaGetLastError());
  });
}

void gather_backward(DType dtype, const void* grad, const int64_t* index, void* grad_in,
                     const GatherShape& shape, int64_t numel, int64_t x_numel,
                     cudaStream_t stream) {
  STOKE_NVTX_RANGE("stoke::cuda::gather_backward");
  const char* op = "cuda::gather_backward";
  ew::dispatch_floating(dtype, op, [&](auto tag) {
    using T = decltype(tag);
    fill(static_cast<T*>(grad_in), x_numel, ew::from_float<T>(0.f), stream);
    if (numel <= 0) return;
    auto* kern = &gather_backward_kernel<T>;
    STOKE_LAUNCH(kern, ew::grid_for(numel, kIndexThreads), kIndexThreads, 0, stream)
    (static_cast<const T*>(grad), index, static_cast<T*>(grad_in), shape, numel);
    STOKE_CUDA_CHECK(cudaGetLastError());
  });
}

void check_indices(const int64_t* index, int64_t n, int64_t bound, int32_t* first_bad,
                   cudaStream_t stream) {
  STOKE_NVTX_RANGE("stoke::cuda::check_indices");
  fill(first_bad, 1, kNoBadIndex, stream);
  if (n <= 0) return;
  auto* kern = &check_indices_kernel;
  STOKE_LAUNCH(kern, ew::grid_for(n, kIndexThreads), kIndexThreads, 0, stream)
  (index, n, bound, first_bad);
  STOKE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace stoke::cuda
