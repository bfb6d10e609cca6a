// CUDA elementwise kernels (see elementwise.h). Three kernels serve every op: a contiguous unary
// map, a contiguous binary map (both with a 128-bit path taken when every pointer is 16-byte
// aligned, and a scalar tail), and a strided binary map for broadcasting; a strided ternary map
// serves the three-operand backward kernels. The op is a functor template argument, so each
// instantiation is a straight-line f32 loop body.
#include "cuda/kernels/elementwise.h"

#include <cmath>

namespace stoke::cuda {
namespace {

using ew::from_float;
using ew::Pack;
using ew::to_float;

constexpr int kEwThreads = 256;

// out[i] = f(x[i]). With vec, the first n / Pack::kN packs move as 128-bit words.
template <class T, class F>
__global__ void __launch_bounds__(kEwThreads)
    ew_unary_kernel(const T* x, T* out, int64_t n, F f, bool vec) {
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t tail = 0;
  if (vec) {
    constexpr int kN = Pack<T>::kN;
    const int64_t packs = n / kN;
    for (int64_t p = tid; p < packs; p += step) {
      Pack<T> v = reinterpret_cast<const Pack<T>*>(x)[p];
      STOKE_UNROLL
      for (int k = 0; k < kN; ++k) v.v[k] = from_float<T>(f(to_float(v.v[k])));
      reinterpret_cast<Pack<T>*>(out)[p] = v;
    }
    tail = packs * kN;
  }
  for (int64_t i = tail + tid; i < n; i += step) out[i] = from_float<T>(f(to_float(x[i])));
}

// out[i] = f(a[i], b[i]) for contiguous operands; vec as in ew_unary_kernel.
template <class T, class F>
__global__ void __launch_bounds__(kEwThreads)
    ew_binary_kernel(const T* a, const T* b, T* out, int64_t n, F f, bool vec) {
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t tail = 0;
  if (vec) {
    constexpr int kN = Pack<T>::kN;
    const int64_t packs = n / kN;
    for (int64_t p = tid; p < packs; p += step) {
      const Pack<T> u = reinterpret_cast<const Pack<T>*>(a)[p];
      Pack<T> v = reinterpret_cast<const Pack<T>*>(b)[p];
      STOKE_UNROLL
      for (int k = 0; k < kN; ++k) v.v[k] = from_float<T>(f(to_float(u.v[k]), to_float(v.v[k])));
      reinterpret_cast<Pack<T>*>(out)[p] = v;
    }
    tail = packs * kN;
  }
  for (int64_t i = tail + tid; i < n; i += step)
    out[i] = from_float<T>(f(to_float(a[i]), to_float(b[i])));
}

// out[o0] = f(a[o1], b[o2]) with the offsets of a broadcast (or any strided) iteration space.
template <class T, class F>
__global__ void __launch_bounds__(kEwThreads)
    ew_binary_strided_kernel(const T* a, const T* b, T* out, BinaryOffsets offsets, int64_t n,
                             F f) {
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = tid; i < n; i += step) {
    int64_t off[3];
    offsets.get(i, off);
    out[off[0]] = from_float<T>(f(to_float(a[off[1]]), to_float(b[off[2]])));
  }
}

// --- functors (f32 math) ------------------------------------------------------------------------

constexpr float kSqrt1_2 = 0.70710678118654752440f;
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;
constexpr float kSqrt2OverPi = 0.79788456080286535588f;
constexpr float kGeluCoeff = 0.044715f;

struct AddF {
  float alpha;
  __host__ __device__ float operator()(float a, float b) const { return a + alpha * b; }
};
struct SubF {
  float alpha;
  __host__ __device__ float operator()(float a, float b) const { return a - alpha * b; }
};
struct MulF {
  __host__ __device__ float operator()(float a, float b) const { return a * b; }
};
struct DivF {
  __host__ __device__ float operator()(float a, float b) const { return a / b; }
};
// NaN in either operand propagates, like torch.maximum.
struct MaxF {
  __host__ __device__ float operator()(float a, float b) const { return (a > b || a != a) ? a : b; }
};
struct MinF {
  __host__ __device__ float operator()(float a, float b) const { return (a < b || a != a) ? a : b; }
};

// A binary functor with one operand fixed to a scalar (uniform branch on `first`).
template <class F>
struct ScalarF {
  F f;
  float s;
  bool first;
  __host__ __device__ float operator()(float x) const { return first ? f(s, x) : f(x, s); }
};

__host__ __device__ __forceinline__ float sign_of(float v) {
  return static_cast<float>((0.f < v) - (v < 0.f));
}

// Standard normal CDF through erfc, accurate in the left tail (1 + erf would cancel there).
__host__ __device__ __forceinline__ float normal_cdf(float x) {
  return 0.5f * erfcf(-x * kSqrt1_2);
}

template <UnaryOp Op>
struct UnaryF {
  UnaryParams p;
  __host__ __device__ float operator()(float x) const {
    if constexpr (Op == UnaryOp::neg) return -x;
    if constexpr (Op == UnaryOp::exp) return expf(x);
    if constexpr (Op == UnaryOp::log) return logf(x);
    if constexpr (Op == UnaryOp::sqrt) return sqrtf(x);
    if constexpr (Op == UnaryOp::rsqrt) return 1.f / sqrtf(x);
    if constexpr (Op == UnaryOp::abs) return fabsf(x);
    if constexpr (Op == UnaryOp::relu) return x < 0.f ? 0.f : x;  // keeps NaN, like torch
    if constexpr (Op == UnaryOp::leaky_relu) return x > 0.f ? x : x * p.negative_slope;
    if constexpr (Op == UnaryOp::sigmoid) return 1.f / (1.f + expf(-x));
    if constexpr (Op == UnaryOp::tanh) return tanhf(x);
    if constexpr (Op == UnaryOp::gelu) return x * normal_cdf(x);
    if constexpr (Op == UnaryOp::gelu_tanh)
      return 0.5f * x * (1.f + tanhf(kSqrt2OverPi * (x + kGeluCoeff * x * x * x)));
    if constexpr (Op == UnaryOp::clamp) {
      const float m = x < p.min ? p.min : x;  // NaN passes, like torch.clamp
      return m > p.max ? p.max : m;
    }
    if constexpr (Op == UnaryOp::sign) return sign_of(x);
    if constexpr (Op == UnaryOp::silu) return x / (1.f + expf(-x));
    if constexpr (Op == UnaryOp::hardswish) {
      const float r = x + 3.f < 0.f ? 0.f : x + 3.f;
      return x * (r > 6.f ? 6.f : r) / 6.f;
    }
    return x;
  }
};

template <UnaryBackwardOp Op>
struct BackwardF {
  UnaryParams p;
  __host__ __device__ float operator()(float g, float v) const {
    if constexpr (Op == UnaryBackwardOp::relu) return v > 0.f ? g : 0.f;
    if constexpr (Op == UnaryBackwardOp::leaky_relu) return v > 0.f ? g : g * p.negative_slope;
    if constexpr (Op == UnaryBackwardOp::sigmoid) return g * v * (1.f - v);
    if constexpr (Op == UnaryBackwardOp::tanh) return g * (1.f - v * v);
    if constexpr (Op == UnaryBackwardOp::gelu) {
      const float pdf = kInvSqrt2Pi * expf(-0.5f * v * v);
      return g * (normal_cdf(v) + v * pdf);
    }
    if constexpr (Op == UnaryBackwardOp::gelu_tanh) {
      const float v2 = v * v;
      const float t = tanhf(kSqrt2OverPi * (v + kGeluCoeff * v2 * v));
      const float dinner = kSqrt2OverPi * (1.f + 3.f * kGeluCoeff * v2);
      return g * (0.5f * (1.f + t) + 0.5f * v * (1.f - t * t) * dinner);
    }
    if constexpr (Op == UnaryBackwardOp::clamp) return (v >= p.min && v <= p.max) ? g : 0.f;
    if constexpr (Op == UnaryBackwardOp::abs) return g * sign_of(v);
    if constexpr (Op == UnaryBackwardOp::sqrt) return g / (v + v);
    if constexpr (Op == UnaryBackwardOp::rsqrt) return -0.5f * g * v * v * v;
    if constexpr (Op == UnaryBackwardOp::silu) {
      const float s = 1.f / (1.f + expf(-v));
      return g * s * (1.f + v * (1.f - s));
    }
    if constexpr (Op == UnaryBackwardOp::hardswish)
      return v < -3.f ? 0.f : v < 3.f ? g * (v / 3.f + 0.5f) : g;
    return g;
  }
};

// --- launch helpers -------------------------------------------------------------------------

template <class T, class F>
void launch_unary(const void* x, void* out, int64_t n, F f, cudaStream_t stream) {
  if (n <= 0) return;
  const bool vec = ew::aligned(x, 16) && ew::aligned(out, 16);
  const int64_t work = vec ? n / Pack<T>::kN + n % Pack<T>::kN : n;
  auto* k = &ew_unary_kernel<T, F>;
  STOKE_LAUNCH(k, ew::grid_for(work, kEwThreads), kEwThreads, 0, stream)
  (static_cast<const T*>(x), static_cast<T*>(out), n, f, vec);
  STOKE_CUDA_CHECK(cudaGetLastError());
}

template <class T, class F>
void launch_binary(const void* a, const void* b, void* out, int64_t n, F f, cudaStream_t stream) {
  if (n <= 0) return;
  const bool vec = ew::aligned(a, 16) && ew::aligned(b, 16) && ew::aligned(out, 16);
  const int64_t work = vec ? n / Pack<T>::kN + n % Pack<T>::kN : n;
  auto* k = &ew_binary_kernel<T, F>;
  STOKE_LAUNCH(k, ew::grid_for(work, kEwThreads), kEwThreads, 0, stream)
  (static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(out), n, f, vec);
  STOKE_CUDA_CHECK(cudaGetLastError());
}

template <class T, class F>
void launch_binary_strided(const void* a, const void* b, void* out, const BinaryOffsets& offsets,
                           int64_t n, F f, cudaStream_t stream) {
  if (n <= 0) return;
  auto* k = &ew_binary_strided_kernel<T, F>;
  STOKE_LAUNCH(k, ew::grid_for(n, kEwThreads), kEwThreads, 0, stream)
  (static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(out), offsets, n, f);
  STOKE_CUDA_CHECK(cudaGetLastError());
}

// Calls fn(functor) for a binary op.
template <class Fn>
void with_binary_functor(BinaryOp op, float alpha, Fn&& fn) {
  switch (op) {
    case BinaryOp::add:
      return fn(AddF{alpha});
    case BinaryOp::sub:
      return fn(SubF{alpha});
    case BinaryOp::mul:
      return fn(MulF{});
    case BinaryOp::div:
      return fn(DivF{});
    case BinaryOp::maximum:
      return fn(MaxF{});
    case BinaryOp::minimum:
      return fn(MinF{});
  }
  STOKE_FAIL("cuda::binary", "unknown binary op ", static_cast<int>(op));
}

// Calls fn(functor) for a backward map.
template <class Fn>
void with_backward_functor(UnaryBackwardOp op, const UnaryParams& params, Fn&& fn) {
  switch (op) {
    case UnaryBackwardOp::relu:
      return fn(BackwardF<UnaryBackwardOp::relu>{params});
    case UnaryBackwardOp::leaky_relu:
      return fn(BackwardF<UnaryBackwardOp::leaky_relu>{params});
    case UnaryBackwardOp::sigmoid:
      return fn(BackwardF<UnaryBackwardOp::sigmoid>{params});
    case UnaryBackwardOp::tanh:
      return fn(BackwardF<UnaryBackwardOp::tanh>{params});
    case UnaryBackwardOp::gelu:
      return fn(BackwardF<UnaryBackwardOp::gelu>{params});
    case UnaryBackwardOp::gelu_tanh:
      return fn(BackwardF<UnaryBackwardOp::gelu_tanh>{params});
    case UnaryBackwardOp::clamp:
      return fn(BackwardF<UnaryBackwardOp::clamp>{params});
    case UnaryBackwardOp::abs:
      return fn(BackwardF<UnaryBackwardOp::abs>{params});
    case UnaryBackwardOp::sqrt:
      return fn(BackwardF<UnaryBackwardOp::sqrt>{params});
    case UnaryBackwardOp::rsqrt:
      return fn(BackwardF<UnaryBackwardOp::rsqrt>{params});
    case UnaryBackwardOp::silu:
      return fn(BackwardF<UnaryBackwardOp::silu>{params});
    case UnaryBackwardOp::hardswish:
      return fn(BackwardF<UnaryBackwardOp::hardswish>{params});
  }
  STOKE_FAIL("cuda::unary_backward", "unknown backward op ", static_cast<int>(op));
}

}  // namespace

