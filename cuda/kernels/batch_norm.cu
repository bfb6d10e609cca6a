// Batch norm kernels (see batch_norm.h).
//
// Channels-last inputs ((N, S, C) memory) have kernels of their own (the *_nhwc_kernel ones): the
// reductions keep the NCHW kernels' positions, order and per-value steps (bn_detail's shared
// helpers), with a block reading G adjacent channels of a row, and the elementwise passes walk
// memory in order; so a channel's statistics and every value equal the NCHW run's bit for bit.
//
// Reductions (training statistics, the backward's sums) run one 256-thread
// block per channel: consecutive threads read consecutive elements of a
// channel's rows, each thread accumulates in f32 registers, and the block
// combines with warp shuffles and one shared-memory step. The variance is
// summed around a per-channel shift (the channel's first element), as on the
// CPU, so that E[x^2] - E[x]^2 does not cancel when the mean is large against
// the spread. The elementwise passes run a 2-D grid: blockIdx.y walks the (n,
// c) planes, so each block loads its channel's parameters once and the inner
// loop is one FMA-like expression per element with no integer division. One
// block per channel is simple and exact but leaves SMs idle when C is smaller
// than the SM count; a split reduction (partial sums per (channel, chunk), then
// a combine) is the next step once a GPU measures it against cuDNN.
#include <climits>
#include <cmath>

#include "cuda/compat.h"
#include "cuda/kernels/batch_norm.h"
#include "cuda/kernels/elementwise_util.h"

