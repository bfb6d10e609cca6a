// Integer kernels (see integer.h): grid-stride loops in the operands' own type; the op is a
// template argument. Unsigned arithmetic for the add/sub/mul themselves, so that overflow wraps
// (defined behaviour) exactly as the CPU's results do.
#include "cuda/kernels/elementwise_integer.h"

#include <type_traits>

#include "cuda/kernels/dispatch.h"

namespace stoke::cuda {
namespace {

constexpr int kIntegerThreads = 256;

template <BinaryOp Op, class T>
__host__ __device__ __forceinline__ T apply(T a, T b) {
  using U = std::make_unsigned_t<T>;
  if constexpr (Op == BinaryOp::add) return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
  if constexpr (Op == BinaryOp::sub) return static_cast<T>(static_cast<U>(a) - static_cast<U>(b));
  if constexpr (Op == BinaryOp::mul) return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
  if constexpr (Op == BinaryOp::maximum) return a > b ? a : b;
  return a < b ? a : b;
}

template <class T, BinaryOp Op>
__global__ void __launch_bounds__(kIntegerThreads)
    int_binary_kernel(const T* a, const T* b, T* out, BinaryOffsets offsets, int64_t n, T alpha) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    int64_t off[3];
    offsets.get(i, off);
    const T rhs = (Op == BinaryOp::add || Op == BinaryOp::sub)
                      ? apply<BinaryOp::mul>(alpha, b[off[2]])
                      : b[off[2]];
    out[off[0]] = apply<Op>(a[off[1]], rhs);
  }
}

template <class T, BinaryOp Op>
__global__ void __launch_bounds__(kIntegerThreads)
    int_binary_scalar_kernel(const T* x, T s, T* out, int64_t n, bool scalar_first) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    out[i] = scalar_first ? apply<Op>(s, x[i]) : apply<Op>(x[i], s);
}

template <class T>
__global__ void __launch_bounds__(kIntegerThreads)
    int_sum_kernel(const T* x, int64_t* out, int64_t n, int64_t inner) {
  __shared__ int64_t partial[kIntegerThreads];
  const int64_t o = blockIdx.x;  // output index: outer * inner + k
  const int64_t outer_i = o / inner, k = o % inner;
  const T* base = x + outer_i * n * inner + k;
  uint64_t acc = 0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
    acc += static_cast<uint64_t>(static_cast<int64_t>(base[j * inner]));
  partial[threadIdx.x] = static_cast<int64_t>(acc);
  __syncthreads();
  for (int width = kIntegerThreads / 2; width > 0; width /= 2) {
    if (static_cast<int>(threadIdx.x) < width)
      partial[threadIdx.x] =
          static_cast<int64_t>(static_cast<uint64_t>(partial[threadIdx.x]) +
                               static_cast<uint64_t>(partial[threadIdx.x + width]));
    __syncthreads();
  }
  if (threadIdx.x == 0) out[o] = partial[0];
}

template <class Fn>
void dispatch_op(BinaryOp op, const char* name, Fn&& fn) {
  switch (op) {
    case BinaryOp::add:
      return fn(std::integral_constant<BinaryOp, BinaryOp::add>{});
    case BinaryOp::sub:
      return fn(std::integral_constant<BinaryOp, BinaryOp::sub>{});
    case BinaryOp::mul:
      return fn(std::integral_constant<BinaryOp, BinaryOp::mul>{});
    case BinaryOp::maximum:
      return fn(std::integral_constant<BinaryOp, BinaryOp::maximum>{});
    case BinaryOp::minimum:
      return fn(std::integral_constant<BinaryOp, BinaryOp::minimum>{});
    case BinaryOp::div:
      break;
  }
  STOKE_FAIL(name, "div is not an integer op (cast to a floating dtype first)");
}

}  // namespace

void int_binary(BinaryOp op, DType dtype, const void* a, const void* b, void* out,
                const BinaryOffsets& offsets, int64_t n, int64_t alpha, cudaStream_t stream) {
  STOKE_NVTX_RANGE("stoke::cuda::int_binary");
  const char* name = "cuda::int_binary";
  dispatch_int(dtype, name, [&](auto tag) {
    using T = decltype(tag);
    dispatch_op(op, name, [&](auto o) {
      if (n == 0) return;
      auto* k = &int_binary_kernel<T, decltype(o)::value>;
      STOKE_LAUNCH(k, ew::grid_for(n, kIntegerThreads), kIntegerThreads, 0, stream)
      (static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(out), offsets, n,
       static_cast<T>(alpha));
      STOKE_CUDA_CHECK(cudaGetLastError());
    });
  });
}

void int_binary_scalar(BinaryOp op, DType dtype, const void* x, int64_t s, void* out, int64_t n,
                       bool scalar_first, cudaStream_t stream) {
  STOKE_NVTX_RANGE("stoke::cuda::int_binary_scalar");
  const char* name = "cuda::int_binary_scalar";
  dispatch_int(dtype, name, [&](auto tag) {
    using T = decltype(tag);
    dispatch_op(op, name, [&](auto o) {
      if (n == 0) return;
      auto* k = &int_binary_scalar_kernel<T, decltype(o)::value>;
      STOKE_LAUNCH(k, ew::grid_for(n, kIntegerThreads), kIntegerThreads, 0, stream)
      (static_cast<const T*>(x), static_cast<T>(s), static_cast<T*>(out), n, scalar_first);
      STOKE_CUDA_CHECK(cudaGetLastError());
    });
  });
}

void int_sum(DType dtype, const void* x, int64_t* out, int64_t outer, int64_t n, int64_t inner,
             cudaStream_t stream) {
  STOKE_NVTX_RANGE("stoke::cuda::int_sum");
  const char* name = "cuda::int_sum";
  STOKE_CHECK(outer >= 0 && n >= 0 && inner >= 0, name, "expected non-negative sizes, got ", outer,
              ", ", n, ", ", inner);
  const int64_t outputs = outer * inner;
  if (outputs == 0) return;
  STOKE_CHECK(outputs <= 0x7fffffff, name, "expected at most 2^31 - 1 outputs, got ", outputs);
  auto run = [&](auto tag) {
    using T = decltype(tag);
    auto* k = &int_sum_kernel<T>;
    STOKE_LAUNCH(k, static_cast<unsigned>(outputs), kIntegerThreads, 0, stream)
    (static_cast<const T*>(x), out, n, inner);
    STOKE_CUDA_CHECK(cudaGetLastError());
  };
  if (dtype == DType::boolean)
    run(uint8_t{});  // bool is one byte 0/1
  else
    dispatch_int(dtype, name, run);
}

}  // namespace stoke::cuda
