// The optimizer family on the CPU: one fused loop per rule over contiguous f32/f64 tensors, split
// over the thread pool. The arithmetic is torch's single-tensor rule in the parameter's dtype,
// operation for operation, so that three steps match torch.optim's fixtures (tests/nn/test_optim).
#include <cmath>

#include "core/parallel.h"
#include "ops/cpu/backend.h"
#include "ops/optimizer.h"

namespace stoke::ops::cpu {

namespace {

constexpr int64_t kGrain = 1 << 14;

}  // namespace

void CpuBackend::sgd_step_(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer,
                           const SgdStepOptions& o) {
  const double lr = o.lr, mom = o.momentum, damp = o.dampening, wd = o.weight_decay;
  const bool nesterov = o.nesterov, first = o.first_step;
  dispatch_float(param.dtype(), "sgd_step_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* w = param.data<T>();
    const T* gp = grad.data<T>();
    T* buf = mom != 0 ? momentum_buffer.data<T>() : nullptr;
    const T tlr = T(lr), tmom = T(mom), tdamp = T(1 - damp), twd = T(wd);
    parallel_for(0, param.numel(), kGrain, [&](int64_t b, int64_t e) {
      for (int64_t j = b; j < e; ++j) {
        T d = gp[j];
        if (wd != 0) d = d + twd * w[j];
        if (buf) {
          // torch: buf = clone(d) on the first step, else buf = mom * buf + (1 - dampening) * d
          buf[j] = first ? d : tmom * buf[j] + tdamp * d;
          d = nesterov ? d + tmom * buf[j] : buf[j];
        }
        w[j] = w[j] - tlr * d;
      }
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
    const bool decoupled = o.decoupled;
    parallel_for(0, param.numel(), kGrain, [&](int64_t b, int64_t e) {
      for (int64_t j = b; j < e; ++j) {
        T d = gp[j];
        if (decoupled) {
          w[j] = w[j] * decay;
        } else if (wd != 0) {
          d = d + twd * w[j];
        }
        m[j] = m[j] * tb1 + omb1 * d;
        v[j] = v[j] * tb2 + omb2 * d * d;
        const T denom = std::sqrt(v[j]) / tb2s + teps;
        w[j] = w[j] - tss * (m[j] / denom);
      }
    });
  });
}

}  // namespace stoke::ops::cpu