namespace stoke::cuda {
namespace bn_detail {

constexpr int kThreads = 256;

// Loads widen to f32 and stores round from f32 (round to nearest even), whatever the dtype.
using ew::load_f32;
using ew::store_f32;

// Sums a and b over the block (blockDim.x a multiple of 32); the totals are
// valid in thread 0. `red` is 64 floats of the kernel's shared memory.
__device__ __forceinline__ void block_sum2(float& a, float& b, float* red) {
  for (int o = 16; o > 0; o >>= 1) {
    a += __shfl_xor_sync(0xffffffffu, a, o);
    b += __shfl_xor_sync(0xffffffffu, b, o);
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  if (lane == 0) {
    red[warp] = a;
    red[32 + warp] = b;
  }
  __syncthreads();
  if (warp == 0) {
    a = lane < warps ? red[lane] : 0.f;
    b = lane < warps ? red[32 + lane] : 0.f;
    for (int o = 16; o > 0; o >>= 1) {
      a += __shfl_xor_sync(0xffffffffu, a, o);
      b += __shfl_xor_sync(0xffffffffu, b, o);
    }
  }
}

// Calls f(i) for the flat indices i of channel c's elements (n, c, s) that this
// thread owns: positions threadIdx.x + k * blockDim.x of the channel's N * S,
// walked without a division per element.
template <class F>
__device__ __forceinline__ void for_channel(int64_t N, int64_t C, int64_t S, int64_t c, F&& f) {
  const int64_t step = blockDim.x;
  const int64_t dn = step / S, ds = step % S;
  int64_t n = threadIdx.x / S, s = threadIdx.x % S;
  while (n < N) {
    f((n * C + c) * S + s);
    s += ds;
    n += dn;
    if (s >= S) {
      s -= S;
      ++n;
    }
  }
}

// The per-value steps the NCHW and the channels-last kernels share, so that both layouts do the
// same operations (and contract them into FMAs the same way): a channel's results are equal bit for
// bit between the layouts.
__device__ __forceinline__ void add_shifted(float v, float& s1, float& s2) {
  s1 += v;
  s2 += v * v;
}

// Thread 0's end of the statistics: the channel's mean and invstd from the shifted sums, and the
// running statistics' update (when given).
__device__ __forceinline__ void finish_stats(int64_t c, float s1, float s2, float count,
                                             float shift, float momentum, float eps,
                                             float* running_mean, float* running_var,
                                             float* save_mean, float* save_invstd) {
  const float d = s1 / count;
  const float var_raw = s2 / count - d * d;
  const float var = var_raw > 0.f ? var_raw : 0.f;
  const float mean = shift + d;
  save_mean[c] = mean;
  save_invstd[c] = 1.f / sqrtf(var + eps);
  if (running_mean) {
    running_mean[c] = (1.f - momentum) * running_mean[c] + momentum * mean;
    running_var[c] = (1.f - momentum) * running_var[c] + momentum * var * count / (count - 1.f);
  }
}

// y = (x - m) * scale + shift for channel c; kEval: `stat` is the running variance (invstd is
// computed), else save_invstd. `is` receives the invstd.
struct Affine {
  float m, scale, shift, is;
};
template <bool kEval>
__device__ __forceinline__ Affine affine_of(int64_t c, const float* mean, const float* stat,
                                            float eps, const float* weight, const float* bias) {
  Affine a;
  a.m = mean[c];
  a.is = kEval ? 1.f / sqrtf(stat[c] + eps) : stat[c];
  a.scale = a.is * (weight ? weight[c] : 1.f);
  a.shift = bias ? bias[c] : 0.f;
  return a;
}
template <bool kRelu>
__device__ __forceinline__ float apply_value(float x, const Affine& a) {
  const float v = (x - a.m) * a.scale + a.shift;
  return kRelu && v < 0.f ? 0.f : v;  // NaN kept, as stoke::relu keeps it
}

// dy masked by the fused ReLU's output (kMask) and the backward's two sums.
template <bool kMask, class T>
__device__ __forceinline__ float masked_dy(const T* grad_y, const T* relu_y, int64_t i) {
  return kMask && !(load_f32(relu_y + i) > 0.f) ? 0.f : load_f32(grad_y + i);
}
__device__ __forceinline__ void add_backward(float dy, float x, float m, float& sdy, float& sdx) {
  sdy += dy;
  sdx += dy * (x - m);
}
__device__ __forceinline__ void finish_backward_sums(int64_t c, int64_t C, float sdy, float sdx,
                                                     const float* invstd, float* sums,
                                                     float* grad_weight, float* grad_bias) {
  sums[c] = sdy;
  sums[C + c] = sdx;
  if (grad_bias) grad_bias[c] = sdy;
  if (grad_weight) grad_weight[c] = sdx * invstd[c];
}

// grad_x = a * dy + k2 * (x - m) + k3 for channel c (see batch_norm_backward_input_kernel).
struct InputGradCoef {
  float a, k2, k3, m;
};
template <bool kTraining>
__device__ __forceinline__ InputGradCoef input_grad_coef(int64_t c, int64_t C, float inv_m,
                                                         const float* weight, const float* mean,
                                                         const float* invstd, const float* sums) {
  InputGradCoef k;
  const float is = invstd[c];
  k.a = (weight ? weight[c] : 1.f) * is;
  k.k2 = kTraining ? -k.a * is * is * sums[C + c] * inv_m : 0.f;
  k.k3 = kTraining ? -k.a * sums[c] * inv_m : 0.f;
  k.m = kTraining ? mean[c] : 0.f;
  return k;
}
template <bool kTraining>
__device__ __forceinline__ float input_grad_value(float dy, float x, const InputGradCoef& k) {
  float v = k.a * dy;
  if (kTraining) v += k.k2 * (x - k.m) + k.k3;
  return v;
}

}  // namespace bn_detail

using bn_detail::load_f32;
using bn_detail::store_f32;

// Training statistics: block c reduces channel c, writes save_mean /
// save_invstd and updates the running statistics (when given).
template <class T>
__global__ void __launch_bounds__(256)
    batch_norm_stats_kernel(const T* __restrict__ x, int64_t N, int64_t C, int64_t S,
                            float momentum, float eps, float* __restrict__ running_mean,
                            float* __restrict__ running_var, float* __restrict__ save_mean,
                            float* __restrict__ save_invstd) {
  __shared__ float red[64];
  const int64_t c = blockIdx.x;
  const float shift = load_f32(x + c * S);
  float s1 = 0.f, s2 = 0.f;
  bn_detail::for_channel(
      N, C, S, c, [&](int64_t i) { bn_detail::add_shifted(load_f32(x + i) - shift, s1, s2); });
  bn_detail::block_sum2(s1, s2, red);
  if (threadIdx.x == 0)
    bn_detail::finish_stats(c, s1, s2, static_cast<float>(N * S), shift, momentum, eps,
                            running_mean, running_var, save_mean, save_invstd);
}

// Channels-last statistics: x is (M = N * S, C) with the channel fastest, and block b reduces
// channels [b * G, b * G + G). For each of its channels, thread t sums the positions t, t + 256,
// ... of the channel's M values and the block combines them with block_sum2: the positions,
// order and operations of batch_norm_stats_kernel, so the statistics equal the NCHW kernel's bit
// for bit whatever G is. G only sets how many adjacent values one thread reads of a row (a sector
// shared instead of G blocks reading it).
template <class T, int G>
__global__ void __launch_bounds__(256)
    batch_norm_stats_nhwc_kernel(const T* __restrict__ x, int64_t M, int64_t C, float momentum,
                                 float eps, float* __restrict__ running_mean,
                                 float* __restrict__ running_var, float* __restrict__ save_mean,
                                 float* __restrict__ save_invstd) {
  __shared__ float red[64];
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * G;
  const int g_count = C - c0 < G ? static_cast<int>(C - c0) : G;
  float shift[G], s1[G], s2[G];
  STOKE_UNROLL
  for (int g = 0; g < G; ++g) {
    shift[g] = g < g_count ? load_f32(x + c0 + g) : 0.f;
    s1[g] = s2[g] = 0.f;
  }
  for (int64_t p = threadIdx.x; p < M; p += blockDim.x) {
    const T* row = x + p * C + c0;
    STOKE_UNROLL
    for (int g = 0; g < G; ++g)
      if (g < g_count) bn_detail::add_shifted(load_f32(row + g) - shift[g], s1[g], s2[g]);
  }
  STOKE_UNROLL
  for (int g = 0; g < G; ++g) {
    if (g >= g_count) break;  // the same for the whole block
    bn_detail::block_sum2(s1[g], s2[g], red);
    if (threadIdx.x == 0)
      bn_detail::finish_stats(c0 + g, s1[g], s2[g], static_cast<float>(M), shift[g], momentum, eps,
                              running_mean, running_var, save_mean, save_invstd);
    __syncthreads();  // warp 0 has read `red` before the next channel writes it
  }
}

// y = (x - mean) * invstd * weight + bias per plane (n, c). kEval: `stat` is
// the running variance and invstd is computed here (and written to save_* by
// the planes of n = 0 when given); otherwise `stat` is save_invstd from
// batch_norm_stats_kernel. kRelu: y = relu(...) (the fused epilogue; NaN kept
// as stoke::relu keeps it).
template <class T, bool kEval, bool kRelu>
__global__ void __launch_bounds__(256)
    batch_norm_apply_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t planes, int64_t C,
                            int64_t S, const float* __restrict__ mean,
                            const float* __restrict__ stat, float eps,
                            const float* __restrict__ weight, const float* __restrict__ bias,
                            float* __restrict__ save_mean, float* __restrict__ save_invstd) {
  for (int64_t plane = blockIdx.y; plane < planes; plane += gridDim.y) {
    const int64_t c = plane % C;
    const bn_detail::Affine a = bn_detail::affine_of<kEval>(c, mean, stat, eps, weight, bias);
    if (kEval && save_mean && plane < C && blockIdx.x == 0 && threadIdx.x == 0) {
      save_mean[c] = a.m;
      save_invstd[c] = a.is;
    }
    const T* xp = x + plane * S;
    T* yp = y + plane * S;
    for (int64_t s = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; s < S;
         s += static_cast<int64_t>(gridDim.x) * blockDim.x)
      store_f32(yp + s, bn_detail::apply_value<kRelu>(load_f32(xp + s), a));
  }
}

// The channels-last apply: a grid-stride loop over x's M * C values, channel i % C; the per-value
// operations of batch_norm_apply_kernel (eval: the first row writes save_*).
template <class T, bool kEval, bool kRelu>
__global__ void __launch_bounds__(256)
    batch_norm_apply_nhwc_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t total,
                                 int64_t C, const float* __restrict__ mean,
                                 const float* __restrict__ stat, float eps,
                                 const float* __restrict__ weight, const float* __restrict__ bias,
                                 float* __restrict__ save_mean, float* __restrict__ save_invstd) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = i % C;
    const bn_detail::Affine a = bn_detail::affine_of<kEval>(c, mean, stat, eps, weight, bias);
    if (kEval && save_mean && i < C) {
      save_mean[c] = a.m;
      save_invstd[c] = a.is;
    }
    store_f32(y + i, bn_detail::apply_value<kRelu>(load_f32(x + i), a));
  }
}

