#include "nn/amp/grad_scaler.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "autograd/elementwise.h"
#include "autograd/index.h"
#include "core/grad_mode.h"
#include "ops/creation.h"
#include "ops/optimizer.h"

namespace stoke::nn::amp {

namespace {

constexpr const char* kScalerOp = "GradScaler";

Tensor scalar_f64(double v) {
  Tensor t = empty({}, {.dtype = DType::f64});
  *t.data<double>() = v;
  return t;
}

Tensor scalar_i64(int64_t v) {
  Tensor t = empty({}, {.dtype = DType::i64});
  *t.data<int64_t>() = v;
  return t;
}

}  // namespace

GradScaler::GradScaler(GradScalerOptions o) : options_(o), scale_(o.init_scale) {
  STOKE_CHECK(o.init_scale > 0 && std::isfinite(o.init_scale), kScalerOp, "invalid init_scale ",
              o.init_scale);
  STOKE_CHECK(o.growth_factor > 1, kScalerOp, "growth_factor must be > 1, got ", o.growth_factor);
  STOKE_CHECK(o.backoff_factor > 0 && o.backoff_factor < 1, kScalerOp,
              "backoff_factor must be in (0, 1), got ", o.backoff_factor);
  STOKE_CHECK(o.growth_interval >= 1, kScalerOp, "growth_interval must be >= 1, got ",
              o.growth_interval);
  STOKE_CHECK(o.min_scale > 0 && o.min_scale <= o.init_scale && o.init_scale <= o.max_scale &&
                  std::isfinite(o.max_scale),
              kScalerOp, "expected 0 < min_scale <= init_scale <= max_scale < inf, got ",
              o.min_scale, ", ", o.init_scale, ", ", o.max_scale);
}

Tensor GradScaler::scale(const Tensor& loss) const {
  if (!options_.enabled) return loss;
  STOKE_CHECK(loss.defined() && is_floating(loss.dtype()), "GradScaler::scale",
              "expected a floating loss tensor");
  // Differentiable: backward() goes through it. On the device the scale is read there.
  if (on_device_ && loss.device() == d_scale_.device())
    return stoke::mul(loss, d_scale_.reshape({}));
  return stoke::mul(loss, get_scale());
}

void GradScaler::state_to_device(Device device) {
  if (on_device_) {
    STOKE_CHECK(d_scale_.device() == device, "GradScaler::step_on_device", "the scale is on ",
                d_scale_.device(), ", the parameters on ", device, ": one device per scaler");
    return;
  }
  const TensorOptions o{.device = device};
  d_scale_ = full({1}, scale_, o);
  d_growth_tracker_ = full({1}, static_cast<double>(growth_tracker_), o);
  d_skipped_ = full({1}, static_cast<double>(skipped_), o);
  d_collapsed_ = zeros({1}, o);
  on_device_ = true;
}

void GradScaler::read_device_state() const {
  if (!on_device_) return;
  const Tensor all =
      stoke::cat({d_scale_, d_growth_tracker_, d_skipped_, d_collapsed_}, 0).to(Device::cpu());
  const float* v = all.data<float>();
  scale_ = v[0];
  growth_tracker_ = static_cast<int64_t>(v[1]);
  skipped_ = static_cast<int64_t>(v[2]);
  STOKE_CHECK(v[3] == 0, "GradScaler", "the loss scale collapsed by step ", updates_,
              ": backing off from ", scale_, " would go below min_scale ", options_.min_scale,
              " after ", skipped_,
              " skipped steps; the gradients keep being inf/NaN (the loss or the model has "
              "diverged: lower the learning rate, or train in bf16/f32)");
}

double GradScaler::get_scale() const {
  read_device_state();
  return scale_;
}

int64_t GradScaler::growth_tracker() const {
  read_device_state();
  return growth_tracker_;
}

int64_t GradScaler::skipped_steps() const {
  read_device_state();
  return skipped_;
}

GradScaler::PerOptimizer& GradScaler::state_of(const optim::Optimizer& opt) {
  return per_optimizer_[&opt];
}

void GradScaler::unscale_(optim::Optimizer& opt) {
  if (!options_.enabled) return;
  const char* op = "GradScaler::unscale_";
  PerOptimizer& st = state_of(opt);
  STOKE_CHECK(!st.unscaled, op,
              "unscale_() has already been called on this optimizer since the last update() "
              "(step ",
              updates_, ")");
  STOKE_CHECK(!st.stepped, op, "unscale_() is being called after step() (step ", updates_, ")");
  NoGradGuard no_grad;
  // The gradients by device: one unscale pass and one flag each.
  std::vector<std::pair<Device, std::vector<Tensor>>> by_device;
  // The optimizer's own view of its gradients: the parameters' .grad, or ZeRO's shards.
  for (const Tensor& g : opt.gradients_to_unscale()) {
    auto it = std::find_if(by_device.begin(), by_device.end(),
                           [&](const auto& d) { return d.first == g.device(); });
    if (it == by_device.end()) it = by_device.insert(by_device.end(), {g.device(), {}});
    it->second.push_back(g);
  }
  // inv_scale as torch computes it: the f32 reciprocal of the f32 scale (powers of two, exact);
  // on the device from the device's scale.
  st.found_inf.clear();
  for (const auto& [device, grads] : by_device) {
    Tensor found = zeros({1}, {.device = device});
    const Tensor inv = on_device_ && device == d_scale_.device()
                           ? ops::div(1.0, d_scale_)
                           : full({1}, 1.0 / static_cast<double>(static_cast<float>(get_scale())),
                                  {.device = device});
    ops::non_finite_check_and_unscale_(grads, found, inv);
    st.found_inf.push_back(found);
  }
  st.unscaled = true;
}

bool GradScaler::step(optim::Optimizer& opt) {
  if (!options_.enabled) {
    opt.step();
    return false;
  }
  PerOptimizer& st = state_of(opt);
  STOKE_CHECK(!st.stepped, "GradScaler::step",
              "step() has already been called on this optimizer since the last update() (step ",
              updates_, ")");
  if (!st.unscaled) unscale_(opt);
  // The one read-back of the step: each device's flag, after the ranks agreed on it.
  bool found = false;
  for (Tensor& f : st.found_inf) {
    if (found_inf_reducer) found_inf_reducer(f);
    found = found || f.to(Device::cpu()).item() != 0;
  }
  st.found = found;
  st.stepped = true;
  if (!found) opt.step();
  return found;
}

void GradScaler::step_on_device(optim::Optimizer& opt) {
  if (!options_.enabled) {
    opt.step();
    return;
  }
  const char* op = "GradScaler::step_on_device";
  PerOptimizer& st = state_of(opt);
  STOKE_CHECK(!st.stepped, op,
              "step() has already been called on this optimizer since the last update() (step ",
              updates_, ")");
  STOKE_CHECK(!opt.params().empty(), op, "the optimizer has no parameters");
  state_to_device(opt.params()[0].device());
  if (!st.unscaled) unscale_(opt);
  STOKE_CHECK(st.found_inf.size() <= 1, op, "the parameters are on ", st.found_inf.size(),
              " devices: step_on_device needs one (step() reads each flag)");
  Tensor found = st.found_inf.empty() ? zeros({1}, {.device = d_scale_.device()}) : st.found_inf[0];
  if (found_inf_reducer) found_inf_reducer(found);
  opt.step_if_finite(found);
  st.found_inf = {found};
  st.stepped = true;
  st.on_device = true;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  const char* op = "GradScaler::update";
  bool any_step = false, found = false, device_found = false;
  for (const auto& [opt, st] : per_optimizer_) {
    any_step = any_step || st.stepped;
    found = found || (st.stepped && st.found);
    device_found = device_found || (st.stepped && st.on_device);
  }
  STOKE_CHECK(any_step, op,
              "no inf checks were recorded: call step(optimizer) before update() (step ", updates_,
              ")");
  if (on_device_) {
    NoGradGuard no_grad;
    // The flags the device holds (step_on_device) and those the host read (step()), combined
    // there; then one kernel updates the scale.
    Tensor combined = zeros({1}, {.device = d_scale_.device()});
    for (const auto& [opt, st] : per_optimizer_) {
      if (!st.stepped) continue;
      if (st.on_device)
        combined = stoke::maximum(combined, st.found_inf[0]);
      else if (st.found)
        fill_(combined, 1.0);
    }
    (void)device_found;
    per_optimizer_.clear();
    ++updates_;
    ops::amp_update_scale_(d_scale_, d_growth_tracker_, d_skipped_, d_collapsed_, combined,
                           {.growth_factor = options_.growth_factor,
                            .backoff_factor = options_.backoff_factor,
                            .growth_interval = options_.growth_interval,
                            .min_scale = options_.min_scale,
                            .max_scale = options_.max_scale});
    return;
  }
  per_optimizer_.clear();
  ++updates_;
  if (found) {
    ++skipped_;
    growth_tracker_ = 0;
    const double next = scale_ * options_.backoff_factor;
    STOKE_CHECK(next >= options_.min_scale, op, "the loss scale collapsed at step ", updates_,
                ": backing off from ", scale_, " would go below min_scale ", options_.min_scale,
                " after ", skipped_,
                " skipped steps; the gradients keep being inf/NaN (the loss or the model has "
                "diverged: lower the learning rate, or train in bf16/f32)");
    scale_ = next;
    return;
  }
  if (++growth_tracker_ == options_.growth_interval) {
    growth_tracker_ = 0;
    scale_ = std::min(scale_ * options_.growth_factor, options_.max_scale);
  }
}

NamedTensors GradScaler::state_dict() const {
  read_device_state();  // after step_on_device: the device's values (a read)
  return {{"scale", scalar_f64(scale_)},
          {"growth_factor", scalar_f64(options_.growth_factor)},
          {"backoff_factor", scalar_f64(options_.backoff_factor)},
          {"growth_interval", scalar_i64(options_.growth_interval)},
          {"_growth_tracker", scalar_i64(growth_tracker_)},
          {"_skipped_steps", scalar_i64(skipped_)},
          {"_updates", scalar_i64(updates_)}};
}

void GradScaler::load_state_dict(const NamedTensors& state) {
  const char* op = "GradScaler::load_state_dict";
  auto get = [&](const std::string& key, bool required) -> Tensor {
    for (const auto& [k, t] : state)
      if (k == key) {
        STOKE_CHECK(t.defined() && t.numel() == 1, op, "'", key, "' must hold one value, got ",
                    t.defined() ? t.numel() : 0);
        return t.to(Device::cpu()).to(DType::f64);
      }
    STOKE_CHECK(!required, op, "missing '", key, "'");
    return Tensor();
  };
  for (const auto& [k, t] : state)
    STOKE_CHECK(k == "scale" || k == "growth_factor" || k == "backoff_factor" ||
                    k == "growth_interval" || k == "_growth_tracker" || k == "_skipped_steps" ||
                    k == "_updates",
                op, "unexpected key '", k, "'");
  const double scale = get("scale", true).item();
  STOKE_CHECK(scale > 0 && std::isfinite(scale), op, "invalid scale ", scale);
  scale_ = scale;
  growth_tracker_ = static_cast<int64_t>(get("_growth_tracker", true).item());
  options_.growth_factor = get("growth_factor", true).item();
  options_.backoff_factor = get("backoff_factor", true).item();
  options_.growth_interval = static_cast<int64_t>(get("growth_interval", true).item());
  const Tensor skipped = get("_skipped_steps", false), updates = get("_updates", false);
  skipped_ = skipped.defined() ? static_cast<int64_t>(skipped.item()) : 0;
  updates_ = updates.defined() ? static_cast<int64_t>(updates.item()) : 0;
  per_optimizer_.clear();
  on_device_ = false;  // made again from these values at the next step_on_device
  d_scale_ = d_growth_tracker_ = d_skipped_ = d_collapsed_ = Tensor();
}

}  // namespace stoke::nn::amp
