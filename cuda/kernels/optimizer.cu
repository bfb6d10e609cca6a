// CUDA multi-tensor optimizer kernels (see optimizer.h). A launch carries a TensorListMeta by
// value (the tensors' addresses and sizes, and which chunk of which tensor each block takes);
// block b updates one chunk of kMultiTensorChunk elements, each thread 4 consecutive elements at
// a time with one vector access per array when every base pointer of the tensor allows it (chunks
// start at multiples of 4 elements, so the base decides). The update of one element is the CPU
// loop's body in f32.
#include "cuda/kernels/optimizer.h"

#include <algorithm>

#include "cuda/kernels/elementwise_util.h"

namespace stoke::cuda {
namespace {

constexpr int kOptimizerThreads = 256;
constexpr int kMaxLists = 6;

// What one launch covers; 6 * 36 * 8 + 36 * 8 + 320 * 5 + 8 = 3,624 bytes, under the 4 KiB of
// kernel parameters (with the scalars and two more arguments).
struct TensorListMeta {
  void* addr[kMaxLists][kMaxTensorsPerLaunch];
  int64_t size[kMaxTensorsPerLaunch];
  uint8_t block_tensor[kMaxBlocksPerLaunch];
  int32_t block_chunk[kMaxBlocksPerLaunch];
  int64_t first_chunk;  // the global number of block 0's chunk (sum_of_squares' partials)
};

// Cuts the tensors into chunks and calls launch(meta, blocks) for every full meta and the last
// one. lists[k][i] is tensor i's pointer in list k (depth lists).
template <class Launch>
void multi_tensor_apply(int depth, const std::vector<void*> (&lists)[kMaxLists],
                        const std::vector<int64_t>& sizes, Launch&& launch) {
  TensorListMeta meta{};
  int tensors = 0, blocks = 0;
  int64_t chunk_number = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == 0) continue;
    for (int k = 0; k < depth; ++k) meta.addr[k][tensors] = lists[k][i];
    meta.size[tensors] = sizes[i];
    ++tensors;
    const int64_t chunks = (sizes[i] + kMultiTensorChunk - 1) / kMultiTensorChunk;
    for (int64_t c = 0; c < chunks; ++c) {
      meta.block_tensor[blocks] = static_cast<uint8_t>(tensors - 1);
      meta.block_chunk[blocks] = static_cast<int32_t>(c);
      ++blocks;
      const bool last_chunk = c == chunks - 1;
      if (blocks == kMaxBlocksPerLaunch || (tensors == kMaxTensorsPerLaunch && last_chunk)) {
        launch(meta, blocks);
        meta.first_chunk = chunk_number + 1;
        blocks = 0;
        if (last_chunk) {
          tensors = 0;
        } else {  // the tensor goes on in the next launch, as its slot 0
          for (int k = 0; k < depth; ++k) meta.addr[k][0] = meta.addr[k][tensors - 1];
          meta.size[0] = meta.size[tensors - 1];
          tensors = 1;
        }
      }
      ++chunk_number;
    }
  }
  if (blocks > 0) launch(meta, blocks);
}

template <class T>
struct alignas(4 * sizeof(T)) Vec4 {
  T v[4];
};

// Elements [i0, i0 + 4) of a chunk of n as f32: one vector access when vec and whole, else
// element by element (lanes past n read as 0: computed and never stored).
template <class T>
__device__ __forceinline__ void load4(const T* a, int64_t i0, int64_t n, bool vec, float (&r)[4]) {
  if (vec && i0 + 4 <= n) {
    const Vec4<T> q = *reinterpret_cast<const Vec4<T>*>(a + i0);
    STOKE_UNROLL
    for (int k = 0; k < 4; ++k) r[k] = ew::to_float(q.v[k]);
    return;
  }
  STOKE_UNROLL
  for (int k = 0; k < 4; ++k) r[k] = i0 + k < n ? ew::to_float(a[i0 + k]) : 0.f;
}

