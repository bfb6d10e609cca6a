// Pooling kernels (see pool.h). One thread per output element for the forward
// passes and one per input element for the backward passes (a gather over the
// outputs whose window holds it: no atomics, deterministic, and the same
// summation order as the CPU scatter, so f32 results match ops/cpu/pool.cpp bit
// for bit). Grid-stride loops over the flat index; 32-bit index math when the
// tensor is small enough (64-bit integer division is several times slower on a
// GPU).
#include <climits>
#include <cmath>

#include "cuda/compat.h"
#include "cuda/kernels/elementwise_util.h"
#include "cuda/kernels/pool.h"

namespace stoke::cuda {
namespace pool_detail {

constexpr int kThreads = 256;

// Loads widen to f32 and stores round from f32 (round to nearest even), whatever the dtype.
using ew::load_f32;
using ew::store_f32;

__device__ __forceinline__ int imin(int a, int b) {
  return a < b ? a : b;
}
__device__ __forceinline__ int imax(int a, int b) {
  return a > b ? a : b;
}

// The geometry as the kernels use it.
struct Params {
  int64_t planes;
  int H, W, OH, OW, kh, kw, sh, sw, ph, pw;
  int C;  // channels (channels-last instances only)
  bool include_pad;
};

// Where flat index i of an (N, C, Hs, Ws) tensor lies: its spatial position (h, w), and (n, c)
// such that plane_base gives where its plane starts. NCHW memory (kCL false) is (planes, Hs, Ws):
// n is the plane and c 0. Channels-last memory (kCL) is (N, Hs, Ws, C). Each kernel takes its
// window in the same order in both layouts, so the two give equal results bit for bit.
template <bool kCL, class I>
__device__ __forceinline__ void locate(I i, int Hs, int Ws, int C, int& h, int& w, I& n, int& c) {
  if constexpr (kCL) {
    c = static_cast<int>(i % C);
    i /= C;
  } else {
    c = 0;
  }
  w = static_cast<int>(i % Ws);
  const I t = i / Ws;
  h = static_cast<int>(t % Hs);
  n = t / Hs;
}
// The offset of plane (n, c) of a tensor of spatial size `area` (see locate), and the distance
// between its spatial neighbours: 1 in NCHW, C in channels-last memory.
template <bool kCL, class I>
__device__ __forceinline__ I plane_base(I n, int c, int area, int C) {
  return kCL ? n * area * C + c : n * area;
}
template <bool kCL>
__device__ __forceinline__ int spatial_stride(int C) {
  return kCL ? C : 1;
}

// The outputs whose window [o * s - p, o * s - p + k) holds input position `i`:
// [lo, hi).
__device__ __forceinline__ void covering(int i, int k, int s, int p, int out, int& lo, int& hi) {
  lo = i + p < k ? 0 : (i + p - k) / s + 1;
  hi = imin((i + p) / s + 1, out);
}

// The avg_pool2d divisor of output (oh, ow), PyTorch's rule (ops/cpu/pool.cpp's
// avg_window).
__device__ __forceinline__ int avg_divisor(const Params& p, int oh, int ow, int& hs, int& he,
                                           int& ws, int& we) {
  hs = oh * p.sh - p.ph;
  ws = ow * p.sw - p.pw;
  he = imin(hs + p.kh, p.H + p.ph);
  we = imin(ws + p.kw, p.W + p.pw);
  const int padded = (he - hs) * (we - ws);
  hs = imax(hs, 0);
  ws = imax(ws, 0);
  he = imin(he, p.H);
  we = imin(we, p.W);
  const int d = p.include_pad ? padded : (he - hs) * (we - ws);
  return d > 1 ? d : 1;
}

// Adaptive window [floor(i * in / out), ceil((i + 1) * in / out)).
__device__ __forceinline__ int adaptive_start(int i, int in, int out) {
  return static_cast<int>(static_cast<int64_t>(i) * in / out);
}
__device__ __forceinline__ int adaptive_end(int i, int in, int out) {
  return static_cast<int>((static_cast<int64_t>(i + 1) * in + out - 1) / out);
}

}  // namespace pool_detail

using pool_detail::load_f32;
using pool_detail::store_f32;

// Grid-stride loop over [0, total) with index type I.
#define STOKE_POOL_LOOP(I, i, total)                                                             \
  for (I i = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + threadIdx.x; i < (total); \
       i += static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x))

