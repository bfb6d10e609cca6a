// The optimizer family on the CPU: one fused loop per rule over lists of contiguous tensors, cut
// into chunks of kChunk elements (cuda/kernels/optimizer.h's 65,536) that the thread pool shares,
// so a model's many small parameters make one parallel pass, not one per tensor. The arithmetic is
// torch's single-tensor rule in the parameter's dtype (f32, f64; f16/bf16 in f32, rounded back),
// operation for operation, so that three steps match torch.optim's fixtures (tests/nn/test_optim).
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "core/half.h"
#include "core/parallel.h"
#include "ops/cpu/backend.h"
#include "ops/creation.h"
#include "ops/optimizer.h"

namespace stoke::ops::cpu {

namespace {

constexpr int64_t kChunk = 65536;

// Chunk c of the list: tensor `tensor`, elements [begin, end).
struct Chunk {
  size_t tensor;
  int64_t begin, end;
};

std::vector<Chunk> chunks_of(const std::vector<Tensor>& ts) {
  std::vector<Chunk> r;
  for (size_t i = 0; i < ts.size(); ++i)
    for (int64_t b = 0; b < ts[i].numel(); b += kChunk)
      r.push_back({i, b, std::min(ts[i].numel(), b + kChunk)});
  return r;
}

// The arithmetic type of a storage type: f16/bf16 compute in f32.
template <class T>
using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;

// Calls f(std::true_type{}) or f(std::false_type{}): the rule's options become template
// parameters, so each loop below has no branch inside and vectorizes (measured on 1M f32
// parameters, 2 threads: SGD with nesterov momentum 1.10 -> 0.21 ms, Adam 3.42 -> 0.51 ms against
// the loop that tested the options per element).
template <class F>
void with_flag(bool flag, F&& f) {
  if (flag)
    f(std::true_type{});
  else
    f(std::false_type{});
}

// T: storage, A = Acc<T>: arithmetic (the same for f32 and f64, where the casts vanish).
template <class T, bool kWd, bool kMomentum, bool kFirst, bool kNesterov, class A = Acc<T>>
void sgd_range(T* __restrict w, const T* __restrict gp, T* __restrict buf, int64_t b, int64_t e,
               A lr, A mom, A damp1, A wd) {
  for (int64_t j = b; j < e; ++j) {
    A d = A(gp[j]);
    const A wj = A(w[j]);
    if constexpr (kWd) d = d + wd * wj;
    if constexpr (kMomentum) {
      // torch: buf = clone(d) on the first step, else buf = mom * buf + (1 - dampening) * d
      A bj;
      if constexpr (kFirst)
        bj = d;
      else
        bj = mom * A(buf[j]) + damp1 * d;
      buf[j] = T(bj);  // the update reads the unrounded buffer, as the cuda kernel does
      if constexpr (kNesterov)
        d = d + mom * bj;
      else
        d = bj;
    }
    w[j] = T(wj - lr * d);
  }
}

// vmax (amsgrad's running maximum of v) is read and written when kAmsgrad, else null.
template <class T, bool kDecoupled, bool kWd, bool kAmsgrad, class A = Acc<T>>
void adam_range(T* __restrict w, const T* __restrict gp, T* __restrict m, T* __restrict v,
                T* __restrict vmax, int64_t b, int64_t e, A b1, A b2, A omb1, A omb2, A wd, A decay,
                A step_size, A bias2_sqrt, A eps) {
  for (int64_t j = b; j < e; ++j) {
    A d = A(gp[j]);
    A wj = A(w[j]);
    if constexpr (kDecoupled)
      wj = wj * decay;
    else if constexpr (kWd)
      d = d + wd * wj;
    // The update reads the unrounded state (f16/bf16 round on store only), as the cuda kernel.
    const A mj = A(m[j]) * b1 + omb1 * d;
    const A vj = A(v[j]) * b2 + omb2 * d * d;
    m[j] = T(mj);
    v[j] = T(vj);
    A vd = vj;
    if constexpr (kAmsgrad) {
      // torch.maximum(max_exp_avg_sq, exp_avg_sq): the stored (rounded) maximum against the
      // unrounded v, NaN propagating as torch.maximum's does.
      const A old = A(vmax[j]);
      vd = (vj != vj || old < vj) ? vj : old;
      vmax[j] = T(vd);
    }
    const A denom = std::sqrt(vd) / bias2_sqrt + eps;
    w[j] = T(wj - step_size * (mj / denom));
  }
}

}  // namespace

void CpuBackend::fused_sgd_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                            const std::vector<Tensor>& momentum_buffers, const SgdStepOptions& o) {
  const double lr = o.lr, mom = o.momentum, damp = o.dampening, wd = o.weight_decay;
  const std::vector<Chunk> chunks = chunks_of(params);
  dispatch_storage(params[0].dtype(), "fused_sgd_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = Acc<T>;
    const A tlr = A(lr), tmom = A(mom), tdamp = A(1 - damp), twd = A(wd);
    with_flag(wd != 0, [&](auto has_wd) {
      with_flag(mom != 0, [&](auto has_mom) {
        with_flag(o.first_step, [&](auto first) {
          with_flag(o.nesterov, [&](auto nesterov) {
            parallel_for(0, static_cast<int64_t>(chunks.size()), 1, [&](int64_t cb, int64_t ce) {
              for (int64_t c = cb; c < ce; ++c) {
                const Chunk& k = chunks[static_cast<size_t>(c)];
                T* buf = has_mom() ? momentum_buffers[k.tensor].data<T>() : nullptr;
                sgd_range<T, has_wd(), has_mom(), first(), nesterov()>(
                    params[k.tensor].data<T>(), grads[k.tensor].data<T>(), buf, k.begin, k.end, tlr,
                    tmom, tdamp, twd);
              }
            });
          });
        });
      });
    });
  });
}

