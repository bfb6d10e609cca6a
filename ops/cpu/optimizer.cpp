// The optimizer family on the CPU: one fused loop per rule over contiguous f32/f64 tensors, split
// over the thread pool. The arithmetic is torch's single-tensor rule in the parameter's dtype,
// operation for operation, so that three steps match torch.optim's fixtures (tests/nn/test_optim).
#include <cmath>
#include <type_traits>

#include "core/parallel.h"
#include "ops/cpu/backend.h"
#include "ops/optimizer.h"

namespace stoke::ops::cpu {

namespace {

constexpr int64_t kGrain = 1 << 14;

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

template <class T, bool kWd, bool kMomentum, bool kFirst, bool kNesterov>
void sgd_range(T* __restrict w, const T* __restrict gp, T* __restrict buf, int64_t b, int64_t e,
               T lr, T mom, T damp1, T wd) {
  for (int64_t j = b; j < e; ++j) {
    T d = gp[j];
    if constexpr (kWd) d = d + wd * w[j];
    if constexpr (kMomentum) {
      // torch: buf = clone(d) on the first step, else buf = mom * buf + (1 - dampening) * d
      if constexpr (kFirst)
        buf[j] = d;
      else
        buf[j] = mom * buf[j] + damp1 * d;
      if constexpr (kNesterov)
        d = d + mom * buf[j];
      else
        d = buf[j];
    }
    w[j] = w[j] - lr * d;
  }
}

template <class T, bool kDecoupled, bool kWd>
void adam_range(T* __restrict w, const T* __restrict gp, T* __restrict m, T* __restrict v,
                int64_t b, int64_t e, T b1, T b2, T omb1, T omb2, T wd, T decay, T step_size,
                T bias2_sqrt, T eps) {
  for (int64_t j = b; j < e; ++j) {
    T d = gp[j];
    if constexpr (kDecoupled)
      w[j] = w[j] * decay;
    else if constexpr (kWd)
      d = d + wd * w[j];
    m[j] = m[j] * b1 + omb1 * d;
    v[j] = v[j] * b2 + omb2 * d * d;
    const T denom = std::sqrt(v[j]) / bias2_sqrt + eps;
    w[j] = w[j] - step_size * (m[j] / denom);
  }
}

}  // namespace

void CpuBackend::sgd_step_(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer,
                           const SgdStepOptions& o) {
  const double lr = o.lr, mom = o.momentum, damp = o.dampening, wd = o.weight_decay;
  dispatch_float(param.dtype(), "sgd_step_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* w = param.data<T>();
    const T* gp = grad.data<T>();
    T* buf = mom != 0 ? momentum_buffer.data<T>() : nullptr;
    const T tlr = T(lr), tmom = T(mom), tdamp = T(1 - damp), twd = T(wd);
    with_flag(wd != 0, [&](auto has_wd) {
      with_flag(buf != nullptr, [&](auto has_mom) {
        with_flag(o.first_step, [&](auto first) {
          with_flag(o.nesterov, [&](auto nesterov) {
            parallel_for(0, param.numel(), kGrain, [&](int64_t b, int64_t e) {
              sgd_range<T, has_wd(), has_mom(), first(), nesterov()>(w, gp, buf, b, e, tlr, tmom,
                                                                     tdamp, twd);
            });
          });
        });
      });
    });
  });
}

void CpuBackend::adam_step_(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                            const Tensor& exp_avg_sq, const AdamStepOptions& o) {
  const double lr = o.lr, wd = o.weight_decay, b1 = o.beta1, b2 = o.beta2;
  const AdamStepScalars s = adam_step_scalars(o);
  dispatch_float(param.dtype(), "adam_step_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* w = param.data<T>();
    const T* gp = grad.data<T>();
    T* m = exp_avg.data<T>();
    T* v = exp_avg_sq.data<T>();
    const T tb1 = T(b1), tb2 = T(b2), omb1 = T(1 - b1), omb2 = T(1 - b2), twd = T(wd),
            decay = T(1 - lr * wd), tss = T(s.step_size), tb2s = T(s.bias2_sqrt), teps = T(o.eps);
    with_flag(o.decoupled, [&](auto decoupled) {
      with_flag(wd != 0, [&](auto has_wd) {
        parallel_for(0, param.numel(), kGrain, [&](int64_t b, int64_t e) {
          adam_range<T, decoupled(), has_wd()>(w, gp, m, v, b, e, tb1, tb2, omb1, omb2, twd, decay,
                                               tss, tb2s, teps);
        });
      });
    });
  });
}

}  // namespace stoke::ops::cpu
