#include "nn/optim/optimizer.h"

#include "nn/optim/optimizer_state.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "core/grad_mode.h"
#include "ops/backend.h"
#include "ops/creation.h"
#include "ops/elementwise.h"
#include "ops/index.h"
#include "ops/optimizer.h"
#include "ops/reduce.h"

namespace stoke::nn::optim {

namespace detail {

Tensor contiguous_grad(const Tensor& p) {
  Tensor g = p.grad();
  STOKE_CHECK(g.device() == p.device() && g.dtype() == p.dtype(), "optimizer", "gradient of ",
              g.dtype(), " on ", g.device(), " for a parameter of ", p.dtype(), " on ", p.device());
  return g.is_contiguous() ? g : g.contiguous();
}

std::vector<Tensor> contiguous_grads_in_place(const std::vector<Tensor>& params) {
  std::vector<Tensor> grads;
  for (const Tensor& p : params) {
    if (!p.grad().defined()) continue;
    grads.push_back(contiguous_grad(p));
    p.set_grad(grads.back());
  }
  return grads;
}

Tensor zeros_like_param(const Tensor& p) {
  return zeros(p.shape(), {.dtype = p.dtype(), .device = p.device()});
}

std::map<std::string, Tensor> by_name(const NamedTensors& state) {
  std::map<std::string, Tensor> m;
  for (const auto& [n, t] : state) m[n] = t;
  return m;
}

Tensor take(std::map<std::string, Tensor>& m, const std::string& key, const Tensor& like,
            const char* op) {
  auto it = m.find(key);
  STOKE_CHECK(it != m.end(), op, "missing optimizer state '", key, "'");
  STOKE_CHECK(it->second.shape() == like.shape() && it->second.dtype() == like.dtype(), op,
              "optimizer state '", key, "': expected ", like.dtype(), " ", like.shape(), ", got ",
              it->second.dtype(), " ", it->second.shape());
  // A copy on `like`'s device (state loaded from a file lives on the CPU).
  Tensor t = it->second.device() == like.device() ? it->second.contiguous().clone()
                                                  : it->second.to(like.device()).contiguous();
  m.erase(it);
  return t;
}

void check_no_leftovers(const std::map<std::string, Tensor>& m, const char* op) {
  if (m.empty()) return;
  std::string keys;
  for (const auto& [k, t] : m) keys += (keys.empty() ? "'" : ", '") + k + "'";
  STOKE_FAIL(op, "unexpected optimizer state ", keys);
}

}  // namespace detail

using namespace detail;

std::vector<ParamGroup> weight_decay_groups(const Module& module, double weight_decay) {
  std::vector<ParamGroup> groups(2);
  groups[0].weight_decay = weight_decay;
  groups[1].weight_decay = 0.0;
  for (const Tensor& p : module.parameters()) groups[p.dim() >= 2 ? 0 : 1].params.push_back(p);
  return groups;
}

Optimizer::Optimizer(std::vector<ParamGroup> groups, double lr, double weight_decay,
                     const char* name) {
  STOKE_CHECK(!groups.empty(), name, "expected at least one parameter group");
  STOKE_CHECK(lr >= 0 && weight_decay >= 0, name, "invalid learning rate ", lr, " or weight_decay ",
              weight_decay);
  std::set<const void*> seen;
  for (size_t g = 0; g < groups.size(); ++g) {
    ParamGroup& group = groups[g];
    const Group range{.begin = params_.size(),
                      .end = params_.size() + group.params.size(),
                      .lr = group.lr.value_or(lr),
                      .weight_decay = group.weight_decay.value_or(weight_decay),
                      .lr_device = {}};
    STOKE_CHECK(range.lr >= 0 && range.weight_decay >= 0, name, "parameter group ", g,
                ": invalid learning rate ", range.lr, " or weight_decay ", range.weight_decay);
    for (Tensor& p : group.params) {
      const size_t i = params_.size();
      STOKE_CHECK(p.defined() && p.is_leaf() && p.requires_grad(), name, "parameter ", i,
                  " (group ", g, ") must be a leaf tensor that requires grad");
      STOKE_CHECK(p.is_contiguous(), name, "parameter ", i, " (group ", g, ") must be contiguous");
      STOKE_CHECK(p.dtype() == DType::f32 || p.dtype() == DType::f64 || p.dtype() == DType::f16 ||
                      p.dtype() == DType::bf16,
                  name, "parameter ", i, " (group ", g, ") has dtype ", p.dtype(),
                  "; expected f32, f64, f16 or bf16");
      STOKE_CHECK(p.numel() == 0 || seen.insert(p.data_ptr()).second, name, "parameter ", i,
                  " (group ", g,
                  ") is already in an earlier group: a parameter may be in one only");
      params_.push_back(std::move(p));
    }
    groups_.push_back(range);
  }
}

double Optimizer::lr(size_t group) const {
  STOKE_CHECK(group < groups_.size(), "optimizer", "no parameter group ", group, " (",
              groups_.size(), " groups)");
  return groups_[group].lr;
}

void Optimizer::set_lr(double lr) {
  for (size_t g = 0; g < groups_.size(); ++g) set_lr(g, lr);
}

void Optimizer::set_lr(size_t group, double lr) {
  STOKE_CHECK(group < groups_.size(), "optimizer", "no parameter group ", group, " (",
              groups_.size(), " groups)");
  Group& g = groups_[group];
  if (g.lr_device.defined() && lr != g.lr) {
    STOKE_CHECK(!ops::stream_capturing(g.lr_device.device()), "Optimizer::set_lr", "group ", group,
                "'s learning rate set during a CUDA graph capture: every replay would set ", lr,
                " again. Set it before the capture or between replays");
    NoGradGuard no_grad;
    fill_(g.lr_device, lr);
  }
  g.lr = lr;
}

void Optimizer::keep_lr_on_device() {
  STOKE_CHECK(reads_lr_from_device(), "Optimizer::keep_lr_on_device",
              "this optimizer takes its learning rate as a host value; SGD, Adam, AdamW, RMSprop "
              "and Adagrad read it from device memory");
  if (lr_on_device_) return;
  for (Group& g : groups_) {
    const Device d = g.begin < g.end ? params_[g.begin].device() : Device::cpu();
    g.lr_device = full({1}, g.lr, {.dtype = DType::f64, .device = d});
  }
  lr_on_device_ = true;
}

const Tensor& Optimizer::lr_tensor(size_t group) const {
  STOKE_CHECK(group < groups_.size(), "optimizer", "no parameter group ", group, " (",
              groups_.size(), " groups)");
  return groups_[group].lr_device;
}

double Optimizer::weight_decay(size_t group) const {
  STOKE_CHECK(group < groups_.size(), "optimizer", "no parameter group ", group, " (",
              groups_.size(), " groups)");
  return groups_[group].weight_decay;
}

void Optimizer::set_weight_decay(size_t group, double weight_decay) {
  STOKE_CHECK(group < groups_.size(), "optimizer", "no parameter group ", group, " (",
              groups_.size(), " groups)");
  STOKE_CHECK(weight_decay >= 0, "optimizer", "invalid weight_decay ", weight_decay);
  groups_[group].weight_decay = weight_decay;
}

std::vector<Tensor> Optimizer::params_of(size_t group) const {
  STOKE_CHECK(group < groups_.size(), "optimizer", "no parameter group ", group, " (",
              groups_.size(), " groups)");
  return {params_.begin() + static_cast<std::ptrdiff_t>(groups_[group].begin),
          params_.begin() + static_cast<std::ptrdiff_t>(groups_[group].end)};
}

void Optimizer::zero_grad() {
  for (auto& p : params_) p.set_grad(Tensor());
}

SGD::SGD(std::vector<Tensor> params, SGDOptions o)
    : SGD(std::vector<ParamGroup>{{.params = std::move(params)}}, o) {}

SGD::SGD(std::vector<ParamGroup> groups, SGDOptions o)
    : Optimizer(std::move(groups), o.lr, o.weight_decay, "SGD"),
      options_(o),
      momentum_buffers_(params_.size()) {
  STOKE_CHECK(o.momentum >= 0, "SGD", "invalid momentum ", o.momentum);
  STOKE_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0), "SGD",
              "nesterov momentum requires a momentum and zero dampening");
}