void CpuBackend::fused_adam_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                             const std::vector<Tensor>& exp_avgs,
                             const std::vector<Tensor>& exp_avg_sqs,
                             const std::vector<Tensor>& max_exp_avg_sqs, const AdamStepOptions& o) {
  const double lr = o.lr, wd = o.weight_decay, b1 = o.beta1, b2 = o.beta2;
  const AdamStepScalars s = adam_step_scalars(o);
  const std::vector<Chunk> chunks = chunks_of(params);
  dispatch_storage(params[0].dtype(), "fused_adam_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = Acc<T>;
    const A tb1 = A(b1), tb2 = A(b2), omb1 = A(1 - b1), omb2 = A(1 - b2), twd = A(wd),
            decay = A(1 - lr * wd), tss = A(s.step_size), tb2s = A(s.bias2_sqrt), teps = A(o.eps);
    with_flag(o.decoupled, [&](auto decoupled) {
      with_flag(wd != 0, [&](auto has_wd) {
        with_flag(o.amsgrad, [&](auto amsgrad) {
          parallel_for(0, static_cast<int64_t>(chunks.size()), 1, [&](int64_t cb, int64_t ce) {
            for (int64_t c = cb; c < ce; ++c) {
              const Chunk& k = chunks[static_cast<size_t>(c)];
              T* vmax = amsgrad() ? max_exp_avg_sqs[k.tensor].data<T>() : nullptr;
              adam_range<T, decoupled(), has_wd(), amsgrad()>(
                  params[k.tensor].data<T>(), grads[k.tensor].data<T>(),
                  exp_avgs[k.tensor].data<T>(), exp_avg_sqs[k.tensor].data<T>(), vmax, k.begin,
                  k.end, tb1, tb2, omb1, omb2, twd, decay, tss, tb2s, teps);
            }
          });
        });
      });
    });
  });
}

void CpuBackend::non_finite_check_and_unscale_(const std::vector<Tensor>& grads,
                                               const Tensor& found_inf, const Tensor& inv_scale) {
  const float s = *inv_scale.data<float>();
  const std::vector<Chunk> chunks = chunks_of(grads);
  // One flag per chunk, ORed on this thread: the pool's threads never write a shared flag.
  std::vector<uint8_t> bad(chunks.size(), 0);
  parallel_for(0, static_cast<int64_t>(chunks.size()), 1, [&](int64_t cb, int64_t ce) {
    for (int64_t c = cb; c < ce; ++c) {
      const Chunk& k = chunks[static_cast<size_t>(c)];
      dispatch_storage(grads[k.tensor].dtype(), "non_finite_check_and_unscale_", [&](auto tag) {
        using T = typename decltype(tag)::type;
        using A = Acc<T>;
        T* g = grads[k.tensor].data<T>();
        const A as = A(s);
        bool any = false;
        for (int64_t j = k.begin; j < k.end; ++j) {
          const A x = A(g[j]);
          any |= !std::isfinite(x);
          g[j] = T(x * as);
        }
        bad[static_cast<size_t>(c)] = any;
      });
    }
  });
  for (uint8_t b : bad)
    if (b) *found_inf.data<float>() = 1.f;
}

// cuda/kernels/optimizer.cu's amp_update_scale_kernel, operation for operation in f32.
void CpuBackend::amp_update_scale_(const Tensor& scale, const Tensor& growth_tracker,
                                   const Tensor& skipped, const Tensor& collapsed,
                                   const Tensor& found_inf, const AmpUpdateScaleOptions& o) {
  float& s = *scale.data<float>();
  float& tracker = *growth_tracker.data<float>();
  if (*found_inf.data<float>() != 0.f) {
    const float next = s * static_cast<float>(o.backoff_factor);
    if (next < static_cast<float>(o.min_scale))
      *collapsed.data<float>() = 1.f;
    else
      s = next;
    tracker = 0.f;
    *skipped.data<float>() += 1.f;
    return;
  }
  const float successful = tracker + 1.f;
  if (successful == static_cast<float>(o.growth_interval)) {
    const float grown = s * static_cast<float>(o.growth_factor);
    const float cap = static_cast<float>(o.max_scale);
    s = grown < cap ? grown : cap;
    tracker = 0.f;
  } else {
    tracker = successful;
  }
}

Tensor CpuBackend::sum_of_squares(const std::vector<Tensor>& tensors) {
  const std::vector<Chunk> chunks = chunks_of(tensors);
  std::vector<double> partial(chunks.size(), 0.0);
  parallel_for(0, static_cast<int64_t>(chunks.size()), 1, [&](int64_t cb, int64_t ce) {
    for (int64_t c = cb; c < ce; ++c) {
      const Chunk& k = chunks[static_cast<size_t>(c)];
      dispatch_storage(tensors[k.tensor].dtype(), "sum_of_squares", [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* a = tensors[k.tensor].data<T>();
        double acc = 0;
        for (int64_t j = k.begin; j < k.end; ++j) acc += double(a[j]) * double(a[j]);
        partial[static_cast<size_t>(c)] = acc;
      });
    }
  });
  double total = 0;  // in chunk order: the result does not depend on the threads
  for (double p : partial) total += p;
  Tensor r = empty({}, {.dtype = DType::f64});
  *r.data<double>() = total;
  return r;
}

}  // namespace stoke::ops::cpu
