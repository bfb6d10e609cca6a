// Group / layer norm kernels (see group_norm.h).
//
// The forward and the input gradient run one block per row (n, g): the row's K * S values are
// read by consecutive threads (coalesced), summed in f32 registers and combined by
// ew::block_reduce. The variance is two-pass (sum of (x - mean)^2 after the mean), so a large
// offset does not cancel as in E[x^2] - E[x]^2; the row is re-read from L2, not kept in shared
// memory. The weight / bias gradients run one block per channel c = (g, k), reducing over (n, s).
// For layer norm (S = 1) that block reads one value per row (strided): correct but uncoalesced; a
// column-tiled reduction is the next step once a GPU measures it.
#include <climits>
#include <cmath>

#include "cuda/compat.h"
#include "cuda/kernels/elementwise_util.h"
#include "cuda/kernels/group_norm.h"

namespace stoke::cuda {
namespace gn_detail {

constexpr int kThreads = 256;
using ew::load_f32;
using ew::store_f32;

__device__ __forceinline__ float block_sum(float v) {
  return ew::block_reduce(v, ew::SumOp{}, 0.f);
}

}  // namespace gn_detail

using gn_detail::load_f32;
using gn_detail::store_f32;

// Block `row` normalizes row (n, g) = (row / G, row % G).
template <class T>
__global__ void __launch_bounds__(256)
    group_norm_forward_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t G, int64_t K,
                              int64_t S, float eps, const float* __restrict__ weight,
                              const float* __restrict__ bias, float* __restrict__ save_mean,
                              float* __restrict__ save_rstd) {
  const int64_t row = blockIdx.x, M = K * S;
  const T* xr = x + row * M;
  T* yr = y + row * M;
  float s = 0.f;
  for (int64_t i = threadIdx.x; i < M; i += blockDim.x) s += load_f32(xr + i);
  const float mean = gn_detail::block_sum(s) / static_cast<float>(M);
  float q = 0.f;
  for (int64_t i = threadIdx.x; i < M; i += blockDim.x) {
    const float d = load_f32(xr + i) - mean;
    q += d * d;
  }
  const float var = gn_detail::block_sum(q) / static_cast<float>(M);
  const float rstd = 1.f / sqrtf(var + eps);
  if (threadIdx.x == 0) {
    save_mean[row] = mean;
    save_rstd[row] = rstd;
  }
  const int64_t c0 = (row % G) * K;
  for (int64_t i = threadIdx.x; i < M; i += blockDim.x) {
    const int64_t c = c0 + (S == 1 ? i : i / S);
    const float w = weight ? weight[c] : 1.f, b = bias ? bias[c] : 0.f;
    store_f32(yr + i, (load_f32(xr + i) - mean) * rstd * w + b);
  }
}

// Block `row`: dx = rstd * w * dy + k2 * (x - mean) + k3 with k2 = -rstd^3 * sum(dy * w * (x -
// mean)) / M and k3 = -rstd * sum(dy * w) / M over the row.
template <class T>
__global__ void __launch_bounds__(256)
    group_norm_backward_input_kernel(const T* __restrict__ grad_y, const T* __restrict__ x,
                                     T* __restrict__ grad_x, int64_t G, int64_t K, int64_t S,
                                     const float* __restrict__ weight,
                                     const float* __restrict__ save_mean,
                                     const float* __restrict__ save_rstd) {
  const int64_t row = blockIdx.x, M = K * S;
  const T* xr = x + row * M;
  const T* dr = grad_y + row * M;
  T* out = grad_x + row * M;
  const float mean = save_mean[row], rstd = save_rstd[row];
  const int64_t c0 = (row % G) * K;
  float sb = 0.f, sa = 0.f;
  for (int64_t i = threadIdx.x; i < M; i += blockDim.x) {
    const int64_t c = c0 + (S == 1 ? i : i / S);
    const float u = load_f32(dr + i) * (weight ? weight[c] : 1.f);
    sb += u;
    sa += u * (load_f32(xr + i) - mean);
  }
  sb = gn_detail::block_sum(sb);
  sa = gn_detail::block_sum(sa);
  const float inv_m = 1.f / static_cast<float>(M);
  const float k2 = -rstd * rstd * rstd * sa * inv_m, k3 = -rstd * sb * inv_m;
  for (int64_t i = threadIdx.x; i < M; i += blockDim.x) {
    const int64_t c = c0 + (S == 1 ? i : i / S);
    const float a = rstd * (weight ? weight[c] : 1.f);
    store_f32(out + i, a * load_f32(dr + i) + k2 * (load_f32(xr + i) - mean) + k3);
  }
}

// Block `c` (channel (g, k) = (c / K, c % K)): grad_weight[c] = sum over (n, s) of dy * (x -
// mean) * rstd, grad_bias[c] = sum of dy.
template <class T>
__global__ void __launch_bounds__(256)
    group_norm_backward_param_kernel(const T* __restrict__ grad_y, const T* __restrict__ x,
                                     int64_t N, int64_t G, int64_t K, int64_t S,
                                     const float* __restrict__ save_mean,
                                     const float* __restrict__ save_rstd,
                                     float* __restrict__ grad_weight,
                                     float* __restrict__ grad_bias) {
  const int64_t c = blockIdx.x, C = G * K, g = c / K;
  float sw = 0.f, sb = 0.f;
  for (int64_t j = threadIdx.x; j < N * S; j += blockDim.x) {
    const int64_t n = S == 1 ? j : j / S, s = S == 1 ? 0 : j % S;
    const int64_t i = (n * C + c) * S + s, row = n * G + g;
    const float dy = load_f32(grad_y + i);
    sb += dy;
    sw += dy * (load_f32(x + i) - save_mean[row]) * save_rstd[row];
  }
  sb = gn_detail::block_sum(sb);
  sw = gn_detail::block_sum(sw);
  if (threadIdx.x == 0) {
    if (grad_weight) grad_weight[c] = sw;
    if (grad_bias) grad_bias[c] = sb;
  }
}