template <class T, class I, bool kCL>
__global__ void __launch_bounds__(256)
    max_pool2d_forward_kernel(pool_detail::Params p, const T* __restrict__ x, T* __restrict__ y,
                              int64_t* __restrict__ indices) {
  const I total = static_cast<I>(p.planes) * p.OH * p.OW;
  const I ss = pool_detail::spatial_stride<kCL>(p.C);
  STOKE_POOL_LOOP(I, i, total) {
    int oh, ow, c;
    I n;
    pool_detail::locate<kCL>(i, p.OH, p.OW, p.C, oh, ow, n, c);
    const int h0 = oh * p.sh - p.ph, w0 = ow * p.sw - p.pw;
    const int hs = pool_detail::imax(h0, 0), he = pool_detail::imin(h0 + p.kh, p.H);
    const int ws = pool_detail::imax(w0, 0), we = pool_detail::imin(w0 + p.kw, p.W);
    const T* xp = x + pool_detail::plane_base<kCL>(n, c, p.H * p.W, p.C);
    float m = -INFINITY;
    int idx = hs * p.W + ws;
    for (int h = hs; h < he; ++h)
      for (int w = ws; w < we; ++w) {
        const float v = load_f32(xp + (h * p.W + w) * ss);
        if (v > m || v != v) {  // NaN propagates; the first of equal maxima stays
          m = v;
          idx = h * p.W + w;
        }
      }
    store_f32(y + i, m);
    if (indices) indices[i] = idx;
  }
}

template <class T, class I, bool kCL>
__global__ void __launch_bounds__(256)
    max_pool2d_backward_kernel(pool_detail::Params p, const T* __restrict__ grad_y,
                               const int64_t* __restrict__ indices, T* __restrict__ grad_x) {
  const I total = static_cast<I>(p.planes) * p.H * p.W;
  const I ss = pool_detail::spatial_stride<kCL>(p.C);
  STOKE_POOL_LOOP(I, i, total) {
    int h, w, c;
    I n;
    pool_detail::locate<kCL>(i, p.H, p.W, p.C, h, w, n, c);
    const I out0 = pool_detail::plane_base<kCL>(n, c, p.OH * p.OW, p.C);
    int oh0, oh1, ow0, ow1;
    pool_detail::covering(h, p.kh, p.sh, p.ph, p.OH, oh0, oh1);
    pool_detail::covering(w, p.kw, p.sw, p.pw, p.OW, ow0, ow1);
    const int64_t target = static_cast<int64_t>(h) * p.W + w;
    float acc = 0.f;
    for (int oh = oh0; oh < oh1; ++oh)
      for (int ow = ow0; ow < ow1; ++ow) {
        const I o = out0 + (oh * p.OW + ow) * ss;
        if (indices[o] == target) acc += load_f32(grad_y + o);
      }
    store_f32(grad_x + i, acc);
  }
}

template <class T, class I, bool kCL>
__global__ void __launch_bounds__(256)
    avg_pool2d_forward_kernel(pool_detail::Params p, const T* __restrict__ x, T* __restrict__ y) {
  const I total = static_cast<I>(p.planes) * p.OH * p.OW;
  const I ss = pool_detail::spatial_stride<kCL>(p.C);
  STOKE_POOL_LOOP(I, i, total) {
    int oh, ow, c;
    I n;
    pool_detail::locate<kCL>(i, p.OH, p.OW, p.C, oh, ow, n, c);
    const T* xp = x + pool_detail::plane_base<kCL>(n, c, p.H * p.W, p.C);
    int hs, he, ws, we;
    const int d = pool_detail::avg_divisor(p, oh, ow, hs, he, ws, we);
    float sum = 0.f;
    for (int h = hs; h < he; ++h)
      for (int w = ws; w < we; ++w) sum += load_f32(xp + (h * p.W + w) * ss);
    store_f32(y + i, sum / static_cast<float>(d));
  }
}

