// CUDA fused cross-entropy kernels (see cross_entropy.h).
#include "cuda/kernels/loss_cross_entropy.h"

#include <cmath>

#include "cuda/kernels/elementwise_util.h"

namespace stoke::cuda {
namespace {

using ew::from_float;
using ew::to_float;

constexpr int kCountThreads = 256;

// One block: counts the non-ignored targets and finds the first out-of-range one, by a fixed
// shared-memory tree (no atomics, so the result is exact and reproducible).
__global__ void __launch_bounds__(kCountThreads)
    cross_entropy_count_kernel(const int64_t* target, int64_t n, int64_t c, int64_t ignore_index,
                               int64_t* scratch) {
  __shared__ int64_t count[kCountThreads];
  __shared__ int64_t bad[kCountThreads];
  const int tid = static_cast<int>(threadIdx.x);
  int64_t cnt = 0, first_bad = INT64_MAX;
  for (int64_t i = tid; i < n; i += kCountThreads) {
    const int64_t t = target[i];
    if (t == ignore_index) continue;
    ++cnt;
    if ((t < 0 || t >= c) && i < first_bad) first_bad = i;
  }
  count[tid] = cnt;
  bad[tid] = first_bad;
  __syncthreads();
  for (int w = kCountThreads / 2; w > 0; w /= 2) {
    if (tid < w) {
      count[tid] += count[tid + w];
      bad[tid] = bad[tid + w] < bad[tid] ? bad[tid + w] : bad[tid];
    }
    __syncthreads();
  }
  if (tid == 0) {
    scratch[0] = count[0];
    scratch[1] = bad[0] == INT64_MAX ? -1 : bad[0];
  }
}

// One row group (a warp with blockDim.y rows per block, or a block) per row: max, then
// sum(exp(x - max)) and sum(x), then the row's loss and, if asked, its dlogits.
template <class T>
__global__ void __launch_bounds__(256)
    cross_entropy_fused_kernel(const T* logits, const int64_t* target, int64_t n, int64_t c,
                               CrossEntropyParams params, const float* grad, const int64_t* scratch,
                               float* row_loss, T* dlogits) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool valid = row < n;
  const T* p = logits + (valid ? row * c : 0);
  float m = -INFINITY;
  if (valid)
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) m = fmaxf(m, to_float(p[j]));
  m = ew::row_reduce(m, ew::MaxOp{}, -INFINITY);
  const float eps = params.label_smoothing;
  float s = 0.f, sx = 0.f;
  if (valid)
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
      const float v = to_float(p[j]);
      s += expf(v - m);
      sx += v;
    }
  s = ew::row_reduce(s, ew::SumOp{}, 0.f);
  if (eps > 0.f) sx = ew::row_reduce(sx, ew::SumOp{}, 0.f);  // uniform: eps is a parameter
  if (!valid) return;
  const float lse = m + logf(s);
  const int64_t t = target[row];
  const bool ignored = t == params.ignore_index;
  const bool bad = !ignored && (t < 0 || t >= c);
  if (threadIdx.x == 0) {
    float loss = 0.f;
    if (bad) {
      loss = NAN;
    } else if (!ignored) {
      loss = (1.f - eps) * (lse - to_float(p[t]));
      if (eps > 0.f) loss += eps * (lse - sx / static_cast<float>(c));
    }
    row_loss[row] = loss;
  }
  if (dlogits == nullptr) return;
  T* d = dlogits + row * c;
  float scale = 0.f;
  if (!ignored && !bad) {
    const bool none = params.reduction == CrossEntropyReduction::none;
    scale = grad ? grad[none ? row : 0] : 1.f;
    if (params.reduction == CrossEntropyReduction::mean) scale /= static_cast<float>(scratch[0]);
  }
  const float off = eps / static_cast<float>(c), hit = (1.f - eps) * scale;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
    float g = (expf(to_float(p[j]) - lse) - off) * scale;
    if (j == t) g -= hit;
    d[j] = from_float<T>(g);
  }
}

// One block: the mean or sum of the row losses, accumulated in f64 in a fixed order.
__global__ void __launch_bounds__(kCountThreads)
    cross_entropy_reduce_kernel(const float* row_loss, int64_t n, bool mean, const int64_t* scratch,
                                float* loss) {
  __shared__ double part[kCountThreads];
  const int tid = static_cast<int>(threadIdx.x);
  double s = 0;
  for (int64_t i = tid; i < n; i += kCountThreads) s += row_loss[i];
  part[tid] = s;
  __syncthreads();
  for (int w = kCountThreads / 2; w > 0; w /= 2) {
    if (tid < w) part[tid] += part[tid + w];
    __syncthreads();
  }
  if (tid == 0)
    *loss = static_cast<float>(mean ? part[0] / static_cast<double>(scratch[0]) : part[0]);
}

}  // namespace

void cross_entropy(DType dtype, const void* logits, const int64_t* target, int64_t n, int64_t c,
                   const CrossEntropyParams& params, const CrossEntropyBuffers& buffers,
                   cudaStream_t stream) {
  STOKE_NVTX_RANGE("stoke::cuda::cross_entropy");
  const char* op = "cuda::cross_entropy";
  STOKE_CHECK(n >= 0 && c >= 0, op, "expected logits of shape (N, C) with N, C >= 0, got (", n,
              ", ", c, ")");
  STOKE_CHECK(c > 0 || n == 0, op, "expected at least one class, got logits of shape (", n, ", 0)");
  STOKE_CHECK(params.label_smoothing >= 0.f && params.label_smoothing <= 1.f, op,
              "expected label_smoothing in [0, 1], got ", params.label_smoothing);
  STOKE_CHECK(buffers.row_loss != nullptr && buffers.scratch != nullptr, op,
              "expected row_loss and scratch buffers, got null");
  auto* count = &cross_entropy_count_kernel;
  STOKE_LAUNCH(count, 1, kCountThreads, 0, stream)
  (target, n, c, params.ignore_index, buffers.scratch);
  STOKE_CUDA_CHECK(cudaGetLastError());
  ew::dispatch_floating(dtype, op, [&](auto tag) {
    using T = decltype(tag);
    if (n == 0) return;
    auto* k = &cross_entropy_fused_kernel<T>;
    const dim3 block = c <= 1024 ? dim3(32, 4) : dim3(256, 1);
    const unsigned grid = static_cast<unsigned>(c <= 1024 ? (n + 3) / 4 : n);
    STOKE_LAUNCH(k, grid, block, 0, stream)
    (static_cast<const T*>(logits), target, n, c, params, buffers.grad, buffers.scratch,
     buffers.row_loss, static_cast<T*>(buffers.dlogits));
    STOKE_CUDA_CHECK(cudaGetLastError());
  });
  if (buffers.loss != nullptr && params.reduction != CrossEntropyReduction::none) {
    auto* r = &cross_entropy_reduce_kernel;
    STOKE_LAUNCH(r, 1, kCountThreads, 0, stream)
    (buffers.row_loss, n, params.reduction == CrossEntropyReduction::mean, buffers.scratch,
     buffers.loss);
    STOKE_CUDA_CHECK(cudaGetLastError());
  }
}

}  // namespace stoke::cuda