template <class T>
__device__ __forceinline__ void store4(T* a, int64_t i0, int64_t n, bool vec, const float (&r)[4]) {
  if (vec && i0 + 4 <= n) {
    Vec4<T> q;
    STOKE_UNROLL
    for (int k = 0; k < 4; ++k) q.v[k] = ew::from_float<T>(r[k]);
    *reinterpret_cast<Vec4<T>*>(a + i0) = q;
    return;
  }
  for (int k = 0; k < 4 && i0 + k < n; ++k) a[i0 + k] = ew::from_float<T>(r[k]);
}

// Block b's chunk: list k's base pointer for it, its length, and whether the vector path holds.
struct ChunkView {
  int tensor;
  int64_t offset, n;
};

__device__ __forceinline__ ChunkView chunk_of(const TensorListMeta& meta) {
  const int t = meta.block_tensor[blockIdx.x];
  const int64_t offset = static_cast<int64_t>(meta.block_chunk[blockIdx.x]) * kMultiTensorChunk;
  const int64_t n =
      meta.size[t] - offset < kMultiTensorChunk ? meta.size[t] - offset : kMultiTensorChunk;
  return {t, offset, n};
}

template <class T>
__device__ __forceinline__ T* list(const TensorListMeta& meta, int k, const ChunkView& c) {
  return static_cast<T*>(meta.addr[k][c.tensor]) + c.offset;
}

template <class T>
__device__ __forceinline__ bool vec_ok(const TensorListMeta& meta, int depth, int tensor) {
  bool ok = true;
  for (int k = 0; k < depth; ++k) ok = ok && ew::aligned(meta.addr[k][tensor], 4 * sizeof(T));
  return ok;
}

// The f32 scalars of an SGD step; the flags are decided in f64 as the CPU decides them.
struct SgdScalars {
  float lr, momentum, dampening_complement, weight_decay;
  bool use_weight_decay, use_momentum, nesterov, first_step;
  const double* lr_device;  // when set, lr is read from it (f64 rounded to f32 as on the host)
};

struct AdamScalars {
  float beta1, beta2, one_minus_beta1, one_minus_beta2, weight_decay, decay, step_size, bias2_sqrt,
      eps;
  bool decoupled, use_weight_decay, amsgrad;
  double lr, beta1_d, beta2_d;   // for step_size and bias2_sqrt from a device step count
  double weight_decay_d, bias1;  // for decay and step_size from a device lr
  const double* lr_device;       // when set, lr is read from it
};

// Whether the step goes ahead: no found_inf, or a zero one (the GradScaler's device-side skip).
__device__ __forceinline__ bool step_goes_ahead(const float* found_inf) {
  return found_inf == nullptr || *found_inf == 0.f;
}

// Tensor t's count in the step list, or nullptr without one.
__device__ __forceinline__ const float* step_count_of(const TensorListMeta& meta, int step_list,
                                                      int tensor) {
  return step_list < 0 ? nullptr : static_cast<const float*>(meta.addr[step_list][tensor]);
}

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

// vmax is amsgrad's running maximum of v (read and written only when s.amsgrad).
__host__ __device__ __forceinline__ void adam_update(float& w, float g, float& m, float& v,
                                                     float& vmax, const AdamScalars& s) {
  float d = g;
  if (s.decoupled) {
    w = w * s.decay;
  } else if (s.use_weight_decay) {
    d = d + s.weight_decay * w;
  }
  m = m * s.beta1 + s.one_minus_beta1 * d;
  v = v * s.beta2 + s.one_minus_beta2 * d * d;
  float vd = v;
  if (s.amsgrad) {
    vd = (v != v || vmax < v) ? v : vmax;  // torch.maximum: NaN propagates
    vmax = vd;
  }
  const float denom = sqrtf(vd) / s.bias2_sqrt + s.eps;
  w = w - s.step_size * (m / denom);
}