void SGD::step() {
  NoGradGuard no_grad;
  step_counts_.clear();  // the buffers say again which updates are first
  const double mom = options_.momentum;
  for (const Group& group : groups_) {
    // One fused pass per group and first-step-ness (a buffer's first update writes without
    // reading it, torch's buf = clone(d)); usually the whole group is one pass. The split is
    // decided before either pass runs, so that no parameter is updated twice.
    struct Pass {
      std::vector<size_t> idx;
      std::vector<Tensor> ps, gs, bufs;
    };
    Pass passes[2];  // [0]: buffers' first step; [1]: the rest (all of them without momentum)
    for (size_t i = group.begin; i < group.end; ++i) {
      const Tensor& p = params_[i];
      if (!p.grad().defined()) continue;
      const bool first = mom != 0 && !momentum_buffers_[i].defined();
      Pass& pass = passes[first ? 0 : 1];
      pass.idx.push_back(i);
      pass.ps.push_back(p);
      pass.gs.push_back(contiguous_grad(p));
      if (mom != 0) pass.bufs.push_back(first ? empty_like(p) : momentum_buffers_[i]);
    }
    for (int k = 0; k < 2; ++k) {
      Pass& pass = passes[k];
      if (pass.ps.empty()) continue;
      ops::fused_sgd_(pass.ps, pass.gs, pass.bufs,
                      {.lr = group.lr,
                       .momentum = mom,
                       .dampening = options_.dampening,
                       .weight_decay = group.weight_decay,
                       .nesterov = options_.nesterov,
                       .first_step = k == 0,
                       .lr_tensor = group.lr_device});
      // The new buffers are kept once their step has succeeded: a refused step leaves no
      // half-made state.
      if (mom != 0)
        for (size_t j = 0; j < pass.idx.size(); ++j) momentum_buffers_[pass.idx[j]] = pass.bufs[j];
    }
  }
}

