// Comparison and selection kernels (see compare.h): grid-stride loops over the broadcast output,
// each thread turning its linear position into operand offsets (StridedOffsets::get). The
// comparison is a template argument, so each instantiation is one straight compare.
#include "cuda/kernels/elementwise_compare.h"

#include <type_traits>

#include "cuda/kernels/dispatch.h"

namespace stoke::cuda {
namespace {

constexpr int kCompareThreads = 256;

// The value a comparison sees: half types as f32 (exact), everything else as itself.
template <class T>
__host__ __device__ __forceinline__ auto comparable(T v) {
  if constexpr (std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>)
    return ew::to_float(v);
  else
    return v;
}

template <CompareOp Op, class A, class B>
__host__ __device__ __forceinline__ bool apply(A a, B b) {
  if constexpr (Op == CompareOp::eq) return a == b;
  if constexpr (Op == CompareOp::ne) return a != b;
  if constexpr (Op == CompareOp::lt) return a < b;
  if constexpr (Op == CompareOp::le) return a <= b;
  if constexpr (Op == CompareOp::gt) return a > b;
  return a >= b;
}

template <class T, CompareOp Op>
__global__ void __launch_bounds__(kCompareThreads)
    compare_kernel(const T* a, const T* b, bool* out, StridedOffsets<3> offsets, int64_t n) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    int64_t off[3];
    offsets.get(i, off);
    out[off[0]] = apply<Op>(comparable(a[off[1]]), comparable(b[off[2]]));
  }
}

template <class T, CompareOp Op>
__global__ void __launch_bounds__(kCompareThreads)
    compare_scalar_kernel(const T* x, double s, bool* out, int64_t n) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    out[i] = apply<Op>(static_cast<double>(comparable(x[i])), s);
}

template <class E>
__global__ void __launch_bounds__(kCompareThreads)
    where_kernel(const bool* cond, const E* a, const E* b, E* out, StridedOffsets<4> offsets,
                 int64_t n) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    int64_t off[4];
    offsets.get(i, off);
    out[off[0]] = cond[off[1]] ? a[off[2]] : b[off[3]];
  }
}

template <class E>
__global__ void __launch_bounds__(kCompareThreads)
    select_or_zero_kernel(const bool* cond, bool keep, const E* value, E* out,
                          StridedOffsets<3> offsets, int64_t n) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    int64_t off[3];
    offsets.get(i, off);
    out[off[0]] = cond[off[2]] == keep ? value[off[1]] : E(0);
  }
}

template <class Fn>
void dispatch_op(CompareOp op, Fn&& fn) {
  switch (op) {
    case CompareOp::eq:
      return fn(std::integral_constant<CompareOp, CompareOp::eq>{});
    case CompareOp::ne:
      return fn(std::integral_constant<CompareOp, CompareOp::ne>{});
    case CompareOp::lt:
      return fn(std::integral_constant<CompareOp, CompareOp::lt>{});
    case CompareOp::le:
      return fn(std::integral_constant<CompareOp, CompareOp::le>{});
    case CompareOp::gt:
      return fn(std::integral_constant<CompareOp, CompareOp::gt>{});
    case CompareOp::ge:
      return fn(std::integral_constant<CompareOp, CompareOp::ge>{});
  }
}

}  // namespace

void compare(CompareOp op, DType dtype, const void* a, const void* b, bool* out,
             const StridedOffsets<3>& offsets, int64_t n, cudaStream_t stream) {
  STOKE_NVTX_RANGE("stoke::cuda::compare");
  if (n == 0) return;
  ew::dispatch_all(dtype, "cuda::compare", [&](auto tag) {
    using T = decltype(tag);
    dispatch_op(op, [&](auto o) {
      auto* k = &compare_kernel<T, decltype(o)::value>;
      STOKE_LAUNCH(k, ew::grid_for(n, kCompareThreads), kCompareThreads, 0, stream)
      (static_cast<const T*>(a), static_cast<const T*>(b), out, offsets, n);
    });
  });
  STOKE_CUDA_CHECK(cudaGetLastError());
}

void compare_scalar(CompareOp op, DType dtype, const void* x, double s, bool* out, int64_t n,
                    cudaStream_t stream) {
  STOKE_NVTX_RANGE("stoke::cuda::compare_scalar");
  if (n == 0) return;
  ew::dispatch_all(dtype, "cuda::compare", [&](auto tag) {
    using T = decltype(tag);
    dispatch_op(op, [&](auto o) {
      auto* k = &compare_scalar_kernel<T, decltype(o)::value>;
      STOKE_LAUNCH(k, ew::grid_for(n, kCompareThreads), kCompareThreads, 0, stream)
      (static_cast<const T*>(x), s, out, n);
    });
  });
  STOKE_CUDA_CHECK(cudaGetLastError());
}

void where(const bool* cond, const void* a, const void* b, void* out, size_t element_size,
           const StridedOffsets<4>& offsets, int64_t n, cudaStream_t stream) {
  STOKE_NVTX_RANGE("stoke::cuda::where");
  if (n == 0) return;
  dispatch_size(element_size, "cuda::where", [&](auto tag) {
    using E = decltype(tag);
    auto* k = &where_kernel<E>;
    STOKE_LAUNCH(k, ew::grid_for(n, kCompareThreads), kCompareThreads, 0, stream)
    (cond, static_cast<const E*>(a), static_cast<const E*>(b), static_cast<E*>(out), offsets, n);
  });
  STOKE_CUDA_CHECK(cudaGetLastError());
}

void select_or_zero(const bool* cond, bool keep, const void* value, void* out, size_t element_size,
                    const StridedOffsets<3>& offsets, int64_t n, cudaStream_t stream) {
  STOKE_NVTX_RANGE("stoke::cuda::select_or_zero");
  if (n == 0) return;
  dispatch_size(element_size, "cuda::select_or_zero", [&](auto tag) {
    using E = decltype(tag);
    auto* k = &select_or_zero_kernel<E>;
    STOKE_LAUNCH(k, ew::grid_for(n, kCompareThreads), kCompareThreads, 0, stream)
    (cond, keep, static_cast<const E*>(value), static_cast<E*>(out), offsets, n);
  });
  STOKE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace stoke::cuda