// The backward's per-channel sums: sum(dy) -> sums[c] and sum(dy * (x - mean))
// -> sums[C + c], plus grad_bias = sum(dy) and grad_weight = sum(dy * (x -
// mean)) * invstd when requested. kMask: dy counts only where relu_y > 0
// (the fused ReLU's backward, read in the same pass).
template <class T, bool kMask>
__global__ void __launch_bounds__(256)
    batch_norm_backward_reduce_kernel(const T* __restrict__ grad_y, const T* __restrict__ x,
                                      const T* __restrict__ relu_y, int64_t N, int64_t C, int64_t S,
                                      const float* __restrict__ mean,
                                      const float* __restrict__ invstd, float* __restrict__ sums,
                                      float* __restrict__ grad_weight,
                                      float* __restrict__ grad_bias) {
  __shared__ float red[64];
  const int64_t c = blockIdx.x;
  const float m = mean[c];
  float sdy = 0.f, sdx = 0.f;
  bn_detail::for_channel(N, C, S, c, [&](int64_t i) {
    bn_detail::add_backward(bn_detail::masked_dy<kMask>(grad_y, relu_y, i), load_f32(x + i), m, sdy,
                            sdx);
  });
  bn_detail::block_sum2(sdy, sdx, red);
  if (threadIdx.x == 0)
    bn_detail::finish_backward_sums(c, C, sdy, sdx, invstd, sums, grad_weight, grad_bias);
}