template <class T, class I, bool kCL>
__global__ void __launch_bounds__(256)
    avg_pool2d_backward_kernel(pool_detail::Params p, const T* __restrict__ grad_y,
                               T* __restrict__ grad_x) {
  const I total = static_cast<I>(p.planes) * p.H * p.W;
  const I ss = pool_detail::spatial_stride<kCL>(p.C);
  STOKE_POOL_LOOP(I, i, total) {
    int h, w, c;
    I n;
    pool_detail::locate<kCL>(i, p.H, p.W, p.C, h, w, n, c);
    const T* gy = grad_y + pool_detail::plane_base<kCL>(n, c, p.OH * p.OW, p.C);
    int oh0, oh1, ow0, ow1;
    pool_detail::covering(h, p.kh, p.sh, p.ph, p.OH, oh0, oh1);
    pool_detail::covering(w, p.kw, p.sw, p.pw, p.OW, ow0, ow1);
    float acc = 0.f;
    for (int oh = oh0; oh < oh1; ++oh)
      for (int ow = ow0; ow < ow1; ++ow) {
        int hs, he, ws, we;
        const int d = pool_detail::avg_divisor(p, oh, ow, hs, he, ws, we);
        acc += load_f32(gy + (oh * p.OW + ow) * ss) / static_cast<float>(d);
      }
    store_f32(grad_x + i, acc);
  }
}

template <class T, class I, bool kCL>
__global__ void __launch_bounds__(256)
    adaptive_avg_pool2d_forward_kernel(pool_detail::Params p, const T* __restrict__ x,
                                       T* __restrict__ y) {
  const I total = static_cast<I>(p.planes) * p.OH * p.OW;
  const I ss = pool_detail::spatial_stride<kCL>(p.C);
  STOKE_POOL_LOOP(I, i, total) {
    int oh, ow, c;
    I n;
    pool_detail::locate<kCL>(i, p.OH, p.OW, p.C, oh, ow, n, c);
    const T* xp = x + pool_detail::plane_base<kCL>(n, c, p.H * p.W, p.C);
    const int hs = pool_detail::adaptive_start(oh, p.H, p.OH);
    const int he = pool_detail::adaptive_end(oh, p.H, p.OH);
    const int ws = pool_detail::adaptive_start(ow, p.W, p.OW);
    const int we = pool_detail::adaptive_end(ow, p.W, p.OW);
    float sum = 0.f;
    for (int h = hs; h < he; ++h)
      for (int w = ws; w < we; ++w) sum += load_f32(xp + (h * p.W + w) * ss);
    store_f32(y + i, sum / static_cast<float>((he - hs) * (we - ws)));
  }
}

template <class T, class I, bool kCL>
__global__ void __launch_bounds__(256)
    adaptive_avg_pool2d_backward_kernel(pool_detail::Params p, const T* __restrict__ grad_y,
                                        T* __restrict__ grad_x) {
  const I total = static_cast<I>(p.planes) * p.H * p.W;
  const I ss = pool_detail::spatial_stride<kCL>(p.C);
  STOKE_POOL_LOOP(I, i, total) {
    int h, w, c;
    I n;
    pool_detail::locate<kCL>(i, p.H, p.W, p.C, h, w, n, c);
    const T* gy = grad_y + pool_detail::plane_base<kCL>(n, c, p.OH * p.OW, p.C);
    // The outputs whose adaptive window holds h: [floor(h * OH / H), ceil((h +
    // 1) * OH / H)).
    const int oh0 = pool_detail::adaptive_start(h, p.OH, p.H);
    const int oh1 = pool_detail::adaptive_end(h, p.OH, p.H);
    const int ow0 = pool_detail::adaptive_start(w, p.OW, p.W);
    const int ow1 = pool_detail::adaptive_end(w, p.OW, p.W);
    float acc = 0.f;
    for (int oh = oh0; oh < oh1; ++oh) {
      const int rows =
          pool_detail::adaptive_end(oh, p.H, p.OH) - pool_detail::adaptive_start(oh, p.H, p.OH);
      for (int ow = ow0; ow < ow1; ++ow) {
        const int cols =
            pool_detail::adaptive_end(ow, p.W, p.OW) - pool_detail::adaptive_start(ow, p.W, p.OW);
        acc += load_f32(gy + (oh * p.OW + ow) * ss) / static_cast<float>(rows * cols);
      }
    }
    store_f32(grad_x + i, acc);
  }
}

#undef STOKE_POOL_LOOP