namespace {

void check_layout(const char* op, const GroupNormLayout& l) {
  STOKE_CHECK(l.batch >= 0 && l.groups >= 1 && l.channels_per_group >= 1 && l.spatial >= 1, op,
              "expected batch >= 0 and groups, channels_per_group, spatial >= 1, got (", l.batch,
              ", ", l.groups, ", ", l.channels_per_group, ", ", l.spatial, ")");
  STOKE_CHECK(l.batch * l.groups <= INT_MAX && l.groups * l.channels_per_group <= INT_MAX, op,
              "expected at most 2^31 - 1 rows and channels, got (", l.batch, ", ", l.groups, ", ",
              l.channels_per_group, ", ", l.spatial, ")");
}

// A block of 256 threads, fewer (a multiple of 32) for short rows.
unsigned threads_for(int64_t m) {
  return static_cast<unsigned>(m >= gn_detail::kThreads ? gn_detail::kThreads
                                                        : (m < 32 ? 32 : (m + 31) / 32 * 32));
}

template <class T>
void forward(const GroupNormLayout& l, const T* x, T* y, const float* weight, const float* bias,
             float eps, float* save_mean, float* save_rstd, cudaStream_t stream) {
  STOKE_NVTX_RANGE("stoke::cuda::group_norm_forward");
  const char* op = "cuda::group_norm";
  check_layout(op, l);
  const int64_t rows = l.batch * l.groups;
  if (rows == 0) return;
  STOKE_CHECK(x && y && save_mean && save_rstd, op,
              "expected non-null x, y, save_mean and save_rstd");
  auto* k = &group_norm_forward_kernel<T>;
  STOKE_LAUNCH(k, dim3(static_cast<unsigned>(rows)),
               dim3(threads_for(l.channels_per_group * l.spatial)), 0, stream)
  (x, y, l.groups, l.channels_per_group, l.spatial, eps, weight, bias, save_mean, save_rstd);
  STOKE_CUDA_CHECK(cudaGetLastError());
}

template <class T>
void backward(const GroupNormLayout& l, const T* grad_y, const T* x, const float* weight,
              const float* save_mean, const float* save_rstd, T* grad_x, float* grad_weight,
              float* grad_bias, cudaStream_t stream) {
  STOKE_NVTX_RANGE("stoke::cuda::group_norm_backward");
  const char* op = "cuda::group_norm_backward";
  check_layout(op, l);
  if (!grad_x && !grad_weight && !grad_bias) return;
  STOKE_CHECK(grad_y && x && save_mean && save_rstd, op,
              "expected non-null grad_y, x, save_mean and save_rstd");
  const int64_t rows = l.batch * l.groups;
  if (grad_x && rows > 0) {
    auto* k = &group_norm_backward_input_kernel<T>;
    STOKE_LAUNCH(k, dim3(static_cast<unsigned>(rows)),
                 dim3(threads_for(l.channels_per_group * l.spatial)), 0, stream)
    (grad_y, x, grad_x, l.groups, l.channels_per_group, l.spatial, weight, save_mean, save_rstd);
    STOKE_CUDA_CHECK(cudaGetLastError());
  }
  if (grad_weight || grad_bias) {
    auto* k = &group_norm_backward_param_kernel<T>;
    STOKE_LAUNCH(k, dim3(static_cast<unsigned>(l.groups * l.channels_per_group)),
                 dim3(threads_for(l.batch * l.spatial)), 0, stream)
    (grad_y, x, l.batch, l.groups, l.channels_per_group, l.spatial, save_mean, save_rstd,
     grad_weight, grad_bias);
    STOKE_CUDA_CHECK(cudaGetLastError());
  }
}

}  // namespace

#define STOKE_GN_OVERLOADS(T)                                                                      \
  void group_norm_forward(const GroupNormLayout& l, const T* x, T* y, const float* weight,         \
                          const float* bias, float eps, float* save_mean, float* save_rstd,        \
                          cudaStream_t stream) {                                                   \
    forward<T>(l, x, y, weight, bias, eps, save_mean, save_rstd, stream);                          \
  }                                                                                                \
  void group_norm_backward(const GroupNormLayout& l, const T* grad_y, const T* x,                  \
                           const float* weight, const float* save_mean, const float* save_rstd,    \
                           T* grad_x, float* grad_weight, float* grad_bias, cudaStream_t stream) { \
    backward<T>(l, grad_y, x, weight, save_mean, save_rstd, grad_x, grad_weight, grad_bias,        \
                stream);                                                                           \
  }

STOKE_GN_OVERLOADS(float)
STOKE_GN_OVERLOADS(__half)
STOKE_GN_OVERLOADS(__nv_bfloat16)
#undef STOKE_GN_OVERLOADS

}  // namespace stoke::cuda