void Optimizer::step_if_finite(const Tensor& found_inf) {
  STOKE_CHECK(found_inf.defined() && found_inf.numel() == 1, "Optimizer::step_if_finite",
              "expected a one-element found_inf tensor");
  if (found_inf.item() == 0) step();  // this optimizer has no device-side skip: one read
}

void SGD::step_if_finite(const Tensor& found_inf) {
  NoGradGuard no_grad;
  const double mom = options_.momentum;
  if (mom != 0 && step_counts_.empty()) {
    step_counts_.resize(params_.size());
    for (size_t i = 0; i < params_.size(); ++i)
      step_counts_[i] =
          full({1}, momentum_buffers_[i].defined() ? 1.0 : 0.0, {.device = params_[i].device()});
  }
  for (const Group& group : groups_) {
    std::vector<size_t> idx;
    std::vector<Tensor> ps, gs, bufs, counts;
    for (size_t i = group.begin; i < group.end; ++i) {
      const Tensor& p = params_[i];
      if (!p.grad().defined()) continue;
      idx.push_back(i);
      ps.push_back(p);
      gs.push_back(contiguous_grad(p));
      if (mom != 0) {
        // Zeros, not empty: a skipped first step leaves the buffer as made (its count says that
        // its first update is still to come, so the kernel never reads it).
        bufs.push_back(momentum_buffers_[i].defined() ? momentum_buffers_[i] : zeros_like_param(p));
        counts.push_back(step_counts_[i]);
      }
    }
    if (ps.empty()) continue;
    ops::fused_sgd_(ps, gs, bufs,
                    {.lr = group.lr,
                     .momentum = mom,
                     .dampening = options_.dampening,
                     .weight_decay = group.weight_decay,
                     .nesterov = options_.nesterov,
                     .found_inf = found_inf,
                     .step_counts = counts,
                     .lr_tensor = group.lr_device});
    if (mom != 0)
      for (size_t j = 0; j < idx.size(); ++j) momentum_buffers_[idx[j]] = bufs[j];
  }
}

NamedTensors SGD::state_dict() const {
  NamedTensors out;
  for (size_t i = 0; i < params_.size(); ++i)
    if (momentum_buffers_[i].defined())
      out.emplace_back("state." + std::to_string(i) + ".momentum_buffer", momentum_buffers_[i]);
  return out;
}

void SGD::load_state_dict(const NamedTensors& state) {
  auto m = by_name(state);
  for (size_t i = 0; i < params_.size(); ++i) {
    const std::string key = "state." + std::to_string(i) + ".momentum_buffer";
    momentum_buffers_[i] =
        m.count(key) ? take(m, key, params_[i], "SGD::load_state_dict") : Tensor();
  }
  check_no_leftovers(m, "SGD::load_state_dict");
  step_counts_.clear();  // made again from the buffers
}

Adam::Adam(std::vector<Tensor> params, AdamOptions o, bool decoupled)
    : Adam(std::vector<ParamGroup>{{.params = std::move(params)}}, o, decoupled) {}

Adam::Adam(std::vector<ParamGroup> groups, AdamOptions o, bool decoupled)
    : Optimizer(std::move(groups), o.lr, o.weight_decay, decoupled ? "AdamW" : "Adam"),
      options_(o),
      decoupled_(decoupled),
      exp_avg_(params_.size()),
      exp_avg_sq_(params_.size()),
      max_exp_avg_sq_(params_.size()),
      steps_(params_.size(), 0) {
  STOKE_CHECK(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1 && o.eps >= 0, "Adam",
              "invalid betas (", o.beta1, ", ", o.beta2, ") or eps ", o.eps);
}

