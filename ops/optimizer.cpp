// Entry points of the optimizer family: the device-independent checks, then the backend's fused
// update (ops/cpu/optimizer.cpp, ops/cuda/optimizer.cpp).
#include "ops/optimizer.h"

#include <cmath>
#include <map>
#include <string>
#include <utility>

#include "ops/backend.h"
#include "ops/check.h"

namespace stoke::ops {

namespace {

bool is_optimizer_dtype(DType d) {
  return d == DType::f32 || d == DType::f64 || d == DType::f16 || d == DType::bf16;
}

// params[i] (`where` names it in messages: "" for a single tensor, else " <i>").
void check_param(const char* op, const Tensor& param, const std::string& where) {
  STOKE_CHECK(param.defined(), op, "expected a defined param", where);
  STOKE_CHECK(is_optimizer_dtype(param.dtype()), op, "param", where, " has dtype ", param.dtype(),
              "; expected f32, f64, f16 or bf16");
  STOKE_CHECK(param.is_contiguous(), op, "param", where,
              " must be contiguous (it is updated in place)");
  check_inplace_target(op, param);
}

// grad, or a piece of state (`in_place`), must match param; state is also written in place.
void check_like_param(const char* op, const Tensor& t, const char* name, const std::string& where,
                      const Tensor& param, bool in_place) {
  STOKE_CHECK(t.defined(), op, "expected a defined ", name, where);
  STOKE_CHECK(t.dtype() == param.dtype() && t.shape() == param.shape(), op, name, where, " is ",
              t.dtype(), " ", t.shape(), ", expected the param's ", param.dtype(), " ",
              param.shape());
  if (!in_place) return;
  STOKE_CHECK(t.is_contiguous(), op, name, where, " must be contiguous (it is updated in place)");
  STOKE_CHECK(t.numel() == 0 || t.data_ptr() != param.data_ptr(), op, name, where,
              " is the param's own memory");
  check_inplace_target(op, t);
}

void check_lengths(const char* op, size_t n,
                   std::initializer_list<std::pair<const char*, size_t>> lists) {
  for (const auto& [name, len] : lists)
    STOKE_CHECK(len == n, op, "expected ", n, " ", name, " (one per param), got ", len);
}

// Every tensor of the call on the first param's device, and the params of one dtype.
void check_same(const char* op, const std::vector<Tensor>& params,
                std::initializer_list<const std::vector<Tensor>*> lists) {
  if (params.empty()) return;
  const Tensor& p0 = params[0];
  for (size_t i = 0; i < params.size(); ++i)
    STOKE_CHECK(params[i].dtype() == p0.dtype(), op, "param ", i, " is ", params[i].dtype(),
                ", param 0 is ", p0.dtype(), ": one dtype per call");
  for (const auto* list : lists)
    for (const Tensor& t : *list)
      STOKE_CHECK(!t.defined() || t.device() == p0.device(), op,
                  "expected all tensors on the same device, got ", p0.device(), " and ",
                  t.device());
}

std::string where_of(size_t n, size_t i) {
  return n == 1 ? std::string() : ::stoke::detail::str_cat(" ", i);
}

// The gradients the backends read: contiguous (a strided one is copied).
std::vector<Tensor> contiguous_all(const std::vector<Tensor>& ts) {
  std::vector<Tensor> r;
  r.reserve(ts.size());
  for (const Tensor& t : ts) r.push_back(t.is_contiguous() ? t : t.contiguous());
  return r;
}

// The state lists may not alias each other either (the backends write them in place).
void check_distinct(const char* op, const Tensor& a, const char* an, const Tensor& b,
                    const char* bn, const std::string& where) {
  STOKE_CHECK(a.numel() == 0 || a.data_ptr() != b.data_ptr(), op, an, " and ", bn, where,
              " are the same memory");
}

// A one-element f32 tensor on `device` (found_inf, the scaler's scalars).
void check_device_scalar(const char* op, const Tensor& t, const char* name, Device device) {
  STOKE_CHECK(
      t.defined() && t.dtype() == DType::f32 && t.numel() == 1, op, "expected ", name,
      " to be a one-element f32 tensor, got ",
      t.defined() ? ::stoke::detail::str_cat(t.dtype(), " ", t.shape()) : std::string("none"));
  STOKE_CHECK(t.device() == device, op, name, " is on ", t.device(), ", expected ", device);
}

// The device-side decision of a step (found_inf, step_counts): validated; true when it is used.
bool check_device_decision(const char* op, const Tensor& found_inf,
                           const std::vector<Tensor>& step_counts,
                           const std::vector<Tensor>& params) {
  if (!found_inf.defined() && step_counts.empty()) return false;
  if (found_inf.defined()) check_device_scalar(op, found_inf, "found_inf", params[0].device());
  if (!step_counts.empty()) {
    check_lengths(op, params.size(), {{"step_counts", step_counts.size()}});
    for (size_t i = 0; i < params.size(); ++i) {
      check_device_scalar(op, step_counts[i], "a step count", params[i].device());
      check_inplace_target(op, step_counts[i]);
    }
  }
  return true;
}

// lr_tensor, when given: a one-element f64 tensor on `device`.
void check_lr_tensor(const char* op, const Tensor& t, Device device) {
  if (!t.defined()) return;
  STOKE_CHECK(t.dtype() == DType::f64 && t.numel() == 1, op,
              "expected lr_tensor to be a one-element f64 tensor, got ", t.dtype(), " ", t.shape());
  STOKE_CHECK(t.device() == device, op, "lr_tensor is on ", t.device(), ", expected ", device);
}

// On the CPU the device-side decision is taken here, reading the flag (a host value): true when
// the step is skipped.
bool cpu_found_inf(const Tensor& found_inf) {
  return found_inf.defined() && *found_inf.data<float>() != 0.f;
}

// On the CPU, advances the step counts and groups the parameters by their new count.
std::map<float, std::vector<size_t>> advance_cpu_counts(const std::vector<Tensor>& counts) {
  std::map<float, std::vector<size_t>> by_count;
  for (size_t i = 0; i < counts.size(); ++i) {
    float& c = *counts[i].data<float>();
    c += 1.f;
    by_count[c].push_back(i);
  }
  return by_count;
}

template <class T>
std::vector<T> pick(const std::vector<T>& v, const std::vector<size_t>& idx) {
  std::vector<T> r;
  if (v.empty()) return r;
  r.reserve(idx.size());
  for (size_t i : idx) r.push_back(v[i]);
  return r;
}

}  // namespace

void fused_sgd_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                const std::vector<Tensor>& momentum_buffers, const SgdStepOptions& o) {
  const char* op = params.size() == 1 ? "sgd_step_" : "fused_sgd_";
  STOKE_CHECK(o.momentum >= 0, op, "invalid momentum ", o.momentum);
  STOKE_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0), op,
              "nesterov momentum requires a momentum and zero dampening");
  const bool momentum = o.momentum != 0;
  const size_t n = params.size();
  check_lengths(op, n, {{"grads", grads.size()}});
  if (momentum) check_lengths(op, n, {{"momentum_buffers", momentum_buffers.size()}});
  for (size_t i = 0; i < n; ++i) {
    const std::string w = where_of(n, i);
    check_param(op, params[i], w);
    check_like_param(op, grads[i], "grad", w, params[i], false);
    if (momentum) check_like_param(op, momentum_buffers[i], "momentum_buffer", w, params[i], true);
  }
  const std::vector<Tensor> bufs = momentum ? momentum_buffers : std::vector<Tensor>();
  check_same(op, params, {&grads, &bufs});
  if (n == 0) return;
  const bool device_decides = check_device_decision(op, o.found_inf, o.step_counts, params);
  check_lr_tensor(op, o.lr_tensor, params[0].device());
  // The backends read contiguous gradients (clip_grad_norm_ and accumulation keep them so).
  const std::vector<Tensor> g = contiguous_all(grads);
  // On the CPU the device's values are host memory: read here, the kernels take plain options.
  if ((device_decides || o.lr_tensor.defined()) && params[0].device().is_cpu()) {
    if (cpu_found_inf(o.found_inf)) return;
    SgdStepOptions plain = o;
    if (o.lr_tensor.defined()) plain.lr = *o.lr_tensor.data<double>();
    plain.lr_tensor = Tensor();
    plain.found_inf = Tensor();
    plain.step_counts.clear();
    if (o.step_counts.empty()) return dispatch(op, {&params[0]}).fused_sgd_(params, g, bufs, plain);
    for (const auto& [count, idx] : advance_cpu_counts(o.step_counts)) {
      plain.first_step = count == 1.f;
      dispatch(op, {&params[0]})
          .fused_sgd_(pick(params, idx), pick(g, idx), pick(bufs, idx), plain);
    }
    return;
  }
  return dispatch(op, {&params[0]}).fused_sgd_(params, g, bufs, o);
}

