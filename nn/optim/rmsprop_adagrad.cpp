// RMSprop and Adagrad: torch.optim's single-tensor updates, op for op (the same in-place ops in
// the same order, so the same roundings), on the parameter's device.
#include <string>
#include <utility>
#include <vector>

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

// -lr in the parameter's dtype on its device, for the device form of the update: from the
// group's device rate (keep_lr_on_device), else a fill of the host's rate (no read either way).
Tensor negated_rate_for(const Tensor& lr_device, double lr, const Tensor& p) {
  if (lr_device.defined()) return negated_rate(lr_device, p.dtype());
  return full({}, -lr, {.dtype = p.dtype(), .device = p.device()});  // rounds as the cast does
}

// step_if_finite's skip, decided on the device. The values a step overwrites are copied first
// and put back where found_inf is set: where() selects without rounding, so a skipped step leaves
// every bit as it was (the update computed from an inf/NaN gradient is thrown away, never mixed
// in), and a taken step equals step()'s. The step counts advance by 1 - found_inf. For step()
// (no flag) it saves nothing and counts 1.
class DeviceSkip {
 public:
  DeviceSkip(const Tensor* found_inf, const std::vector<Tensor>& params, const char* op) {
    if (!found_inf) return;
    STOKE_CHECK(found_inf->defined() && found_inf->numel() == 1 && found_inf->dtype() == DType::f32,
                op, "expected a one-element f32 found_inf tensor");
    for (const Tensor& p : params)
      STOKE_CHECK(p.device() == found_inf->device(), op, "found_inf is on ", found_inf->device(),
                  " and a parameter of shape ", p.shape(), " on ", p.device(),
                  ": the skip is decided on the parameters' device");
    skip_ = ops::ne(*found_inf, 0.0).view({});
    keep_ = ops::sub(1.0, *found_inf);
  }
  bool active() const { return skip_.defined(); }
  void save(const Tensor& t) {
    if (active()) saved_.emplace_back(t, t.clone());
  }
  void count(Tensor& step_count) const {
    if (active())
      ops::add_(step_count, keep_);
    else
      ops::add_(step_count, 1.0);
  }
  // After the update of one parameter: its saved values back where the flag is set.
  void restore() {
    for (auto& [t, before] : saved_) t.copy_(ops::where(skip_, before, t));
    saved_.clear();
  }

 private:
  Tensor skip_, keep_;  // 0-d bool found_inf != 0; one-element f32 1 - found_inf
  std::vector<std::pair<Tensor, Tensor>> saved_;
};

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
  update(nullptr);
}

void RMSprop::step_if_finite(const Tensor& found_inf) {
  update(&found_inf);
}

void RMSprop::update(const Tensor* found_inf) {
  NoGradGuard no_grad;
  const RMSpropOptions& o = options_;
  DeviceSkip skip(found_inf, params_, "RMSprop::step_if_finite");
  // The device form (counts on the device, the rate as a one-element tensor): with the rate on
  // the device, under a skip decided there, and from then on (the counts hold the truth).
  const bool device_form = lr_on_device_ || skip.active() || !step_counts_.empty();
  for (const Group& group : groups_) {
    Tensor neg_lr;  // in the device form: -lr in the parameters' dtype, once per group
    for (size_t i = group.begin; i < group.end; ++i) {
      const Tensor& p = params_[i];
      if (!p.grad().defined()) continue;
      const Tensor g = decayed_grad(p, group.weight_decay);
      if (!square_avg_[i].defined()) {
        square_avg_[i] = zeros_like_param(p);
        if (o.momentum > 0) momentum_buffer_[i] = zeros_like_param(p);
        if (o.centered) grad_avg_[i] = zeros_like_param(p);
      }
      if (device_form) {
        skip.count(device_count(step_counts_, steps_, i, p));
        if (!neg_lr.defined() || neg_lr.dtype() != p.dtype())
          neg_lr = negated_rate_for(group.lr_device, group.lr, p);
      } else {
        ++steps_[i];
      }
      skip.save(square_avg_[i]);
      if (o.momentum > 0) skip.save(momentum_buffer_[i]);
      if (o.centered) skip.save(grad_avg_[i]);
      skip.save(p.detach());
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
        if (device_form)
          ops::addcmul_(p.detach(), momentum_buffer_[i], neg_lr);  // torch: param.add_(buf * -lr)
        else
          ops::add_(p.detach(), momentum_buffer_[i], -group.lr);
      } else if (device_form) {
        ops::addcdiv_(p.detach(), ops::mul(g, neg_lr), avg);  // torch: addcdiv_(grad * -lr, avg)
      } else {
        ops::addcdiv_(p.detach(), g, avg, -group.lr);
      }
      skip.restore();
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
  update(nullptr);
}

void Adagrad::step_if_finite(const Tensor& found_inf) {
  update(&found_inf);
}

void Adagrad::update(const Tensor* found_inf) {
  NoGradGuard no_grad;
  DeviceSkip skip(found_inf, params_, "Adagrad::step_if_finite");
  // The device form, as RMSprop's (above).
  const bool device_form = lr_on_device_ || skip.active() || !step_counts_.empty();
  for (const Group& group : groups_) {
    Tensor neg_lr;  // in the device form: -lr in the parameters' dtype, once per group
    for (size_t i = group.begin; i < group.end; ++i) {
      const Tensor& p = params_[i];
      if (!p.grad().defined()) continue;
      const Tensor g = decayed_grad(p, group.weight_decay);
      if (!sum_[i].defined())
        sum_[i] = full(p.shape(), options_.initial_accumulator_value,
                       {.dtype = p.dtype(), .device = p.device()});
      skip.save(sum_[i]);
      skip.save(p.detach());
      ops::addcmul_(sum_[i], g, g, 1);
      const Tensor std = ops::add_(ops::sqrt_(sum_[i].clone()), options_.eps);
      if (device_form) {
        // clr = lr / (1 + (step - 1) lr_decay), in the parameter's dtype on the device (the
        // device's elementwise kernels have no f64 on cuda; the host computes it in f64).
        Tensor& count = device_count(step_counts_, steps_, i, p);
        skip.count(count);
        if (!neg_lr.defined() || neg_lr.dtype() != p.dtype())
          neg_lr = negated_rate_for(group.lr_device, group.lr, p);
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
      skip.restore();
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