// Lists: param, grad, momentum buffer (when s.use_momentum), then the step counts when step_list
// >= 0 (the tensor's first step is where its count is 1).
template <class T>
__global__ void __launch_bounds__(kOptimizerThreads)
    fused_sgd_kernel(TensorListMeta meta, SgdScalars s, const float* found_inf, int step_list) {
  if (!step_goes_ahead(found_inf)) return;
  const ChunkView c = chunk_of(meta);
  if (const float* count = step_count_of(meta, step_list, c.tensor)) s.first_step = *count == 1.f;
  if (s.lr_device) s.lr = static_cast<float>(*s.lr_device);
  T* p = list<T>(meta, 0, c);
  const T* g = list<T>(meta, 1, c);
  T* buf = s.use_momentum ? list<T>(meta, 2, c) : nullptr;
  const bool vec = vec_ok<T>(meta, s.use_momentum ? 3 : 2, c.tensor);
  for (int64_t i0 = 4 * static_cast<int64_t>(threadIdx.x); i0 < c.n; i0 += 4 * blockDim.x) {
    float w[4], gq[4], b[4] = {0.f, 0.f, 0.f, 0.f};
    load4(p, i0, c.n, vec, w);
    load4(g, i0, c.n, vec, gq);
    // The first step does not read the buffer (torch clones d into it).
    if (buf && !s.first_step) load4(buf, i0, c.n, vec, b);
    STOKE_UNROLL
    for (int k = 0; k < 4; ++k) sgd_update(w[k], gq[k], b[k], s);
    store4(p, i0, c.n, vec, w);
    if (buf) store4(buf, i0, c.n, vec, b);
  }
}

// Lists: param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq (when s.amsgrad), then the step counts
// when step_list >= 0: the update number, whose bias corrections are computed here in f64 as
// ops::adam_step_scalars computes them on the host.
template <class T>
__global__ void __launch_bounds__(kOptimizerThreads)
    fused_adam_kernel(TensorListMeta meta, AdamScalars s, const float* found_inf, int step_list) {
  if (!step_goes_ahead(found_inf)) return;
  const ChunkView c = chunk_of(meta);
  if (s.lr_device) {
    // The host's f64 expressions (fused_adam below, ops::adam_step_scalars), on the device's lr.
    s.lr = *s.lr_device;
    s.decay = static_cast<float>(1 - s.lr * s.weight_decay_d);
    s.step_size = static_cast<float>(s.lr / s.bias1);
  }
  if (const float* count = step_count_of(meta, step_list, c.tensor)) {
    const double t = *count;
    s.step_size = static_cast<float>(s.lr / (1 - ::pow(s.beta1_d, t)));
    s.bias2_sqrt = static_cast<float>(::sqrt(1 - ::pow(s.beta2_d, t)));
  }
  T* p = list<T>(meta, 0, c);
  const T* g = list<T>(meta, 1, c);
  T* m = list<T>(meta, 2, c);
  T* v = list<T>(meta, 3, c);
  T* vmax = s.amsgrad ? list<T>(meta, 4, c) : nullptr;
  const bool vec = vec_ok<T>(meta, s.amsgrad ? 5 : 4, c.tensor);
  for (int64_t i0 = 4 * static_cast<int64_t>(threadIdx.x); i0 < c.n; i0 += 4 * blockDim.x) {
    float w[4], gq[4], mq[4], vq[4], xq[4] = {0.f, 0.f, 0.f, 0.f};
    load4(p, i0, c.n, vec, w);
    load4(g, i0, c.n, vec, gq);
    load4(m, i0, c.n, vec, mq);
    load4(v, i0, c.n, vec, vq);
    if (vmax) load4(vmax, i0, c.n, vec, xq);
    STOKE_UNROLL
    for (int k = 0; k < 4; ++k) adam_update(w[k], gq[k], mq[k], vq[k], xq[k], s);
    store4(p, i0, c.n, vec, w);
    store4(m, i0, c.n, vec, mq);
    store4(v, i0, c.n, vec, vq);
    if (vmax) store4(vmax, i0, c.n, vec, xq);
  }
}

// One list: the gradients. A block reduces its non-finite flag, and one thread per block that
// saw one stores 1 (an atomic exchange: every writer stores the same value).
template <class T>
__global__ void __launch_bounds__(kOptimizerThreads)
    unscale_kernel(TensorListMeta meta, float* found_inf, const float* inv_scale) {
  const ChunkView c = chunk_of(meta);
  T* g = list<T>(meta, 0, c);
  const bool vec = vec_ok<T>(meta, 1, c.tensor);
  const float s = *inv_scale;
  float bad = 0.f;
  for (int64_t i0 = 4 * static_cast<int64_t>(threadIdx.x); i0 < c.n; i0 += 4 * blockDim.x) {
    float x[4];
    load4(g, i0, c.n, vec, x);
    STOKE_UNROLL
    for (int k = 0; k < 4; ++k) {
      if (!(fabsf(x[k]) <= 3.402823466e+38f)) bad = 1.f;  // inf or NaN
      x[k] = x[k] * s;
    }
    store4(g, i0, c.n, vec, x);
  }
  bad = ew::block_reduce(bad, ew::MaxOp{}, 0.f);
  if (threadIdx.x == 0 && bad != 0.f) atomicExch(found_inf, 1.f);
}