BinaryOffsets make_binary_offsets(const int64_t* out_shape, int ndim, const int64_t* out_strides,
                                  const int64_t* a_strides, const int64_t* b_strides) {
  const int64_t* const strides[3] = {out_strides, a_strides, b_strides};
  return make_strided_offsets<3>("cuda::binary", out_shape, ndim, strides);
}

void binary(BinaryOp op, DType dtype, const void* a, const void* b, void* out,
            const BinaryOffsets& offsets, int64_t numel, cudaStream_t stream, float alpha) {
  STOKE_NVTX_RANGE("stoke::cuda::binary");
  ew::dispatch_floating(dtype, "cuda::binary", [&](auto tag) {
    using T = decltype(tag);
    with_binary_functor(op, alpha, [&](auto f) {
      if (offsets.contiguous())
        launch_binary<T>(a, b, out, numel, f, stream);
      else
        launch_binary_strided<T>(a, b, out, offsets, numel, f, stream);
    });
  });
}

void binary(BinaryOp op, DType dtype, const void* a, const void* b, void* out, int64_t n,
            cudaStream_t stream, float alpha) {
  STOKE_NVTX_RANGE("stoke::cuda::binary");
  ew::dispatch_floating(dtype, "cuda::binary", [&](auto tag) {
    using T = decltype(tag);
    with_binary_functor(op, alpha, [&](auto f) { launch_binary<T>(a, b, out, n, f, stream); });
  });
}

