// Entry points of the optimizer family: the device-independent checks, then the backend's fused
// update (ops/cpu/optimizer.cpp, ops/cuda/optimizer.cpp).
#include "ops/optimizer.h"

#include <cmath>

#include "ops/backend.h"
#include "ops/check.h"

namespace stoke::ops {

namespace {

void check_param(const char* op, const Tensor& param) {
  STOKE_CHECK(param.defined(), op, "expected a defined param");
  STOKE_CHECK(param.dtype() == DType::f32 || param.dtype() == DType::f64, op, "param has dtype ",
              param.dtype(), "; master weights are f32 (or f64)");
  STOKE_CHECK(param.is_contiguous(), op, "param must be contiguous (it is updated in place)");
  check_inplace_target(op, param);
}

// grad, or a piece of state (`in_place`), must match param; state is also written in place.
void check_like_param(const char* op, const Tensor& t, const char* name, const Tensor& param,
                      bool in_place) {
  STOKE_CHECK(t.defined(), op, "expected a defined ", name);
  STOKE_CHECK(t.dtype() == param.dtype() && t.shape() == param.shape(), op, name, " is ", t.dtype(),
              " ", t.shape(), ", expected the param's ", param.dtype(), " ", param.shape());
  if (!in_place) return;
  STOKE_CHECK(t.is_contiguous(), op, name, " must be contiguous (it is updated in place)");
  STOKE_CHECK(t.numel() == 0 || t.data_ptr() != param.data_ptr(), op, name,
              " is the param's own memory");
  check_inplace_target(op, t);
}

}  // namespace

void sgd_step_(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer,
               const SgdStepOptions& o) {
  const char* op = "sgd_step_";
  check_param(op, param);
  check_like_param(op, grad, "grad", param, false);
  STOKE_CHECK(o.momentum >= 0, op, "invalid momentum ", o.momentum);
  STOKE_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0), op,
              "nesterov momentum requires a momentum and zero dampening");
  const bool momentum = o.momentum != 0;
  if (momentum) check_like_param(op, momentum_buffer, "momentum_buffer", param, true);
  // The backends read contiguous gradients (clip_grad_norm_ and accumulation keep them so).
  const Tensor g = grad.is_contiguous() ? grad : grad.contiguous();
  const Tensor buf = momentum ? momentum_buffer : Tensor();
  return dispatch(op, {&param, &g, &buf}).sgd_step_(param, g, buf, o);
}

void adam_step_(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                const Tensor& exp_avg_sq, const AdamStepOptions& o) {
  const char* op = "adam_step_";
  check_param(op, param);
  check_like_param(op, grad, "grad", param, false);
  check_like_param(op, exp_avg, "exp_avg", param, true);
  check_like_param(op, exp_avg_sq, "exp_avg_sq", param, true);
  STOKE_CHECK(exp_avg.numel() == 0 || exp_avg.data_ptr() != exp_avg_sq.data_ptr(), op,
              "exp_avg and exp_avg_sq are the same memory");
  STOKE_CHECK(o.step >= 1, op, "expected step >= 1 (the update's number), got ", o.step);
  const Tensor g = grad.is_contiguous() ? grad : grad.contiguous();
  return dispatch(op, {&param, &g, &exp_avg, &exp_avg_sq})
      .adam_step_(param, g, exp_avg, exp_avg_sq, o);
}

AdamStepScalars adam_step_scalars(const AdamStepOptions& o) {
  const double bias1 = 1 - std::pow(o.beta1, static_cast<double>(o.step));
  return {.step_size = o.lr / bias1,
          .bias2_sqrt = std::sqrt(1 - std::pow(o.beta2, static_cast<double>(o.step)))};
}

}  // namespace stoke::ops