// One list; block b writes the sum of squares of its chunk to partials[meta.first_chunk + b].
template <class T>
__global__ void __launch_bounds__(kOptimizerThreads)
    sum_of_squares_kernel(TensorListMeta meta, float* partials) {
  const ChunkView c = chunk_of(meta);
  const T* a = list<T>(meta, 0, c);
  const bool vec = vec_ok<T>(meta, 1, c.tensor);
  float acc = 0.f;
  for (int64_t i0 = 4 * static_cast<int64_t>(threadIdx.x); i0 < c.n; i0 += 4 * blockDim.x) {
    float x[4];
    load4(a, i0, c.n, vec, x);
    STOKE_UNROLL
    for (int k = 0; k < 4; ++k) acc += x[k] * x[k];
  }
  acc = ew::block_reduce(acc, ew::SumOp{}, 0.f);
  if (threadIdx.x == 0) partials[meta.first_chunk + blockIdx.x] = acc;
}

// One block: counts addr[0][0, n) each advance by 1 unless *found_inf != 0 (a step's counts, before
// its update reads them).
__global__ void __launch_bounds__(kOptimizerThreads)
    advance_step_counts_kernel(TensorListMeta meta, int n, const float* found_inf) {
  if (!step_goes_ahead(found_inf)) return;
  for (int i = threadIdx.x; i < n; i += blockDim.x) *static_cast<float*>(meta.addr[0][i]) += 1.f;
}

// One thread: torch's _amp_update_scale_ (see AmpUpdateScaleArgs).
__global__ void __launch_bounds__(32)
    amp_update_scale_kernel(float* scale, float* growth_tracker, float* skipped, float* collapsed,
                            const float* found_inf, AmpUpdateScaleArgs a) {
  if (threadIdx.x != 0) return;
  if (*found_inf != 0.f) {
    const float next = *scale * static_cast<float>(a.backoff_factor);
    if (next < static_cast<float>(a.min_scale))
      *collapsed = 1.f;
    else
      *scale = next;
    *growth_tracker = 0.f;
    *skipped += 1.f;
    return;
  }
  const float successful = *growth_tracker + 1.f;
  if (successful == static_cast<float>(a.growth_interval)) {
    const float grown = *scale * static_cast<float>(a.growth_factor);
    const float cap = static_cast<float>(a.max_scale);
    *scale = grown < cap ? grown : cap;
    *growth_tracker = 0.f;
  } else {
    *growth_tracker = successful;
  }
}

// Advances the counts (a launch per kMaxTensorsPerLaunch of them), unless *found_inf != 0.
void advance_step_counts(const std::vector<float*>& counts, const float* found_inf,
                         cudaStream_t stream) {
  auto* k = &advance_step_counts_kernel;
  for (size_t b = 0; b < counts.size(); b += kMaxTensorsPerLaunch) {
    TensorListMeta meta{};
    const int n = static_cast<int>(std::min<size_t>(kMaxTensorsPerLaunch, counts.size() - b));
    for (int i = 0; i < n; ++i) meta.addr[0][i] = counts[b + static_cast<size_t>(i)];
    STOKE_LAUNCH(k, 1, 64, 0, stream)(meta, n, found_inf);
    STOKE_CUDA_CHECK(cudaGetLastError());
  }
}

// One block: *out = the sum of partials[0, n) (n may be 0).
__global__ void __launch_bounds__(kOptimizerThreads)
    sum_partials_kernel(const float* partials, int64_t n, float* out) {
  float acc = 0.f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += partials[i];
  acc = ew::block_reduce(acc, ew::SumOp{}, 0.f);
  if (threadIdx.x == 0) *out = acc;
}