void binary_scalar(BinaryOp op, DType dtype, const void* x, double s, void* out, int64_t n,
                   cudaStream_t stream, bool scalar_first) {
  STOKE_NVTX_RANGE("stoke::cuda::binary_scalar");
  ew::dispatch_floating(dtype, "cuda::binary_scalar", [&](auto tag) {
    using T = decltype(tag);
    with_binary_functor(op, 1.f, [&](auto f) {
      using F = decltype(f);
      launch_unary<T>(x, out, n, ScalarF<F>{f, static_cast<float>(s), scalar_first}, stream);
    });
  });
}

void unary(UnaryOp op, DType dtype, const void* x, void* out, int64_t n, cudaStream_t stream,
           const UnaryParams& params) {
  STOKE_NVTX_RANGE("stoke::cuda::unary");
  ew::dispatch_floating(dtype, "cuda::unary", [&](auto tag) {
    using T = decltype(tag);
    auto run = [&](auto f) { launch_unary<T>(x, out, n, f, stream); };
    switch (op) {
      case UnaryOp::neg:
        return run(UnaryF<UnaryOp::neg>{params});
      case UnaryOp::exp:
        return run(UnaryF<UnaryOp::exp>{params});
      case UnaryOp::log:
        return run(UnaryF<UnaryOp::log>{params});
      case UnaryOp::sqrt:
        return run(UnaryF<UnaryOp::sqrt>{params});
      case UnaryOp::rsqrt:
        return run(UnaryF<UnaryOp::rsqrt>{params});
      case UnaryOp::abs:
        return run(UnaryF<UnaryOp::abs>{params});
      case UnaryOp::relu:
        return run(UnaryF<UnaryOp::relu>{params});
      case UnaryOp::leaky_relu:
        return run(UnaryF<UnaryOp::leaky_relu>{params});
      case UnaryOp::sigmoid:
        return run(UnaryF<UnaryOp::sigmoid>{params});
      case UnaryOp::tanh:
        return run(UnaryF<UnaryOp::tanh>{params});
      case UnaryOp::gelu:
        return run(UnaryF<UnaryOp::gelu>{params});
      case UnaryOp::gelu_tanh:
        return run(UnaryF<UnaryOp::gelu_tanh>{params});
      case UnaryOp::clamp:
        return run(UnaryF<UnaryOp::clamp>{params});
      case UnaryOp::sign:
        return run(UnaryF<UnaryOp::sign>{params});
      case UnaryOp::silu:
        return run(UnaryF<UnaryOp::silu>{params});
      case UnaryOp::hardswish:
        return run(UnaryF<UnaryOp::hardswish>{params});
    }
    STOKE_FAIL("cuda::unary", "unknown unary op ", static_cast<int>(op));
  });
}

