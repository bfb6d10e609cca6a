// CUDA cast kernels (see cast.h): one instantiation per (source, destination) storage type.
#include "cuda/kernels/creation.h"

#include <type_traits>

namespace stoke::cuda {
namespace {

template <class T>
constexpr bool kReduced = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;

// core/tensor.cpp's convert<D>(S), on the device: half types through float, bool as != 0.
template <class D, class S>
__host__ __device__ __forceinline__ D convert(S s) {
  if constexpr (std::is_same_v<D, S>) {
    return s;
  } else if constexpr (kReduced<S>) {
    return convert<D>(ew::to_float(s));
  } else if constexpr (std::is_same_v<D, bool>) {
    return s != S(0);
  } else if constexpr (kReduced<D>) {
    return ew::from_float<D>(static_cast<float>(s));
  } else {
    return static_cast<D>(s);
  }
}

using ew::Quad;

// Contiguous: with vec, quads of 4 elements move as one access each; then a scalar tail.
template <class S, class D>
__global__ void __launch_bounds__(256) cast_kernel(const S* src, D* dst, int64_t n, bool vec) {
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t tail = 0;
  if (vec) {
    const int64_t quads = n / 4;
    for (int64_t q = tid; q < quads; q += step) {
      const Quad<S> a = reinterpret_cast<const Quad<S>*>(src)[q];
      Quad<D> b;
      STOKE_UNROLL
      for (int k = 0; k < 4; ++k) b.v[k] = convert<D>(a.v[k]);
      reinterpret_cast<Quad<D>*>(dst)[q] = b;
    }
    tail = quads * 4;
  }
  for (int64_t i = tail + tid; i < n; i += step) dst[i] = convert<D>(src[i]);
}

template <class S, class D>
__global__ void __launch_bounds__(256)
    cast_strided_kernel(const S* src, D* dst, CastOffsets offsets, int64_t n) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    int64_t off[2];
    offsets.get(i, off);
    dst[off[0]] = convert<D>(src[off[1]]);
  }
}

template <class D>
__global__ void __launch_bounds__(256)
    fill_kernel(D* dst, FillOffsets offsets, int64_t n, D value, bool contiguous) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    if (contiguous) {
      dst[i] = value;
    } else {
      int64_t off[1];
      offsets.get(i, off);
      dst[off[0]] = value;
    }
  }
}

}  // namespace

CastOffsets make_cast_offsets(const int64_t* shape, int ndim, const int64_t* dst_strides,
                              const int64_t* src_strides) {
  const int64_t* const strides[2] = {dst_strides, src_strides};
  return make_strided_offsets<2>("cuda::cast", shape, ndim, strides);
}

FillOffsets make_fill_offsets(const int64_t* shape, int ndim, const int64_t* strides) {
  const int64_t* const all[1] = {strides};
  return make_strided_offsets<1>("cuda::fill", shape, ndim, all);
}

void fill(DType dtype, void* dst, const FillOffsets& offsets, int64_t numel, double value,
          cudaStream_t stream) {
  STOKE_NVTX_RANGE("stoke::cuda::fill");
  STOKE_CHECK(numel >= 0, "cuda::fill", "expected numel >= 0, got ", numel);
  if (numel == 0) return;
  ew::dispatch_all(dtype, "cuda::fill", [&](auto d) {
    using D = decltype(d);
    auto* k = &fill_kernel<D>;
    STOKE_LAUNCH(k, ew::grid_for(numel, 256), 256, 0, stream)
    (static_cast<D*>(dst), offsets, numel, convert<D>(value), offsets.contiguous());
    STOKE_CUDA_CHECK(cudaGetLastError());
  });
}

void cast(DType src_dtype, const void* src, DType dst_dtype, void* dst, int64_t n,
          cudaStream_t stream) {
  STOKE_NVTX_RANGE("stoke::cuda::cast");
  STOKE_CHECK(n >= 0, "cuda::cast", "expected n >= 0, got ", n);
  if (n == 0) return;
  ew::dispatch_all(src_dtype, "cuda::cast", [&](auto s) {
    ew::dispatch_all(dst_dtype, "cuda::cast", [&](auto d) {
      using S = decltype(s);
      using D = decltype(d);
      const bool vec = ew::aligned(src, 4 * sizeof(S)) && ew::aligned(dst, 4 * sizeof(D));
      auto* k = &cast_kernel<S, D>;
      STOKE_LAUNCH(k, ew::grid_for(vec ? n / 4 + n % 4 : n, 256), 256, 0, stream)
      (static_cast<const S*>(src), static_cast<D*>(dst), n, vec);
      STOKE_CUDA_CHECK(cudaGetLastError());
    });
  });
}

void cast_strided(DType src_dtype, const void* src, DType dst_dtype, void* dst,
                  const CastOffsets& offsets, int64_t numel, cudaStream_t stream) {
  if (offsets.contiguous()) return cast(src_dtype, src, dst_dtype, dst, numel, stream);
  STOKE_NVTX_RANGE("stoke::cuda::cast_strided");
  STOKE_CHECK(numel >= 0, "cuda::cast_strided", "expected numel >= 0, got ", numel);
  if (numel == 0) return;
  ew::dispatch_all(src_dtype, "cuda::cast", [&](auto s) {
    ew::dispatch_all(dst_dtype, "cuda::cast", [&](auto d) {
      using S = decltype(s);
      using D = decltype(d);
      auto* k = &cast_strided_kernel<S, D>;
      STOKE_LAUNCH(k, ew::grid_for(numel, 256), 256, 0, stream)
      (static_cast<const S*>(src), static_cast<D*>(dst), offsets, numel);
      STOKE_CUDA_CHECK(cudaGetLastError());
    });
  });
}

}  // namespace stoke::cuda