void check_lists(const char* op, const std::vector<int64_t>& sizes,
                 std::initializer_list<size_t> n) {
  for (size_t len : n)
    STOKE_CHECK(len == sizes.size(), op, "expected lists of ", sizes.size(),
                " tensors (the sizes'), got one of ", len);
  for (size_t i = 0; i < sizes.size(); ++i)
    STOKE_CHECK(sizes[i] >= 0, op, "tensor ", i, " has size ", sizes[i]);
}

template <class P>
std::vector<void*> as_void(const std::vector<P*>& v) {
  std::vector<void*> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = const_cast<void*>(static_cast<const void*>(v[i]));
  return r;
}

}  // namespace

int64_t multi_tensor_chunks(const std::vector<int64_t>& sizes) {
  int64_t chunks = 0;
  for (int64_t n : sizes) chunks += (n + kMultiTensorChunk - 1) / kMultiTensorChunk;
  return chunks;
}

void fused_sgd(DType dtype, const std::vector<void*>& params, const std::vector<const void*>& grads,
               const std::vector<void*>& momentum_buffers, const std::vector<int64_t>& sizes,
               const SgdStepArgs& a, cudaStream_t stream, const std::vector<float*>& step_counts) {
  STOKE_NVTX_RANGE("stoke::cuda::fused_sgd");
  const char* op = "cuda::fused_sgd";
  const bool use_momentum = a.momentum != 0;
  check_lists(op, sizes, {params.size(), grads.size()});
  if (!step_counts.empty()) check_lists(op, sizes, {step_counts.size()});
  if (use_momentum) {
    STOKE_CHECK(momentum_buffers.size() == sizes.size(), op,
                "a momentum needs a momentum buffer per tensor (", sizes.size(), "), got ",
                momentum_buffers.size());
  }
  const SgdScalars s{.lr = static_cast<float>(a.lr),
                     .momentum = static_cast<float>(a.momentum),
                     .dampening_complement = static_cast<float>(1 - a.dampening),
                     .weight_decay = static_cast<float>(a.weight_decay),
                     .use_weight_decay = a.weight_decay != 0,
                     .use_momentum = use_momentum,
                     .nesterov = a.nesterov,
                     .first_step = a.first_step,
                     .lr_device = a.lr_device};
  const int depth = use_momentum ? 3 : 2;
  const int step_list = step_counts.empty() ? -1 : depth;
  std::vector<void*> lists[kMaxLists] = {
      params, as_void(grads), use_momentum ? momentum_buffers : std::vector<void*>(), {}};
  if (step_list >= 0) {
    lists[step_list] = as_void(step_counts);
    advance_step_counts(step_counts, a.found_inf, stream);
  }
  ew::dispatch_floating(dtype, op, [&](auto tag) {
    using T = decltype(tag);
    auto* k = &fused_sgd_kernel<T>;
    multi_tensor_apply(
        depth + (step_list >= 0), lists, sizes, [&](const TensorListMeta& meta, int blocks) {
          STOKE_LAUNCH(k, blocks, kOptimizerThreads, 0, stream)(meta, s, a.found_inf, step_list);
          STOKE_CUDA_CHECK(cudaGetLastError());
        });
  });
}