void unary_backward(UnaryBackwardOp op, DType dtype, const void* grad, const void* saved, void* out,
                    int64_t n, cudaStream_t stream, const UnaryParams& params) {
  STOKE_NVTX_RANGE("stoke::cuda::unary_backward");
  ew::dispatch_floating(dtype, "cuda::unary_backward", [&](auto tag) {
    using T = decltype(tag);
    with_backward_functor(op, params,
                          [&](auto f) { launch_binary<T>(grad, saved, out, n, f, stream); });
  });
}

// --- pow, lerp, strided backward maps, ternary backward kernels ---------------------------------

namespace {

// out[o0] = f(a[o1], b[o2], c[o3]) over a broadcast (or any strided) iteration space.
template <class T, class F>
__global__ void __launch_bounds__(kEwThreads)
    ew_ternary_strided_kernel(const T* a, const T* b, const T* c, T* out, TernaryOffsets offsets,
                              int64_t n, F f) {
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = tid; i < n; i += step) {
    int64_t off[4];
    offsets.get(i, off);
    out[off[0]] = from_float<T>(f(to_float(a[off[1]]), to_float(b[off[2]]), to_float(c[off[3]])));
  }
}

// ops::pow's forms: exact products for 2 and 1, sqrt for 0.5, powf otherwise (uniform branch).
struct PowF {
  float e;
  __host__ __device__ float operator()(float x) const {
    if (e == 2.f) return x * x;
    if (e == 1.f) return x;
    if (e == 0.5f) return sqrtf(x);
    return powf(x, e);
  }
};