void Adam::counts_to_host() {
  if (step_counts_.empty()) return;
  for (size_t i = 0; i < params_.size(); ++i)
    steps_[i] = static_cast<int64_t>(step_counts_[i].item());
  step_counts_.clear();
}

Adam::Lists Adam::lists_for(const std::vector<size_t>& idx) const {
  Lists l;
  for (size_t i : idx) {
    const Tensor& p = params_[i];
    l.params.push_back(p);
    l.grads.push_back(contiguous_grad(p));
    // The state changes only once the step has succeeded (a refused step leaves none).
    const bool first = !exp_avg_[i].defined();
    l.exp_avgs.push_back(first ? zeros_like_param(p) : exp_avg_[i]);
    l.exp_avg_sqs.push_back(first ? zeros_like_param(p) : exp_avg_sq_[i]);
    if (options_.amsgrad)
      l.max_exp_avg_sqs.push_back(first ? zeros_like_param(p) : max_exp_avg_sq_[i]);
  }
  return l;
}

void Adam::keep_state(const std::vector<size_t>& idx, const Lists& l) {
  for (size_t k = 0; k < idx.size(); ++k) {
    exp_avg_[idx[k]] = l.exp_avgs[k];
    exp_avg_sq_[idx[k]] = l.exp_avg_sqs[k];
    if (options_.amsgrad) max_exp_avg_sq_[idx[k]] = l.max_exp_avg_sqs[k];
  }
}

ops::AdamStepOptions Adam::step_options(const Group& group) const {
  return {.lr = group.lr,
          .beta1 = options_.beta1,
          .beta2 = options_.beta2,
          .eps = options_.eps,
          .weight_decay = group.weight_decay,
          .decoupled = decoupled_,
          .amsgrad = options_.amsgrad,
          .lr_tensor = group.lr_device};
}

void Adam::step_if_finite(const Tensor& found_inf) {
  NoGradGuard no_grad;
  if (step_counts_.empty()) {
    step_counts_.resize(params_.size());
    for (size_t i = 0; i < params_.size(); ++i)
      step_counts_[i] = full({1}, static_cast<double>(steps_[i]), {.device = params_[i].device()});
  }
  for (const Group& group : groups_) {
    // One pass per group: each parameter's update number is its own count on the device.
    std::vector<size_t> idx;
    for (size_t i = group.begin; i < group.end; ++i)
      if (params_[i].grad().defined()) idx.push_back(i);
    if (idx.empty()) continue;
    Lists l = lists_for(idx);
    ops::AdamStepOptions o = step_options(group);
    o.found_inf = found_inf;
    for (size_t i : idx) o.step_counts.push_back(step_counts_[i]);
    ops::fused_adam_(l.params, l.grads, l.exp_avgs, l.exp_avg_sqs, l.max_exp_avg_sqs, o);
    keep_state(idx, l);
  }
}

void Adam::step() {
  NoGradGuard no_grad;
  counts_to_host();
  for (const Group& group : groups_) {
    // One fused pass per group and step count (the bias corrections'): all of a group's
    // parameters share one unless some had no gradient on earlier steps.
    std::map<int64_t, std::vector<size_t>> by_step;
    for (size_t i = group.begin; i < group.end; ++i)
      if (params_[i].grad().defined()) by_step[steps_[i] + 1].push_back(i);
    for (const auto& [step, idx] : by_step) {
      Lists l = lists_for(idx);
      ops::AdamStepOptions o = step_options(group);
      o.step = step;
      ops::fused_adam_(l.params, l.grads, l.exp_avgs, l.exp_avg_sqs, l.max_exp_avg_sqs, o);
      keep_state(idx, l);
      for (size_t i : idx) steps_[i] = step;
    }
  }
}

NamedTensors Adam::state_dict() const {
  NamedTensors out;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!exp_avg_[i].defined()) continue;
    const std::string k = "state." + std::to_string(i) + ".";
    Tensor step = empty({}, {.dtype = DType::i64});
    // After step_if_finite the count lives on the device (a read).
    *step.data<int64_t>() =
        step_counts_.empty() ? steps_[i] : static_cast<int64_t>(step_counts_[i].item());
    out.emplace_back(k + "step", step);
    out.emplace_back(k + "exp_avg", exp_avg_[i]);
    out.emplace_back(k + "exp_avg_sq", exp_avg_sq_[i]);
    if (options_.amsgrad) out.emplace_back(k + "max_exp_avg_sq", max_exp_avg_sq_[i]);
  }
  return out;
}