void fused_adam(DType dtype, const std::vector<void*>& params,
                const std::vector<const void*>& grads, const std::vector<void*>& exp_avgs,
                const std::vector<void*>& exp_avg_sqs, const std::vector<void*>& max_exp_avg_sqs,
                const std::vector<int64_t>& sizes, const AdamStepArgs& a, cudaStream_t stream,
                const std::vector<float*>& step_counts) {
  STOKE_NVTX_RANGE("stoke::cuda::fused_adam");
  const char* op = "cuda::fused_adam";
  check_lists(op, sizes, {params.size(), grads.size(), exp_avgs.size(), exp_avg_sqs.size()});
  if (!step_counts.empty()) check_lists(op, sizes, {step_counts.size()});
  if (a.amsgrad) check_lists(op, sizes, {max_exp_avg_sqs.size()});
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
                      .use_weight_decay = a.weight_decay != 0,
                      .amsgrad = a.amsgrad,
                      .lr = a.lr,
                      .beta1_d = a.beta1,
                      .beta2_d = a.beta2,
                      .weight_decay_d = a.weight_decay,
                      .bias1 = a.bias1,
                      .lr_device = a.lr_device};
  const int depth = a.amsgrad ? 5 : 4;
  const int step_list = step_counts.empty() ? -1 : depth;
  std::vector<void*> lists[kMaxLists] = {params,
                                         as_void(grads),
                                         exp_avgs,
                                         exp_avg_sqs,
                                         a.amsgrad ? max_exp_avg_sqs : std::vector<void*>(),
                                         {}};
  if (step_list >= 0) {
    lists[step_list] = as_void(step_counts);
    advance_step_counts(step_counts, a.found_inf, stream);
  }
  ew::dispatch_floating(dtype, op, [&](auto tag) {
    using T = decltype(tag);
    auto* k = &fused_adam_kernel<T>;
    multi_tensor_apply(
        depth + (step_list >= 0), lists, sizes, [&](const TensorListMeta& meta, int blocks) {
          STOKE_LAUNCH(k, blocks, kOptimizerThreads, 0, stream)(meta, s, a.found_inf, step_list);
          STOKE_CUDA_CHECK(cudaGetLastError());
        });
  });
}

void non_finite_check_and_unscale(DType dtype, const std::vector<void*>& grads,
                                  const std::vector<int64_t>& sizes, float* found_inf,
                                  const float* inv_scale, cudaStream_t stream) {
  STOKE_NVTX_RANGE("stoke::cuda::non_finite_check_and_unscale");
  const char* op = "cuda::non_finite_check_and_unscale";
  check_lists(op, sizes, {grads.size()});
  STOKE_CHECK(found_inf && inv_scale, op, "expected found_inf and inv_scale");
  const std::vector<void*> lists[kMaxLists] = {grads, {}, {}, {}};
  ew::dispatch_floating(dtype, op, [&](auto tag) {
    using T = decltype(tag);
    auto* k = &unscale_kernel<T>;
    multi_tensor_apply(1, lists, sizes, [&](const TensorListMeta& meta, int blocks) {
      STOKE_LAUNCH(k, blocks, kOptimizerThreads, 0, stream)(meta, found_inf, inv_scale);
      STOKE_CUDA_CHECK(cudaGetLastError());
    });
  });
}

void amp_update_scale(float* scale, float* growth_tracker, float* skipped, float* collapsed,
                      const float* found_inf, const AmpUpdateScaleArgs& args, cudaStream_t stream) {
  STOKE_NVTX_RANGE("stoke::cuda::amp_update_scale");
  STOKE_CHECK(scale && growth_tracker && skipped && collapsed && found_inf,
              "cuda::amp_update_scale",
              "expected the scale, growth tracker, skip count, collapse flag and found_inf");
  auto* k = &amp_update_scale_kernel;
  STOKE_LAUNCH(k, 1, 32, 0, stream)(scale, growth_tracker, skipped, collapsed, found_inf, args);
  STOKE_CUDA_CHECK(cudaGetLastError());
}

void sum_of_squares(DType dtype, const std::vector<const void*>& tensors,
                    const std::vector<int64_t>& sizes, float* partials, float* out,
                    cudaStream_t stream) {
  STOKE_NVTX_RANGE("stoke::cuda::sum_of_squares");
  const char* op = "cuda::sum_of_squares";
  check_lists(op, sizes, {tensors.size()});
  const int64_t chunks = multi_tensor_chunks(sizes);
  STOKE_CHECK(out && (partials || chunks == 0), op, "expected out and partials");
  const std::vector<void*> lists[kMaxLists] = {as_void(tensors), {}, {}, {}};
  ew::dispatch_floating(dtype, op, [&](auto tag) {
    using T = decltype(tag);
    auto* k = &sum_of_squares_kernel<T>;
    multi_tensor_apply(1, lists, sizes, [&](const TensorListMeta& meta, int blocks) {
      STOKE_LAUNCH(k, blocks, kOptimizerThreads, 0, stream)(meta, partials);
      STOKE_CUDA_CHECK(cudaGetLastError());
    });
  });
  auto* k = &sum_partials_kernel;
  STOKE_LAUNCH(k, 1, kOptimizerThreads, 0, stream)(partials, chunks, out);
  STOKE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace stoke::cuda