void fused_adam_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                 const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                 const AdamStepOptions& o) {
  fused_adam_(params, grads, exp_avgs, exp_avg_sqs, {}, o);
}

void fused_adam_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                 const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                 const std::vector<Tensor>& max_exp_avg_sqs, const AdamStepOptions& o) {
  const char* op = params.size() == 1 ? "adam_step_" : "fused_adam_";
  STOKE_CHECK(o.step >= 1, op, "expected step >= 1 (the update's number), got ", o.step);
  const size_t n = params.size();
  check_lengths(op, n,
                {{"grads", grads.size()},
                 {"exp_avgs", exp_avgs.size()},
                 {"exp_avg_sqs", exp_avg_sqs.size()}});
  if (o.amsgrad)
    check_lengths(op, n, {{"max_exp_avg_sqs (amsgrad)", max_exp_avg_sqs.size()}});
  else
    STOKE_CHECK(max_exp_avg_sqs.empty(), op, "max_exp_avg_sqs given without amsgrad");
  for (size_t i = 0; i < n; ++i) {
    const std::string w = where_of(n, i);
    check_param(op, params[i], w);
    check_like_param(op, grads[i], "grad", w, params[i], false);
    check_like_param(op, exp_avgs[i], "exp_avg", w, params[i], true);
    check_like_param(op, exp_avg_sqs[i], "exp_avg_sq", w, params[i], true);
    check_distinct(op, exp_avgs[i], "exp_avg", exp_avg_sqs[i], "exp_avg_sq", w);
    if (o.amsgrad) {
      check_like_param(op, max_exp_avg_sqs[i], "max_exp_avg_sq", w, params[i], true);
      check_distinct(op, exp_avgs[i], "exp_avg", max_exp_avg_sqs[i], "max_exp_avg_sq", w);
      check_distinct(op, exp_avg_sqs[i], "exp_avg_sq", max_exp_avg_sqs[i], "max_exp_avg_sq", w);
    }
  }
  check_same(op, params, {&grads, &exp_avgs, &exp_avg_sqs, &max_exp_avg_sqs});
  if (n == 0) return;
  const bool device_decides = check_device_decision(op, o.found_inf, o.step_counts, params);
  check_lr_tensor(op, o.lr_tensor, params[0].device());
  const std::vector<Tensor> g = contiguous_all(grads);
  if ((device_decides || o.lr_tensor.defined()) && params[0].device().is_cpu()) {
    if (cpu_found_inf(o.found_inf)) return;
    AdamStepOptions plain = o;
    if (o.lr_tensor.defined()) plain.lr = *o.lr_tensor.data<double>();
    plain.lr_tensor = Tensor();
    plain.found_inf = Tensor();
    plain.step_counts.clear();
    if (o.step_counts.empty())
      return dispatch(op, {&params[0]})
          .fused_adam_(params, g, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, plain);
    for (const auto& [count, idx] : advance_cpu_counts(o.step_counts)) {
      plain.step = static_cast<int64_t>(count);
      dispatch(op, {&params[0]})
          .fused_adam_(pick(params, idx), pick(g, idx), pick(exp_avgs, idx), pick(exp_avg_sqs, idx),
                       pick(max_exp_avg_sqs, idx), plain);
    }
    return;
  }
  return dispatch(op, {&params[0]})
      .fused_adam_(params, g, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, o);
}