namespace {

// Checks the geometry (window rules only when `window`) and converts it for the
// kernels.
pool_detail::Params checked_params(const char* op, const Pool2dGeometry& g, bool window) {
  STOKE_CHECK(g.planes >= 0 && g.height >= 1 && g.width >= 1 && g.out_h >= 1 && g.out_w >= 1, op,
              "expected planes >= 0 and height, width, out_h, out_w >= 1, got planes ", g.planes,
              ", input ", g.height, "x", g.width, ", output ", g.out_h, "x", g.out_w);
  STOKE_CHECK(g.height * g.width <= INT_MAX && g.out_h * g.out_w <= INT_MAX, op,
              "expected planes of at most 2^31 elements, got input ", g.height, "x", g.width,
              " and output ", g.out_h, "x", g.out_w);
  if (window) {
    STOKE_CHECK(g.kernel_h >= 1 && g.kernel_w >= 1 && g.stride_h >= 1 && g.stride_w >= 1, op,
                "expected kernel_size >= 1 and stride >= 1, got kernel ", g.kernel_h, ",",
                g.kernel_w, " stride ", g.stride_h, ",", g.stride_w);
    STOKE_CHECK(
        g.pad_h >= 0 && g.pad_w >= 0 && g.pad_h <= g.kernel_h / 2 && g.pad_w <= g.kernel_w / 2, op,
        "expected padding >= 0 and at most half the kernel size (kernel ", g.kernel_h, ",",
        g.kernel_w, "), got padding ", g.pad_h, ",", g.pad_w);
    STOKE_CHECK((g.out_h - 1) * g.stride_h - g.pad_h < g.height &&
                    (g.out_w - 1) * g.stride_w - g.pad_w < g.width,
                op,
                "expected output windows that start inside the padded input, "
                "got output ",
                g.out_h, "x", g.out_w, " for input ", g.height, "x", g.width, " stride ",
                g.stride_h, ",", g.stride_w, " padding ", g.pad_h, ",", g.pad_w);
  }
  pool_detail::Params p{};
  p.planes = g.planes;
  p.H = static_cast<int>(g.height);
  p.W = static_cast<int>(g.width);
  p.OH = static_cast<int>(g.out_h);
  p.OW = static_cast<int>(g.out_w);
  p.kh = static_cast<int>(g.kernel_h);
  p.kw = static_cast<int>(g.kernel_w);
  p.sh = static_cast<int>(g.stride_h);
  p.sw = static_cast<int>(g.stride_w);
  p.ph = static_cast<int>(g.pad_h);
  p.pw = static_cast<int>(g.pad_w);
  p.include_pad = g.count_include_pad;
  if (g.channels_last) {
    STOKE_CHECK(g.channels >= 1 && g.planes % g.channels == 0 && g.channels <= INT_MAX, op,
                "expected channels >= 1 dividing planes for channels-last memory, got channels ",
                g.channels, " and planes ", g.planes);
    p.C = static_cast<int>(g.channels);
  } else {
    p.C = 1;
  }
  return p;
}

// Launches `k32` (32-bit index math) or `k64` over `total` elements, one thread
// per element up to a grid of 65535 blocks (grid-stride beyond). 32 bits when
// both tensors are small enough.
template <class... P, class... A>
void launch_flat_instance(void (*k32)(P...), void (*k64)(P...), const Pool2dGeometry& g,
                          bool per_output, cudaStream_t stream, A... args) {
  const int64_t in_total = g.planes * g.height * g.width, out_total = g.planes * g.out_h * g.out_w;
  const int64_t total = per_output ? out_total : in_total;
  if (total == 0) return;
  const int64_t blocks = (total + pool_detail::kThreads - 1) / pool_detail::kThreads;
  const dim3 grid(static_cast<unsigned>(blocks < 65535 ? blocks : 65535));
  const dim3 block(pool_detail::kThreads);
  if (in_total <= (int64_t{1} << 30) && out_total <= (int64_t{1} << 30)) {
    STOKE_LAUNCH(k32, grid, block, 0, stream)(args...);
  } else {
    STOKE_LAUNCH(k64, grid, block, 0, stream)(args...);
  }
  STOKE_CUDA_CHECK(cudaGetLastError());
}

// launch_flat_instance with the NCHW (k32, k64) or the channels-last (k32_cl, k64_cl) instances,
// as g.channels_last says.
template <class K, class... A>
void launch_flat(K k32, K k64, K k32_cl, K k64_cl, const Pool2dGeometry& g, bool per_output,
                 cudaStream_t stream, A... args) {
  if (g.channels_last)
    launch_flat_instance(k32_cl, k64_cl, g, per_output, stream, args...);
  else
    launch_flat_instance(k32, k64, g, per_output, stream, args...);
}

// The four instances of a pooling kernel for element type T, in launch_flat's order.
#define STOKE_POOL_INSTANCES(kernel, T)                                              \
  &kernel<T, int32_t, false>, &kernel<T, int64_t, false>, &kernel<T, int32_t, true>, \
      &kernel<T, int64_t, true>

}  // namespace