// The channels-last backward sums: the layout and order of batch_norm_stats_nhwc_kernel with the
// operations of batch_norm_backward_reduce_kernel (equal to it bit for bit).
template <class T, int G, bool kMask>
__global__ void __launch_bounds__(256) batch_norm_backward_reduce_nhwc_kernel(
    const T* __restrict__ grad_y, const T* __restrict__ x, const T* __restrict__ relu_y, int64_t M,
    int64_t C, const float* __restrict__ mean, const float* __restrict__ invstd,
    float* __restrict__ sums, float* __restrict__ grad_weight, float* __restrict__ grad_bias) {
  __shared__ float red[64];
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * G;
  const int g_count = C - c0 < G ? static_cast<int>(C - c0) : G;
  float m[G], sdy[G], sdx[G];
  STOKE_UNROLL
  for (int g = 0; g < G; ++g) {
    m[g] = g < g_count ? mean[c0 + g] : 0.f;
    sdy[g] = sdx[g] = 0.f;
  }
  for (int64_t p = threadIdx.x; p < M; p += blockDim.x) {
    const int64_t row = p * C + c0;
    STOKE_UNROLL
    for (int g = 0; g < G; ++g)
      if (g < g_count)
        bn_detail::add_backward(bn_detail::masked_dy<kMask>(grad_y, relu_y, row + g),
                                load_f32(x + row + g), m[g], sdy[g], sdx[g]);
  }
  STOKE_UNROLL
  for (int g = 0; g < G; ++g) {
    if (g >= g_count) break;  // the same for the whole block
    bn_detail::block_sum2(sdy[g], sdx[g], red);
    if (threadIdx.x == 0)
      bn_detail::finish_backward_sums(c0 + g, C, sdy[g], sdx[g], invstd, sums, grad_weight,
                                      grad_bias);
    __syncthreads();
  }
}