void amp_update_scale_(const Tensor& scale, const Tensor& growth_tracker, const Tensor& skipped,
                       const Tensor& collapsed, const Tensor& found_inf,
                       const AmpUpdateScaleOptions& o) {
  const char* op = "amp_update_scale_";
  STOKE_CHECK(scale.defined(), op, "expected a defined scale");
  const Device d = scale.device();
  const std::pair<const Tensor*, const char*> scalars[] = {{&scale, "scale"},
                                                           {&growth_tracker, "growth_tracker"},
                                                           {&skipped, "skipped"},
                                                           {&collapsed, "collapsed"},
                                                           {&found_inf, "found_inf"}};
  for (const auto& [t, name] : scalars) {
    check_device_scalar(op, *t, name, d);
    if (t != &found_inf) check_inplace_target(op, *t);
  }
  STOKE_CHECK(o.growth_factor > 1 && o.backoff_factor > 0 && o.backoff_factor < 1 &&
                  o.growth_interval >= 1 && o.min_scale >= 0 && o.max_scale > 0,
              op, "expected growth_factor > 1, 0 < backoff_factor < 1, growth_interval >= 1, got ",
              o.growth_factor, ", ", o.backoff_factor, ", ", o.growth_interval);
  return dispatch(op, {&scale})
      .amp_update_scale_(scale, growth_tracker, skipped, collapsed, found_inf, o);
}