// ops::pow_backward: g * e * x^(e - 1), with ops::pow_backward's exact cases.
struct PowBackwardF {
  float e, em1;  // exponent and exponent - 1 (rounded from double separately, as on the CPU)
  __host__ __device__ float operator()(float g, float x) const {
    if (e == 0.f) return 0.f;
    if (e == 2.f) return g * (x + x);
    if (e == 1.f) return g;
    return g * e * powf(x, em1);
  }
};

struct LerpF {
  float w;
  __host__ __device__ float operator()(float a, float b) const { return a + w * (b - a); }
};

struct DivOtherBackwardF {
  __host__ __device__ float operator()(float g, float a, float b) const { return -g * a / (b * b); }
};
// Gradient share of a in max/min(a, b): all of g where a wins, half on ties, 0 otherwise (NaN
// operands win nothing).
template <bool Max>
struct MinMaxBackwardF {
  __host__ __device__ float operator()(float g, float a, float b) const {
    const bool wins = Max ? a > b : a < b;
    return wins ? g : (a == b ? g * 0.5f : 0.f);
  }
};

template <class T, class F>
void launch_binary_any(const void* a, const void* b, void* out, const BinaryOffsets& offsets,
                       int64_t n, F f, cudaStream_t stream) {
  if (offsets.contiguous())
    launch_binary<T>(a, b, out, n, f, stream);
  else
    launch_binary_strided<T>(a, b, out, offsets, n, f, stream);
}

}  // namespace