// The dtype overloads declared in pool.h, each forwarding to the kernel
// templates.
#define STOKE_POOL_OVERLOADS(T)                                                                    \
  void max_pool2d_forward(const Pool2dGeometry& g, const T* x, T* y, int64_t* indices,             \
                          cudaStream_t stream) {                                                   \
    STOKE_NVTX_RANGE("stoke::cuda::max_pool2d_forward");                                           \
    const auto p = checked_params("cuda::max_pool2d", g, true);                                    \
    launch_flat(STOKE_POOL_INSTANCES(max_pool2d_forward_kernel, T), g, true, stream, p, x, y,      \
                indices);                                                                          \
  }                                                                                                \
  void max_pool2d_backward(const Pool2dGeometry& g, const T* grad_y, const int64_t* indices,       \
                           T* grad_x, cudaStream_t stream) {                                       \
    STOKE_NVTX_RANGE("stoke::cuda::max_pool2d_backward");                                          \
    const auto p = checked_params("cuda::max_pool2d_backward", g, true);                           \
    launch_flat(STOKE_POOL_INSTANCES(max_pool2d_backward_kernel, T), g, false, stream, p, grad_y,  \
                indices, grad_x);                                                                  \
  }                                                                                                \
  void avg_pool2d_forward(const Pool2dGeometry& g, const T* x, T* y, cudaStream_t stream) {        \
    STOKE_NVTX_RANGE("stoke::cuda::avg_pool2d_forward");                                           \
    const auto p = checked_params("cuda::avg_pool2d", g, true);                                    \
    launch_flat(STOKE_POOL_INSTANCES(avg_pool2d_forward_kernel, T), g, true, stream, p, x, y);     \
  }                                                                                                \
  void avg_pool2d_backward(const Pool2dGeometry& g, const T* grad_y, T* grad_x,                    \
                           cudaStream_t stream) {                                                  \
    STOKE_NVTX_RANGE("stoke::cuda::avg_pool2d_backward");                                          \
    const auto p = checked_params("cuda::avg_pool2d_backward", g, true);                           \
    launch_flat(STOKE_POOL_INSTANCES(avg_pool2d_backward_kernel, T), g, false, stream, p, grad_y,  \
                grad_x);                                                                           \
  }                                                                                                \
  void adaptive_avg_pool2d_forward(const Pool2dGeometry& g, const T* x, T* y,                      \
                                   cudaStream_t stream) {                                          \
    STOKE_NVTX_RANGE("stoke::cuda::adaptive_avg_pool2d_forward");                                  \
    const auto p = checked_params("cuda::adaptive_avg_pool2d", g, false);                          \
    launch_flat(STOKE_POOL_INSTANCES(adaptive_avg_pool2d_forward_kernel, T), g, true, stream, p,   \
                x, y);                                                                             \
  }                                                                                                \
  void adaptive_avg_pool2d_backward(const Pool2dGeometry& g, const T* grad_y, T* grad_x,           \
                                    cudaStream_t stream) {                                         \
    STOKE_NVTX_RANGE("stoke::cuda::adaptive_avg_pool2d_backward");                                 \
    const auto p = checked_params("cuda::adaptive_avg_pool2d_backward", g, false);                 \
    launch_flat(STOKE_POOL_INSTANCES(adaptive_avg_pool2d_backward_kernel, T), g, false, stream, p, \
                grad_y, grad_x);                                                                   \
  }

STOKE_POOL_OVERLOADS(float)
STOKE_POOL_OVERLOADS(__half)
STOKE_POOL_OVERLOADS(__nv_bfloat16)
#undef STOKE_POOL_OVERLOADS
#undef STOKE_POOL_INSTANCES

}  // namespace stoke::cuda