void sgd_step_(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer,
               const SgdStepOptions& o) {
  fused_sgd_({param}, {grad}, {momentum_buffer}, o);
}

void adam_step_(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                const Tensor& exp_avg_sq, const AdamStepOptions& o) {
  fused_adam_({param}, {grad}, {exp_avg}, {exp_avg_sq}, o);
}

void adam_step_(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                const Tensor& exp_avg_sq, const Tensor& max_exp_avg_sq, const AdamStepOptions& o) {
  STOKE_CHECK(o.amsgrad, "adam_step_", "max_exp_avg_sq given without amsgrad");
  fused_adam_({param}, {grad}, {exp_avg}, {exp_avg_sq}, {max_exp_avg_sq}, o);
}

void non_finite_check_and_unscale_(const std::vector<Tensor>& grads, const Tensor& found_inf,
                                   const Tensor& inv_scale) {
  const char* op = "non_finite_check_and_unscale_";
  const std::pair<const Tensor*, const char*> scalars[] = {{&found_inf, "found_inf"},
                                                           {&inv_scale, "inv_scale"}};
  for (const auto& [t, name] : scalars) {
    STOKE_CHECK(
        t->defined() && t->dtype() == DType::f32 && t->numel() == 1, op, "expected ", name,
        " to be a one-element f32 tensor, got ",
        t->defined() ? ::stoke::detail::str_cat(t->dtype(), " ", t->shape()) : std::string("none"));
  }
  STOKE_CHECK(inv_scale.device() == found_inf.device(), op, "found_inf is on ", found_inf.device(),
              ", inv_scale on ", inv_scale.device());
  check_inplace_target(op, found_inf);
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor& g = grads[i];
    STOKE_CHECK(g.defined(), op, "grad ", i, " is undefined");
    STOKE_CHECK(is_floating(g.dtype()), op, "grad ", i, " has dtype ", g.dtype());
    STOKE_CHECK(g.is_contiguous(), op, "grad ", i, " must be contiguous (it is unscaled in place)");
    STOKE_CHECK(g.device() == found_inf.device(), op, "grad ", i, " is on ", g.device(),
                ", found_inf on ", found_inf.device());
    check_inplace_target(op, g);
  }
  return dispatch(op, {&found_inf}).non_finite_check_and_unscale_(grads, found_inf, inv_scale);
}

Tensor sum_of_squares(const std::vector<Tensor>& tensors) {
  const char* op = "sum_of_squares";
  for (size_t i = 0; i < tensors.size(); ++i) {
    STOKE_CHECK(tensors[i].defined() && is_floating(tensors[i].dtype()), op, "tensor ", i,
                " is not a defined floating tensor");
    STOKE_CHECK(tensors[i].device() == tensors[0].device(), op, "tensor ", i, " is on ",
                tensors[i].device(), ", tensor 0 on ", tensors[0].device());
  }
  if (tensors.empty()) return cpu_backend().sum_of_squares(tensors);
  const std::vector<Tensor> c = contiguous_all(tensors);
  return dispatch(op, {&c[0]}).sum_of_squares(c);
}

AdamStepScalars adam_step_scalars(const AdamStepOptions& o) {
  const double bias1 = 1 - std::pow(o.beta1, static_cast<double>(o.step));
  return {.step_size = o.lr / bias1,
          .bias2_sqrt = std::sqrt(1 - std::pow(o.beta2, static_cast<double>(o.step))),
          .bias1 = bias1};
}

}  // namespace stoke::ops
