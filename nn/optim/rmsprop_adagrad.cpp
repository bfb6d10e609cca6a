// RMSprop and Adagrad: torch.optim's single-tensor updates, op for op (the same in-place ops in
// the same order, so the same roundings), on the parameter's device.
#include <string>

#include "core/grad_mode.h"
#include "nn/optim/optimizer.h"
#include "nn/optim/optimizer_state.h"
#include "ops/creation.h"
#include "ops/elementwise.h"

namespace stoke::nn::optim {

using namespace detail;

namespace {

void check_full_precision(const std::vector<Tensor>& params, const char* name) {
  for (const Tensor& p : params)
    STOKE_CHECK(p.dtype() == DType::f32 || p.dtype() == DType::f64, name,
                "takes f32 and f64 parameters, got one of ", p.dtype(), " and shape ", p.shape());
}

Tensor step_tensor(int64_t step) {
  Tensor t = empty({}, {.dtype = DType::i64});
  *t.data<int64_t>() = step;
  return t;
}

// With keep_lr_on_device: -lr as a 0-d tensor of dtype `dtype` on the rate's device (0-d
// broadcasts to any parameter, a 0-d one too), made by kernels from the group's f64 rate (the
// cast rounds as the host's does; the negation is exact), so that a replay reads the current rate.
Tensor negated_rate(const Tensor& lr_device, DType dtype) {
  return ops::mul(lr_device.to(dtype), -1.0).view({});
}

// A parameter's step count on its device: made from the host's count at the first step with the
// rate on the device (a fill, no read), counted there from then on.
Tensor& device_count(std::vector<Tensor>& counts, const std::vector<int64_t>& steps, size_t i,
                     const Tensor& p) {
  if (counts.empty()) counts.resize(steps.size());
  if (!counts[i].defined())
    counts[i] = full({1}, static_cast<double>(steps[i]), {.device = p.device()});  // f32: exact
  return counts[i];
}

// Each parameter's step count for a state_dict: the device's count where one exists (a read).
int64_t saved_step(const std::vector<Tensor>& counts, const std::vector<int64_t>& steps, size_t i) {
  return counts.empty() || !counts[i].defined() ? steps[i] : static_cast<int64_t>(counts[i].item());
}

// The gradient with L2 weight decay added (a new tensor, as torch's grad.add(param)).
Tensor decayed_grad(const Tensor& p, double weight_decay) {
  Tensor g = contiguous_grad(p);
  if (weight_decay != 0) g = ops::add_(g.clone(), p, weight_decay);
  return g;
}

}  // namespace

RMSprop::RMSprop(std::vector<Tensor> params, RMSpropOptions o)
    : RMSprop(std::vector<ParamGroup>{{.params = std::move(params)}}, o) {}

RMSprop::RMSprop(std::vector<ParamGroup> groups, RMSpropOptions o)
    : Optimizer(std::move(groups), o.lr, o.weight_decay, "RMSprop"),
      options_(o),
      square_avg_(params_.size()),
      momentum_buffer_(params_.size()),
      grad_avg_(params_.size()),
      steps_(params_.size(), 0) {
  STOKE_CHECK(o.alpha >= 0 && o.alpha <= 1 && o.eps >= 0 && o.momentum >= 0, "RMSprop",
              "invalid alpha ", o.alpha, ", eps ", o.eps, " or momentum ", o.momentum);
  check_full_precision(params_, "RMSprop");
}

void RMSprop::step() {
  NoGradGuard no_grad;
  const RMSpropOptions& o = options_;
  for (const Group& group : groups_) {
    Tensor neg_lr;  // with the rate on the device: -lr in the parameters' dtype
    for (size_t i = group.begin; i < group.end; ++i) {
      const Tensor& p = params_[i];
      if (!p.grad().defined()) continue;
      const Tensor g = decayed_grad(p, group.weight_decay);
      if (!square_avg_[i].defined()) {
        square_avg_[i] = zeros_like_param(p);
        if (o.momentum > 0) momentum_buffer_[i] = zeros_like_param(p);
        if (o.centered) grad_avg_[i] = zeros_like_param(p);
      }
      if (lr_on_device_) {
        ops::add_(device_count(step_counts_, steps_, i, p), 1.0);
        if (!neg_lr.defined() || neg_lr.dtype() != p.dtype())
          neg_lr = negated_rate(group.lr_device, p.dtype());
      } else {
        ++steps_[i];
      }
      ops::addcmul_(ops::mul_(square_avg_[i], o.alpha), g, g, 1 - o.alpha);
      Tensor avg;
      if (o.centered) {
        ops::add_(ops::mul_(grad_avg_[i], o.alpha), g, 1 - o.alpha);
        avg = ops::sqrt_(ops::addcmul_(square_avg_[i].clone(), grad_avg_[i], grad_avg_[i], -1));
      } else {
        avg = ops::sqrt_(square_avg_[i].clone());
      }
      ops::add_(avg, o.eps);
      if (o.momentum > 0) {
        ops::addcdiv_(ops::mul_(momentum_buffer_[i], o.momentum), g, avg);
        if (lr_on_device_)
          ops::addcmul_(p.detach(), momentum_buffer_[i], neg_lr);  // torch: param.add_(buf * -lr)
        else
          ops::add_(p.detach(), momentum_buffer_[i], -group.lr);
      } else if (lr_on_device_) {
        ops::addcdiv_(p.detach(), ops::mul(g, neg_lr), avg);  // torch: addcdiv_(grad * -lr, avg)
      } else {
        ops::addcdiv_(p.detach(), g, avg, -group.lr);
      }
    }
  }
}

NamedTensors RMSprop::state_dict() const {
  NamedTensors out;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!square_avg_[i].defined()) continue;
    const std::string k = "state." + std::to_string(i) + ".";
    out.emplace_back(k + "step", step_tensor(saved_step(step_counts_, steps_, i)));
    out.emplace_back(k + "square_avg", square_avg_[i]);
    if (momentum_buffer_[i].defined()) out.emplace_back(k + "momentum_buffer", momentum_buffer_[i]);
    if (grad_avg_[i].defined()) out.emplace_back(k + "grad_avg", grad_avg_[i]);
  }
  return out;
}