// grad_x = a * dy + k2 * (x - mean) + k3 with a = weight * invstd and, in
// training (gradients through the batch statistics), k2 = -a * invstd^2 *
// mean(dy * (x - mean)), k3 = -a * mean(dy); in eval k2 = k3 = 0 and x is not
// read. kMask: dy is 0 where relu_y <= 0 (as in the reduce kernel).
template <class T, bool kTraining, bool kMask>
__global__ void __launch_bounds__(256)
    batch_norm_backward_input_kernel(const T* __restrict__ grad_y, const T* __restrict__ x,
                                     const T* __restrict__ relu_y, T* __restrict__ grad_x,
                                     int64_t planes, int64_t C, int64_t S, float inv_m,
                                     const float* __restrict__ weight,
                                     const float* __restrict__ mean,
                                     const float* __restrict__ invstd,
                                     const float* __restrict__ sums) {
  for (int64_t plane = blockIdx.y; plane < planes; plane += gridDim.y) {
    const int64_t c = plane % C;
    const bn_detail::InputGradCoef k =
        bn_detail::input_grad_coef<kTraining>(c, C, inv_m, weight, mean, invstd, sums);
    const int64_t off = plane * S;
    for (int64_t s = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; s < S;
         s += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      const float dy = bn_detail::masked_dy<kMask>(grad_y, relu_y, off + s);
      store_f32(grad_x + off + s, bn_detail::input_grad_value<kTraining>(
                                      dy, kTraining ? load_f32(x + off + s) : 0.f, k));
    }
  }
}

// The channels-last input gradient: a grid-stride loop over the M * C values, channel i % C, with
// the per-value operations of batch_norm_backward_input_kernel.
template <class T, bool kTraining, bool kMask>
__global__ void __launch_bounds__(256)
    batch_norm_backward_input_nhwc_kernel(const T* __restrict__ grad_y, const T* __restrict__ x,
                                          const T* __restrict__ relu_y, T* __restrict__ grad_x,
                                          int64_t total, int64_t C, float inv_m,
                                          const float* __restrict__ weight,
                                          const float* __restrict__ mean,
                                          const float* __restrict__ invstd,
                                          const float* __restrict__ sums) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const bn_detail::InputGradCoef k =
        bn_detail::input_grad_coef<kTraining>(i % C, C, inv_m, weight, mean, invstd, sums);
    const float dy = bn_detail::masked_dy<kMask>(grad_y, relu_y, i);
    store_f32(grad_x + i,
              bn_detail::input_grad_value<kTraining>(dy, kTraining ? load_f32(x + i) : 0.f, k));
  }
}