void Adam::load_state_dict(const NamedTensors& state) {
  step_counts_.clear();  // made again from the loaded steps
  auto m = by_name(state);
  const Tensor step_like = empty({}, {.dtype = DType::i64});
  for (size_t i = 0; i < params_.size(); ++i) {
    const std::string k = "state." + std::to_string(i) + ".";
    if (!m.count(k + "exp_avg")) {
      exp_avg_[i] = exp_avg_sq_[i] = max_exp_avg_sq_[i] = Tensor();
      steps_[i] = 0;
      continue;
    }
    steps_[i] = *take(m, k + "step", step_like, "Adam::load_state_dict").data<int64_t>();
    exp_avg_[i] = take(m, k + "exp_avg", params_[i], "Adam::load_state_dict");
    exp_avg_sq_[i] = take(m, k + "exp_avg_sq", params_[i], "Adam::load_state_dict");
    // amsgrad's state has it (as torch's); without amsgrad it is a leftover, refused below.
    if (options_.amsgrad)
      max_exp_avg_sq_[i] = take(m, k + "max_exp_avg_sq", params_[i], "Adam::load_state_dict");
  }
  check_no_leftovers(m, "Adam::load_state_dict");
}

Tensor Optimizer::clip_grad_norm_(double max_norm) {
  return clip_grad_norm_no_sync_(params_, max_norm);
}

std::vector<Tensor> Optimizer::gradients_to_unscale() {
  return contiguous_grads_in_place(params_);
}

Tensor clip_grad_norm_no_sync_(const std::vector<Tensor>& params, double max_norm) {
  NoGradGuard no_grad;
  const std::vector<Tensor> grads = contiguous_grads_in_place(params);  // scaled in place below
  std::optional<Device> device;
  bool one_device = true;
  for (const Tensor& g : grads) {
    if (!device) device = g.device();
    one_device = one_device && g.device() == *device;
  }
  if (!device || device->is_cpu() || !one_device) {
    const double norm = clip_grad_norm_(params, max_norm);
    return full({1}, norm, {.dtype = DType::f64});
  }
  // f32 on the device, the f32 sum of squares' own precision (ops::sum_of_squares).
  const Tensor norm = ops::sqrt_(ops::sum_of_squares(grads).reshape({1}).to(DType::f32));
  const Tensor coef = ops::clamp(ops::div(max_norm, ops::add(norm, 1e-6)), std::nullopt, 1.0);
  // One multi-tensor pass that multiplies every gradient by coef; its inf flag is not used.
  ops::non_finite_check_and_unscale_(grads, zeros({1}, {.device = *device}), coef);
  return norm;
}

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm) {
  NoGradGuard no_grad;
  // One multi-tensor pass per device (ops::sum_of_squares) and one read-back each: the norm
  // decides the scale, as torch's .item() does.
  std::vector<std::pair<Device, std::vector<Tensor>>> by_device;
  for (const auto& p : params) {
    if (!p.grad().defined()) continue;
    const Tensor g = contiguous_grad(p);
    auto it = std::find_if(by_device.begin(), by_device.end(),
                           [&](const auto& d) { return d.first == g.device(); });
    if (it == by_device.end()) it = by_device.insert(by_device.end(), {g.device(), {}});
    it->second.push_back(g);
  }
  double total = 0;
  for (const auto& [device, grads] : by_device)
    total += ops::sum_of_squares(grads).to(Device::cpu()).to(DType::f64).item();
  const double norm = std::sqrt(total);
  const double coef = max_norm / (norm + 1e-6);
  if (coef < 1)
    for (const auto& p : params) {
      if (!p.grad().defined()) continue;
      Tensor g = contiguous_grad(p);
      if (!g.device().is_cpu()) {
        p.set_grad(ops::mul(g, coef));
        continue;
      }
      if (g.dtype() == DType::f16 || g.dtype() == DType::bf16) {  // storage types on the CPU
        const Tensor unused_flag = zeros({1});
        ops::non_finite_check_and_unscale_({g}, unused_flag, full({1}, coef));
        p.set_grad(g);
        continue;
      }
      dispatch_float(g.dtype(), "clip_grad_norm_", [&](auto tag) {
        using T = typename decltype(tag)::type;
        T* gp = g.data<T>();
        for (int64_t j = 0; j < g.numel(); ++j) gp[j] = T(gp[j] * coef);
      });
      p.set_grad(g);
    }
  return norm;
}

}  // namespace stoke::nn::optim