void RMSprop::load_state_dict(const NamedTensors& state) {
  const char* op = "RMSprop::load_state_dict";
  auto m = by_name(state);
  step_counts_.clear();  // made again from the loaded steps
  const Tensor step_like = empty({}, {.dtype = DType::i64});
  for (size_t i = 0; i < params_.size(); ++i) {
    const std::string k = "state." + std::to_string(i) + ".";
    square_avg_[i] = momentum_buffer_[i] = grad_avg_[i] = Tensor();
    steps_[i] = 0;
    if (!m.count(k + "square_avg")) continue;
    steps_[i] = *take(m, k + "step", step_like, op).data<int64_t>();
    square_avg_[i] = take(m, k + "square_avg", params_[i], op);
    if (options_.momentum > 0) momentum_buffer_[i] = take(m, k + "momentum_buffer", params_[i], op);
    if (options_.centered) grad_avg_[i] = take(m, k + "grad_avg", params_[i], op);
  }
  check_no_leftovers(m, op);
}

Adagrad::Adagrad(std::vector<Tensor> params, AdagradOptions o)
    : Adagrad(std::vector<ParamGroup>{{.params = std::move(params)}}, o) {}

Adagrad::Adagrad(std::vector<ParamGroup> groups, AdagradOptions o)
    : Optimizer(std::move(groups), o.lr, o.weight_decay, "Adagrad"),
      options_(o),
      sum_(params_.size()),
      steps_(params_.size(), 0) {
  STOKE_CHECK(o.lr_decay >= 0 && o.initial_accumulator_value >= 0 && o.eps >= 0, "Adagrad",
              "invalid lr_decay ", o.lr_decay, ", initial_accumulator_value ",
              o.initial_accumulator_value, " or eps ", o.eps);
  check_full_precision(params_, "Adagrad");
}

void Adagrad::step() {
  NoGradGuard no_grad;
  for (const Group& group : groups_) {
    Tensor neg_lr;  // with the rate on the device: -lr in the parameters' dtype, once per group
    for (size_t i = group.begin; i < group.end; ++i) {
      const Tensor& p = params_[i];
      if (!p.grad().defined()) continue;
      const Tensor g = decayed_grad(p, group.weight_decay);
      if (!sum_[i].defined())
        sum_[i] = full(p.shape(), options_.initial_accumulator_value,
                       {.dtype = p.dtype(), .device = p.device()});
      ops::addcmul_(sum_[i], g, g, 1);
      const Tensor std = ops::add_(ops::sqrt_(sum_[i].clone()), options_.eps);
      if (lr_on_device_) {
        // clr = lr / (1 + (step - 1) lr_decay), in the parameter's dtype on the device (the
        // device's elementwise kernels have no f64 on cuda; the host computes it in f64).
        const Tensor& count = device_count(step_counts_, steps_, i, p);
        ops::add_(count, 1.0);
        if (!neg_lr.defined() || neg_lr.dtype() != p.dtype())
          neg_lr = negated_rate(group.lr_device, p.dtype());
        Tensor neg_clr = neg_lr;
        if (options_.lr_decay != 0)
          neg_clr = ops::div(
              neg_clr,
              ops::add_(ops::mul_(ops::sub(count.to(p.dtype()), 1.0), options_.lr_decay), 1.0)
                  .view({}));
        // torch's form for a tensor rate: param.addcdiv_(grad * -clr, std).
        ops::addcdiv_(p.detach(), ops::mul(g, neg_clr), std);
      } else {
        const int64_t step = ++steps_[i];
        const double clr = group.lr / (1 + static_cast<double>(step - 1) * options_.lr_decay);
        ops::addcdiv_(p.detach(), g, std, -clr);
      }
    }
  }
}

NamedTensors Adagrad::state_dict() const {
  NamedTensors out;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!sum_[i].defined()) continue;
    const std::string k = "state." + std::to_string(i) + ".";
    out.emplace_back(k + "step", step_tensor(saved_step(step_counts_, steps_, i)));
    out.emplace_back(k + "sum", sum_[i]);
  }
  return out;
}

void Adagrad::load_state_dict(const NamedTensors& state) {
  const char* op = "Adagrad::load_state_dict";
  auto m = by_name(state);
  step_counts_.clear();  // made again from the loaded steps
  const Tensor step_like = empty({}, {.dtype = DType::i64});
  for (size_t i = 0; i < params_.size(); ++i) {
    const std::string k = "state." + std::to_string(i) + ".";
    sum_[i] = Tensor();
    steps_[i] = 0;
    if (!m.count(k + "sum")) continue;
    steps_[i] = *take(m, k + "step", step_like, op).data<int64_t>();
    sum_[i] = take(m, k + "sum", params_[i], op);
  }
  check_no_leftovers(m, op);
}

}  // namespace stoke::nn::optim
