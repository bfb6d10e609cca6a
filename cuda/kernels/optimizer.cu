// CUDA optimizer kernels (see optimizer.h). One thread updates 4 consecutive elements (grid-stride
// over the quads), with one 16-byte access per array when every pointer allows it; the update of
// one element is the CPU loop's body in f32.
#include "cuda/kernels/optimizer.h"

#include "cuda/kernels/elementwise_util.h"

namespace stoke::cuda {
namespace {

constexpr int kThreads = 256;

// Four floats, aligned for one vector access.
struct alignas(16) Quad {
  float v[4];
};

// The f32 scalars of an SGD step; the flags are decided in f64 as the CPU decides them.
struct SgdScalars {
  float lr, momentum, dampening_complement, weight_decay;
  bool use_weight_decay, use_momentum, nesterov, first_step;
};

struct AdamScalars {
  float beta1, beta2, one_minus_beta1, one_minus_beta2, weight_decay, decay, step_size, bias2_sqrt,
      eps;
  bool decoupled, use_weight_decay;
};

__host__ __device__ __forceinline__ void sgd_update(float& w, float g, float& buf,
                                                    const SgdScalars& s) {
  float d = g;
  if (s.use_weight_decay) d = d + s.weight_decay * w;
  if (s.use_momentum) {
    // torch: buf = clone(d) on the first step, else buf = mom * buf + (1 - dampening) * d
    buf = s.first_step ? d : s.momentum * buf + s.dampening_complement * d;
    d = s.nesterov ? d + s.momentum * buf : buf;
  }
  w = w - s.lr * d;
}

__host__ __device__ __forceinline__ void adam_update(float& w, float g, float& m, float& v,
                                                     const AdamScalars& s) {
  float d = g;
  if (s.decoupled) {
    w = w * s.decay;
  } else if (s.use_weight_decay) {
    d = d + s.weight_decay * w;
  }
  m = m * s.beta1 + s.one_minus_beta1 * d;
  v = v * s.beta2 + s.one_minus_beta2 * d * d;
  const float denom = sqrtf(v) / s.bias2_sqrt + s.eps;
  w = w - s.step_size * (m / denom);
}

// The quad of element i0 of a: one 16-byte access when vec and the quad is whole, else element
// by element (lanes past n read as 0: their results are computed and never stored).
__device__ __forceinline__ Quad load(const float* a, int64_t q, int64_t n, bool vec) {
  const int64_t i0 = 4 * q;
  if (vec && i0 + 4 <= n) return reinterpret_cast<const Quad*>(a)[q];
  Quad r{};
  for (int64_t k = 0; k < 4 && i0 + k < n; ++k) r.v[k] = a[i0 + k];
  return r;
}

__device__ __forceinline__ void store(float* a, int64_t q, int64_t n, bool vec, const Quad& r) {
  const int64_t i0 = 4 * q;
  if (vec && i0 + 4 <= n) {
    reinterpret_cast<Quad*>(a)[q] = r;
    return;
  }
  for (int64_t k = 0; k < 4 && i0 + k < n; ++k) a[i0 + k] = r.v[k];
}

// buf is null when !s.use_momentum. vec: every pointer is 16-byte aligned. One update path for
// whole and partial quads keeps the code (and the registers) of the arithmetic single.
__global__ void __launch_bounds__(kThreads)
    sgd_step_kernel(float* p, const float* g, float* buf, int64_t n, SgdScalars s, bool vec) {
  const int64_t quads = (n + 3) / 4;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t q = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; q < quads;
       q += step) {
    Quad w = load(p, q, n, vec);
    const Quad gq = load(g, q, n, vec);
    // The first step does not read the buffer (torch clones d into it).
    Quad b = buf && !s.first_step ? load(buf, q, n, vec) : Quad{};
    STOKE_UNROLL
    for (int k = 0; k < 4; ++k) sgd_update(w.v[k], gq.v[k], b.v[k], s);
    store(p, q, n, vec, w);
    if (buf) store(buf, q, n, vec, b);
  }
}

__global__ void __launch_bounds__(kThreads)
    adam_step_kernel(float* p, const float* g, float* m, float* v, int64_t n, AdamScalars s,
                     bool vec) {
  const int64_t quads = (n + 3) / 4;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t q = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; q < quads;
       q += step) {
    Quad w = load(p, q, n, vec), mq = load(m, q, n, vec), vq = load(v, q, n, vec);
    const Quad gq = load(g, q, n, vec);
    STOKE_UNROLL
    for (int k = 0; k < 4; ++k) adam_update(w.v[k], gq.v[k], mq.v[k], vq.v[k], s);
    store(p, q, n, vec, w);
    store(m, q, n, vec, mq);
    store(v, q, n, vec, vq);
  }
}

}  // namespace