namespace {

void check_layout(const char* op, const BatchNormLayout& l) {
  STOKE_CHECK(l.batch >= 0 && l.channels >= 1 && l.spatial >= 1, op,
              "expected batch >= 0, channels >= 1 and spatial >= 1, got (", l.batch, ", ",
              l.channels, ", ", l.spatial, ")");
  STOKE_CHECK(l.channels <= INT_MAX, op, "expected at most 2^31 - 1 channels, got ", l.channels);
}

// The elementwise passes' launch shape: x along a plane (at most 256 threads, a
// multiple of 32), y over planes (grid-stride beyond 65535).
void plane_grid(const BatchNormLayout& l, dim3& grid, dim3& block) {
  const int64_t threads =
      l.spatial >= bn_detail::kThreads ? bn_detail::kThreads : (l.spatial + 31) / 32 * 32;
  const int64_t gx = (l.spatial + threads - 1) / threads;
  const int64_t planes = l.batch * l.channels;
  block = dim3(static_cast<unsigned>(threads));
  grid = dim3(static_cast<unsigned>(gx < 1024 ? gx : 1024),
              static_cast<unsigned>(planes < 65535 ? planes : 65535));
}

// Channels per block of the channels-last reductions: one block per channel until there are at
// least 64 blocks' worth of channels, then 2, 4 or 8 adjacent channels per block (a 16-byte run of
// f16, 32 of f32), so a row's sector is read by one block instead of several. The statistics do
// not depend on it (batch_norm_stats_nhwc_kernel).
int nhwc_channels_per_block(int64_t C) {
  return C >= 8 * 64 ? 8 : C >= 4 * 64 ? 4 : C >= 2 * 64 ? 2 : 1;
}

// Launches the instance for nhwc_channels_per_block(C) (k1, k2, k4, k8: G = 1, 2, 4, 8) over
// ceil(C / G) blocks of 256 threads.
template <class Kernel, class... Args>
void launch_nhwc_reduce(int64_t C, Kernel k1, Kernel k2, Kernel k4, Kernel k8, cudaStream_t stream,
                        Args... args) {
  const int G = nhwc_channels_per_block(C);
  Kernel k = G == 8 ? k8 : G == 4 ? k4 : G == 2 ? k2 : k1;
  STOKE_LAUNCH(k, dim3(static_cast<unsigned>((C + G - 1) / G)), dim3(bn_detail::kThreads), 0,
               stream)
  (args...);
  STOKE_CUDA_CHECK(cudaGetLastError());
}

// The channels-last elementwise passes: a grid-stride loop over all values.
dim3 nhwc_elementwise_grid(const BatchNormLayout& l) {
  return dim3(ew::grid_for(l.batch * l.spatial * l.channels, bn_detail::kThreads, 65535));
}

template <class T>
void forward_training(const BatchNormLayout& l, const T* x, T* y, const float* weight,
                      const float* bias, float* running_mean, float* running_var, float momentum,
                      float eps, float* save_mean, float* save_invstd, cudaStream_t stream,
                      bool relu) {
  STOKE_NVTX_RANGE("stoke::cuda::batch_norm_forward_training");
  const char* op = "cuda::batch_norm";
  check_layout(op, l);
  STOKE_CHECK(l.batch * l.spatial > 1, op,
              "expected more than 1 value per channel when using batch "
              "statistics, got (N, C, S) = (",
              l.batch, ", ", l.channels, ", ", l.spatial, ")");
  STOKE_CHECK(x && y && save_mean && save_invstd, op,
              "expected non-null x, y, save_mean and save_invstd");
  STOKE_CHECK((running_mean == nullptr) == (running_var == nullptr), op,
              "expected running_mean and running_var both given or both null");
  if (l.channels_last) {
    const int64_t M = l.batch * l.spatial;
    launch_nhwc_reduce(l.channels, &batch_norm_stats_nhwc_kernel<T, 1>,
                       &batch_norm_stats_nhwc_kernel<T, 2>, &batch_norm_stats_nhwc_kernel<T, 4>,
                       &batch_norm_stats_nhwc_kernel<T, 8>, stream, x, M, l.channels, momentum, eps,
                       running_mean, running_var, save_mean, save_invstd);
    auto* apply = relu ? &batch_norm_apply_nhwc_kernel<T, false, true>
                       : &batch_norm_apply_nhwc_kernel<T, false, false>;
    STOKE_LAUNCH(apply, nhwc_elementwise_grid(l), dim3(bn_detail::kThreads), 0, stream)
    (x, y, M * l.channels, l.channels, save_mean, save_invstd, eps, weight, bias, nullptr, nullptr);
    STOKE_CUDA_CHECK(cudaGetLastError());
    return;
  }
  auto* stats = &batch_norm_stats_kernel<T>;
  STOKE_LAUNCH(stats, dim3(static_cast<unsigned>(l.channels)), dim3(bn_detail::kThreads), 0, stream)
  (x, l.batch, l.channels, l.spatial, momentum, eps, running_mean, running_var, save_mean,
   save_invstd);
  STOKE_CUDA_CHECK(cudaGetLastError());
  dim3 grid, block;
  plane_grid(l, grid, block);
  auto* apply =
      relu ? &batch_norm_apply_kernel<T, false, true> : &batch_norm_apply_kernel<T, false, false>;
  STOKE_LAUNCH(apply, grid, block, 0, stream)
  (x, y, l.batch * l.channels, l.channels, l.spatial, save_mean, save_invstd, eps, weight, bias,
   nullptr, nullptr);
  STOKE_CUDA_CHECK(cudaGetLastError());
}

template <class T>
void forward_eval(const BatchNormLayout& l, const T* x, T* y, const float* weight,
                  const float* bias, const float* running_mean, const float* running_var, float eps,
                  float* save_mean, float* save_invstd, cudaStream_t stream, bool relu) {
  STOKE_NVTX_RANGE("stoke::cuda::batch_norm_forward_eval");
  const char* op = "cuda::batch_norm";
  check_layout(op, l);
  STOKE_CHECK(running_mean && running_var, op,
              "expected running_mean and running_var in evaluation (use the "
              "training forward "
              "without running statistics for batch statistics)");
  STOKE_CHECK((save_mean == nullptr) == (save_invstd == nullptr), op,
              "expected save_mean and save_invstd both given or both null");
  if (l.batch == 0) return;
  STOKE_CHECK(x && y, op, "expected non-null x and y");
  if (l.channels_last) {
    auto* apply = relu ? &batch_norm_apply_nhwc_kernel<T, true, true>
                       : &batch_norm_apply_nhwc_kernel<T, true, false>;
    STOKE_LAUNCH(apply, nhwc_elementwise_grid(l), dim3(bn_detail::kThreads), 0, stream)
    (x, y, l.batch * l.spatial * l.channels, l.channels, running_mean, running_var, eps, weight,
     bias, save_mean, save_invstd);
    STOKE_CUDA_CHECK(cudaGetLastError());
    return;
  }
  dim3 grid, block;
  plane_grid(l, grid, block);
  auto* apply =
      relu ? &batch_norm_apply_kernel<T, true, true> : &batch_norm_apply_kernel<T, true, false>;
  STOKE_LAUNCH(apply, grid, block, 0, stream)
  (x, y, l.batch * l.channels, l.channels, l.spatial, running_mean, running_var, eps, weight, bias,
   save_mean, save_invstd);
  STOKE_CUDA_CHECK(cudaGetLastError());
}

template <class T>
void backward(const BatchNormLayout& l, const T* grad_y, const T* x, const float* weight,
              const float* save_mean, const float* save_invstd, bool training, T* grad_x,
              float* grad_weight, float* grad_bias, float* workspace, cudaStream_t stream,
              const T* relu_y) {
  STOKE_NVTX_RANGE("stoke::cuda::batch_norm_backward");
  const char* op = "cuda::batch_norm_backward";
  check_layout(op, l);
  const bool need_sums = grad_weight || grad_bias || (training && grad_x);
  STOKE_CHECK(save_mean && save_invstd, op, "expected non-null save_mean and save_invstd");
  STOKE_CHECK(!need_sums || workspace, op,
              "expected a workspace of batch_norm_backward_workspace_floats(", l.channels,
              ") floats when grad_weight, grad_bias or the training grad_x is "
              "requested");
  if (need_sums) {
    STOKE_CHECK(grad_y && x, op, "expected non-null grad_y and x");
    if (l.channels_last) {
      const int64_t M = l.batch * l.spatial;
      if (relu_y)
        launch_nhwc_reduce(l.channels, &batch_norm_backward_reduce_nhwc_kernel<T, 1, true>,
                           &batch_norm_backward_reduce_nhwc_kernel<T, 2, true>,
                           &batch_norm_backward_reduce_nhwc_kernel<T, 4, true>,
                           &batch_norm_backward_reduce_nhwc_kernel<T, 8, true>, stream, grad_y, x,
                           relu_y, M, l.channels, save_mean, save_invstd, workspace, grad_weight,
                           grad_bias);
      else
        launch_nhwc_reduce(l.channels, &batch_norm_backward_reduce_nhwc_kernel<T, 1, false>,
                           &batch_norm_backward_reduce_nhwc_kernel<T, 2, false>,
                           &batch_norm_backward_reduce_nhwc_kernel<T, 4, false>,
                           &batch_norm_backward_reduce_nhwc_kernel<T, 8, false>, stream, grad_y, x,
                           relu_y, M, l.channels, save_mean, save_invstd, workspace, grad_weight,
                           grad_bias);
    } else {
      auto* reduce = relu_y ? &batch_norm_backward_reduce_kernel<T, true>
                            : &batch_norm_backward_reduce_kernel<T, false>;
      STOKE_LAUNCH(reduce, dim3(static_cast<unsigned>(l.channels)), dim3(bn_detail::kThreads), 0,
                   stream)
      (grad_y, x, relu_y, l.batch, l.channels, l.spatial, save_mean, save_invstd, workspace,
       grad_weight, grad_bias);
      STOKE_CUDA_CHECK(cudaGetLastError());
    }
  }
  if (!grad_x || l.batch == 0) return;
  STOKE_CHECK(grad_y && (x || !training), op, "expected non-null grad_y and x");
  const float inv_m = 1.f / static_cast<float>(l.batch * l.spatial);
  if (l.channels_last) {
    auto* input = training ? (relu_y ? &batch_norm_backward_input_nhwc_kernel<T, true, true>
                                     : &batch_norm_backward_input_nhwc_kernel<T, true, false>)
                           : (relu_y ? &batch_norm_backward_input_nhwc_kernel<T, false, true>
                                     : &batch_norm_backward_input_nhwc_kernel<T, false, false>);
    STOKE_LAUNCH(input, nhwc_elementwise_grid(l), dim3(bn_detail::kThreads), 0, stream)
    (grad_y, x, relu_y, grad_x, l.batch * l.spatial * l.channels, l.channels, inv_m, weight,
     save_mean, save_invstd, workspace);
    STOKE_CUDA_CHECK(cudaGetLastError());
    return;
  }
  dim3 grid, block;
  plane_grid(l, grid, block);
  auto* input = training ? (relu_y ? &batch_norm_backward_input_kernel<T, true, true>
                                   : &batch_norm_backward_input_kernel<T, true, false>)
                         : (relu_y ? &batch_norm_backward_input_kernel<T, false, true>
                                   : &batch_norm_backward_input_kernel<T, false, false>);
  STOKE_LAUNCH(input, grid, block, 0, stream)
  (grad_y, x, relu_y, grad_x, l.batch * l.channels, l.channels, l.spatial, inv_m, weight, save_mean,
   save_invstd, workspace);
  STOKE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

// The dtype overloads declared in batch_norm.h.
#define STOKE_BN_OVERLOADS(T)                                                                      \
  void batch_norm_forward_training(                                                                \
      const BatchNormLayout& l, const T* x, T* y, const float* weight, const float* bias,          \
      float* running_mean, float* running_var, float momentum, float eps, float* save_mean,        \
      float* save_invstd, cudaStream_t stream, bool relu) {                                        \
    forward_training<T>(l, x, y, weight, bias, running_mean, running_var, momentum, eps,           \
                        save_mean, save_invstd, stream, relu);                                     \
  }                                                                                                \
  void batch_norm_forward_eval(const BatchNormLayout& l, const T* x, T* y, const float* weight,    \
                               const float* bias, const float* running_mean,                       \
                               const float* running_var, float eps, float* save_mean,              \
                               float* save_invstd, cudaStream_t stream, bool relu) {               \
    forward_eval<T>(l, x, y, weight, bias, running_mean, running_var, eps, save_mean, save_invstd, \
                    stream, relu);                                                                 \
  }                                                                                                \
  void batch_norm_backward(const BatchNormLayout& l, const T* grad_y, const T* x,                  \
                           const float* weight, const float* save_mean, const float* save_invstd,  \
                           bool training, T* grad_x, float* grad_weight, float* grad_bias,         \
                           float* workspace, cudaStream_t stream, const T* relu_y) {               \
    backward<T>(l, grad_y, x, weight, save_mean, save_invstd, training, grad_x, grad_weight,       \
                grad_bias, workspace, stream, relu_y);                                             \
  }

STOKE_BN_OVERLOADS(float)
STOKE_BN_OVERLOADS(__half)
STOKE_BN_OVERLOADS(__nv_bfloat16)
#undef STOKE_BN_OVERLOADS

}  // namespace stoke::cuda