void unary_backward(UnaryBackwardOp op, DType dtype, const void* grad, const void* saved, void* out,
                    const BinaryOffsets& offsets, int64_t n, cudaStream_t stream,
                    const UnaryParams& params) {
  STOKE_NVTX_RANGE("stoke::cuda::unary_backward");
  ew::dispatch_floating(dtype, "cuda::unary_backward", [&](auto tag) {
    using T = decltype(tag);
    with_backward_functor(
        op, params, [&](auto f) { launch_binary_any<T>(grad, saved, out, offsets, n, f, stream); });
  });
}

void pow(DType dtype, const void* x, void* out, int64_t n, double exponent, cudaStream_t stream) {
  STOKE_NVTX_RANGE("stoke::cuda::pow");
  ew::dispatch_floating(dtype, "cuda::pow", [&](auto tag) {
    using T = decltype(tag);
    launch_unary<T>(x, out, n, PowF{static_cast<float>(exponent)}, stream);
  });
}

void pow_backward(DType dtype, const void* grad, const void* x, void* out,
                  const BinaryOffsets& offsets, int64_t n, double exponent, cudaStream_t stream) {
  STOKE_NVTX_RANGE("stoke::cuda::pow_backward");
  ew::dispatch_floating(dtype, "cuda::pow_backward", [&](auto tag) {
    using T = decltype(tag);
    const PowBackwardF f{static_cast<float>(exponent), static_cast<float>(exponent - 1)};
    launch_binary_any<T>(grad, x, out, offsets, n, f, stream);
  });
}

void lerp(DType dtype, const void* a, const void* b, void* out, const BinaryOffsets& offsets,
          int64_t n, float weight, cudaStream_t stream) {
  STOKE_NVTX_RANGE("stoke::cuda::lerp");
  ew::dispatch_floating(dtype, "cuda::lerp", [&](auto tag) {
    using T = decltype(tag);
    launch_binary_any<T>(a, b, out, offsets, n, LerpF{weight}, stream);
  });
}

void ternary_backward(TernaryBackwardOp op, DType dtype, const void* grad, const void* a,
                      const void* b, void* out, const TernaryOffsets& offsets, int64_t n,
                      cudaStream_t stream) {
  STOKE_NVTX_RANGE("stoke::cuda::ternary_backward");
  if (n <= 0) return;
  ew::dispatch_floating(dtype, "cuda::ternary_backward", [&](auto tag) {
    using T = decltype(tag);
    auto run = [&](auto f) {
      auto* k = &ew_ternary_strided_kernel<T, decltype(f)>;
      STOKE_LAUNCH(k, ew::grid_for(n, kEwThreads), kEwThreads, 0, stream)
      (static_cast<const T*>(grad), static_cast<const T*>(a), static_cast<const T*>(b),
       static_cast<T*>(out), offsets, n, f);
      STOKE_CUDA_CHECK(cudaGetLastError());
    };
    switch (op) {
      case TernaryBackwardOp::div_other:
        return run(DivOtherBackwardF{});
      case TernaryBackwardOp::maximum:
        return run(MinMaxBackwardF<true>{});
      case TernaryBackwardOp::minimum:
        return run(MinMaxBackwardF<false>{});
    }
    STOKE_FAIL("cuda::ternary_backward", "unknown op ", static_cast<int>(op));
  });
}

}  // namespace stoke::cuda