void sgd_step(float* param, const float* grad, float* momentum_buffer, int64_t n,
              const SgdStepArgs& a, cudaStream_t stream) {
  STOKE_NVTX_RANGE("stoke::cuda::sgd_step");
  const char* op = "cuda::sgd_step";
  STOKE_CHECK(n >= 0, op, "expected n >= 0, got ", n);
  const bool use_momentum = a.momentum != 0;
  STOKE_CHECK(!use_momentum || momentum_buffer, op, "a momentum needs a momentum buffer");
  if (n == 0) return;
  const SgdScalars s{.lr = static_cast<float>(a.lr),
                     .momentum = static_cast<float>(a.momentum),
                     .dampening_complement = static_cast<float>(1 - a.dampening),
                     .weight_decay = static_cast<float>(a.weight_decay),
                     .use_weight_decay = a.weight_decay != 0,
                     .use_momentum = use_momentum,
                     .nesterov = a.nesterov,
                     .first_step = a.first_step};
  float* buf = use_momentum ? momentum_buffer : nullptr;
  const bool vec =
      ew::aligned(param, 16) && ew::aligned(grad, 16) && (!buf || ew::aligned(buf, 16));
  auto* k = &sgd_step_kernel;
  STOKE_LAUNCH(k, ew::grid_for((n + 3) / 4, kThreads), kThreads, 0, stream)
  (param, grad, buf, n, s, vec);
  STOKE_CUDA_CHECK(cudaGetLastError());
}

void adam_step(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
               const AdamStepArgs& a, cudaStream_t stream) {
  STOKE_NVTX_RANGE("stoke::cuda::adam_step");
  const char* op = "cuda::adam_step";
  STOKE_CHECK(n >= 0, op, "expected n >= 0, got ", n);
  if (n == 0) return;
  const AdamScalars s{.beta1 = static_cast<float>(a.beta1),
                      .beta2 = static_cast<float>(a.beta2),
                      .one_minus_beta1 = static_cast<float>(1 - a.beta1),
                      .one_minus_beta2 = static_cast<float>(1 - a.beta2),
                      .weight_decay = static_cast<float>(a.weight_decay),
                      .decay = static_cast<float>(1 - a.lr * a.weight_decay),
                      .step_size = static_cast<float>(a.step_size),
                      .bias2_sqrt = static_cast<float>(a.bias2_sqrt),
                      .eps = static_cast<float>(a.eps),
                      .decoupled = a.decoupled,
                      .use_weight_decay = a.weight_decay != 0};
  const bool vec = ew::aligned(param, 16) && ew::aligned(grad, 16) && ew::aligned(exp_avg, 16) &&
                   ew::aligned(exp_avg_sq, 16);
  auto* k = &adam_step_kernel;
  STOKE_LAUNCH(k, ew::grid_for((n + 3) / 4, kThreads), kThreads, 0, stream)
  (param, grad, exp_avg, exp_avg_sq, n, s, vec);
  STOKE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace stoke::cuda
