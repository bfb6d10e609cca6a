// Shared by the autocast tests on the CPU (tests/autograd/test_autocast.cpp) and on cuda tensors
// (tests/cuda/test_autocast_cuda.cpp): one sample call per op of the policy table, and an autocast
// forward + backward of a reference model compared with its f32 run.
#pragma once

#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "autograd/autocast.h"
#include "stoke/stoke.h"

namespace stoke::test {

// The dtypes a sample builds its operands in: `main` for the operands the policy casts (inputs,
// activations), `other` for the rest (weights, statistics, the second operand of a binary op).
struct SampleDTypes {
  DType main = DType::f32;
  DType other = DType::f32;
  Device device = Device::cpu();
};

// A leaf of `dtype` on `device` that requires grad, recorded in `leaves`.
inline Tensor sample_leaf(const Shape& shape, DType dtype, Device device,
                          std::vector<Tensor>& leaves, double shift = 0.0) {
  Tensor t = add(randn(shape), shift).to(dtype).to(device).set_requires_grad(true);
  leaves.push_back(t);
  return t;
}

using Sample = std::function<Tensor(const SampleDTypes&, std::vector<Tensor>& leaves)>;

inline const std::map<std::string, Sample>& autocast_samples() {
  static const std::map<std::string, Sample> samples = [] {
    std::map<std::string, Sample> s;
    auto leaf = [](const Shape& shape, DType d, const SampleDTypes& t, std::vector<Tensor>& l,
                   double shift = 0.0) { return sample_leaf(shape, d, t.device, l, shift); };
    auto classes = [](const SampleDTypes& t) {
      return from_vector<int64_t>({0, 4, 2, 1}, {4}, {.dtype = DType::i64}).to(t.device);
    };
    s["conv2d"] = [=](const SampleDTypes& t, std::vector<Tensor>& l) {
      return conv2d(leaf({2, 3, 5, 5}, t.main, t, l), leaf({4, 3, 3, 3}, t.main, t, l),
                    leaf({4}, t.main, t, l), {.padding = {1, 1}});
    };
    s["conv_transpose2d"] = [=](const SampleDTypes& t, std::vector<Tensor>& l) {
      return conv_transpose2d(leaf({2, 3, 4, 4}, t.main, t, l), leaf({3, 2, 3, 3}, t.main, t, l),
                              leaf({2}, t.main, t, l), {.stride = {2, 2}, .padding = {1, 1}});
    };
    s["linear"] = [=](const SampleDTypes& t, std::vector<Tensor>& l) {
      return linear(leaf({3, 5}, t.main, t, l), leaf({4, 5}, t.main, t, l),
                    leaf({4}, t.main, t, l));
    };
    s["matmul"] = [=](const SampleDTypes& t, std::vector<Tensor>& l) {
      return matmul(leaf({2, 3, 4}, t.main, t, l), leaf({4, 2}, t.main, t, l));
    };
    s["softmax"] = [=](const SampleDTypes& t, std::vector<Tensor>& l) {
      return softmax(leaf({3, 5}, t.main, t, l), 1);
    };
    s["log_softmax"] = [=](const SampleDTypes& t, std::vector<Tensor>& l) {
      return log_softmax(leaf({3, 5}, t.main, t, l), -1);
    };
    s["cross_entropy"] = [=](const SampleDTypes& t, std::vector<Tensor>& l) {
      return cross_entropy(leaf({4, 5}, t.main, t, l), classes(t), {.label_smoothing = 0.1});
    };
    s["nll_loss"] = [=](const SampleDTypes& t, std::vector<Tensor>& l) {
      return nll_loss(leaf({4, 5}, t.main, t, l), classes(t));
    };
    s["mse_loss"] = [=](const SampleDTypes& t, std::vector<Tensor>& l) {
      return mse_loss(leaf({3, 4}, t.main, t, l), leaf({3, 4}, t.main, t, l));
    };
    s["sum"] = [=](const SampleDTypes& t, std::vector<Tensor>& l) {
      return sum(leaf({3, 4}, t.main, t, l), {1});
    };
    s["mean"] = [=](const SampleDTypes& t, std::vector<Tensor>& l) {
      return mean(leaf({3, 4}, t.main, t, l));
    };
    s["var"] = [=](const SampleDTypes& t, std::vector<Tensor>& l) {
      return var(leaf({3, 4}, t.main, t, l), {0});
    };
    s["batch_norm"] = [=](const SampleDTypes& t, std::vector<Tensor>& l) {
      const Tensor rm = zeros({3}, {.dtype = t.other, .device = t.device});
      const Tensor rv = ones({3}, {.dtype = t.other, .device = t.device});
      return batch_norm(leaf({4, 3, 2, 2}, t.main, t, l), rm, rv, leaf({3}, t.other, t, l),
                        leaf({3}, t.other, t, l), {.training = true});
    };
    s["group_norm"] = [=](const SampleDTypes& t, std::vector<Tensor>& l) {
      return group_norm(leaf({2, 4, 3, 3}, t.main, t, l), 2, leaf({4}, t.other, t, l),
                        leaf({4}, t.other, t, l));
    };
    s["layer_norm"] = [=](const SampleDTypes& t, std::vector<Tensor>& l) {
      return layer_norm(leaf({2, 3, 4}, t.main, t, l), {4}, leaf({4}, t.other, t, l),
                        leaf({4}, t.other, t, l));
    };
    s["exp"] = [=](const SampleDTypes& t, std::vector<Tensor>& l) {
      return exp(leaf({3, 4}, t.main, t, l));
    };
    s["log"] = [=](const SampleDTypes& t, std::vector<Tensor>& l) {
      // Positive operands: |x| + 1 made before the leaf would not be a leaf, so shift instead.
      return log(abs(leaf({3, 4}, t.main, t, l)) + 1.0);
    };
    s["pow"] = [=](const SampleDTypes& t, std::vector<Tensor>& l) {
      return pow(leaf({3, 4}, t.main, t, l), 2.0);
    };
    auto binary = [=](Tensor (*op)(const Tensor&, const Tensor&)) {
      return [=](const SampleDTypes& t, std::vector<Tensor>& l) {
        return op(leaf({3, 4}, t.main, t, l), leaf({4}, t.other, t, l, 3.0));
      };
    };
    s["add"] = binary(&add);
    s["sub"] = binary(&sub);
    s["mul"] = binary(&mul);
    s["div"] = binary(&div);
    s["maximum"] = binary(&maximum);
    s["minimum"] = binary(&minimum);
    s["where"] = [=](const SampleDTypes& t, std::vector<Tensor>& l) {
      const Tensor cond = gt(from_vector<float>({1, 0, 1, 0}, {4}), 0.5).to(t.device);
      return where(cond, leaf({3, 4}, t.main, t, l), leaf({4}, t.other, t, l));
    };
    return s;
  }();
  return samples;
}

// Host f64 copies of a tensor's values.
inline std::vector<double> host_values(const Tensor& t) {
  const Tensor c = t.detach().to(Device::cpu()).to(DType::f64).contiguous();
  const double* p = static_cast<const double*>(c.data_ptr());
  return std::vector<double>(p, p + c.numel());
}

inline bool all_finite(const Tensor& t) {
  for (double v : host_values(t))
    if (!std::isfinite(v)) return false;
  return true;
}

inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = host_values(a), y = host_values(b.expand(a.shape()));
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}

// ||a - b|| / ||b||: the relative error of a whole tensor, as the tolerance of a precision is
// stated (single elements near zero have no meaningful relative error).
inline double max_rel_err(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = host_values(a), y = host_values(b.expand(a.shape()).contiguous());
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    num += (x[i] - y[i]) * (x[i] - y[i]);
    den += y[i] * y[i];
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

struct AmpComparison {
  double loss_rel_err = 0;
  double grad_rel_err = 0;       // over all parameters as one vector
  double last_grad_rel_err = 0;  // the classifier's weight (next to the loss)
  bool grads_f32 = true;         // every parameter's gradient arrived in f32
  double logits_rel_err = 0;     // the forward's output, n x 10 values
  // The same errors for the calibration run: f32 throughout, on the weights and the input rounded
  // to the low dtype (and back). What one rounding of size u_low per weight moves them by, ReLU
  // and max-pool ties and the first layers' cancellation included.
  double cal_logits_rel_err = 0, cal_grad_rel_err = 0, cal_last_grad_rel_err = 0;
  double cal_loss_rel_err = 0;  // reported, not a bound (see amp_tolerance)
  // |dL / dz| |z| / |L| of the f32 run (z the logits, 2-norms): how a relative error of the logits
  // moves the loss, to first order (Cauchy-Schwarz).
  double loss_per_logits = 0;
};

// Bounds for compare_with_f32, relative to its calibration run (the brief of issue 38: "a bound
// relative to the difference between two f32 runs with perturbed inputs of size u_low"). Under
// autocast the forward rounds, per cast op (conv, linear), its weight and input (the calibration's
// sites: the weight, and for the first op the input) and its output (the next op's input): at
// most 2L + 1 sites against the calibration's L + 1, so the logits are off by at most 2x the
// calibration's (first order: each site moves them by an error of the same relative size u_low,
// and the errors add at most linearly), and the loss by at most |dL/dz| times that error of the
// logits (Cauchy-Schwarz). The backward rounds two more per op (the incoming gradient and the
// weight gradient, before its cast back to f32): 4L + 1 sites, at most 4x for the gradients.
// Vectors, not scalars, carry the calibration: a scalar's few site errors can cancel by chance
// (the calibration's loss error came out 2.7x under autocast's for f16 in emu), a vector's norm
// over n x 10 logits or every gradient element does not. A wrong cast, a gradient that
// underflows in f16 or stays in f16, moves them by far more. (Before: fixed bounds fitted to the
// measured errors of one seed, 0.3 for bf16 and 0.1 for f16.)
struct AmpTolerance {
  double loss, last_grad, grad, logits;
};
inline AmpTolerance amp_tolerance(const AmpComparison& c) {
  return {2 * c.cal_logits_rel_err * c.loss_per_logits, 4 * c.cal_last_grad_rel_err,
          4 * c.cal_grad_rel_err, 2 * c.cal_logits_rel_err};
}

inline constexpr double kLossScale = 1024.0;

// One forward + backward of `model` (a make_model name) on a fixed batch of n: in f32, inside an
// autocast region of `low`, and in f32 on the weights and input rounded to `low` (the calibration),
// from the same f32 weights; all in training mode (batch norm uses the batch's statistics; the
// running ones are updated three times, which nothing here reads).
inline AmpComparison compare_with_f32(const std::string& model, DType low, Device device,
                                      int64_t n = 16) {
  const bool rgb = model != "lenet5";
  Generator g(21);
  auto net = nn::models::make_model(model, {.in_channels = rgb ? 3 : 1,
                                            .num_classes = 10,
                                            .input_size = rgb ? 16 : 28,
                                            .generator = &g});
  net->to(device);
  const Tensor x = randn({n, rgb ? 3 : 1, rgb ? 16 : 28, rgb ? 16 : 28}, {}, &g).to(device);
  const Tensor y = randint(0, 10, {n}, {.dtype = DType::i64}, &g).to(device);
  struct Run {
    Tensor loss, logits;
    std::vector<Tensor> grads;
  };
  auto run = [&](bool amp, const Tensor& input) {
    net->zero_grad();
    Run r;
    if (amp) {
      autocast region(device.type, {.dtype = low});
      r.logits = net->forward(input);
      r.loss = cross_entropy(r.logits, y);
    } else {
      r.logits = net->forward(input);
      r.loss = cross_entropy(r.logits, y);
    }
    // Scaled as GradScaler does, so that f16's small gradients do not flush to zero (a power of
    // two: the relative errors below do not depend on it).
    mul(r.loss, kLossScale).backward();
    for (const Tensor& p : net->parameters()) r.grads.push_back(p.grad().flatten());
    r.loss = r.loss.detach();
    r.logits = r.logits.detach();
    return r;
  };
  const Run f32 = run(false, x);
  const Run amp = run(true, x);
  // The calibration: the weights rounded to `low` in place, restored after.
  const auto rounded = [&](const Tensor& t) { return t.to(low).to(DType::f32); };
  std::vector<Tensor> saved;
  {
    NoGradGuard no_grad;
    for (const Tensor& p : net->parameters()) {
      saved.push_back(p.detach().clone());
      Tensor(p).copy_(rounded(p.detach()));
    }
  }
  const Run cal = run(false, rounded(x));
  {
    NoGradGuard no_grad;
    const auto ps = net->parameters();
    for (size_t i = 0; i < ps.size(); ++i) Tensor(ps[i]).copy_(saved[i]);
  }
  AmpComparison c;
  for (const Tensor& gr : amp.grads) c.grads_f32 = c.grads_f32 && gr.dtype() == DType::f32;
  // The last parameter is the classifier's bias, the one before it its weight (every model).
  const size_t last = f32.grads.size() - 2;
  c.loss_rel_err = max_rel_err(amp.loss, f32.loss);
  c.logits_rel_err = max_rel_err(amp.logits, f32.logits);
  c.grad_rel_err = max_rel_err(ops::cat(amp.grads, 0), ops::cat(f32.grads, 0));
  c.last_grad_rel_err = max_rel_err(amp.grads[last], f32.grads[last]);
  c.cal_loss_rel_err = max_rel_err(cal.loss, f32.loss);
  c.cal_logits_rel_err = max_rel_err(cal.logits, f32.logits);
  c.cal_grad_rel_err = max_rel_err(ops::cat(cal.grads, 0), ops::cat(f32.grads, 0));
  c.cal_last_grad_rel_err = max_rel_err(cal.grads[last], f32.grads[last]);
  // dL/dz = (softmax(z) - onehot(y)) / n for the mean cross entropy.
  const std::vector<double> z = host_values(f32.logits);
  const std::vector<int64_t> labels = y.to(Device::cpu()).to_vector<int64_t>();
  const size_t classes = z.size() / labels.size();
  double g2 = 0, z2 = 0;
  for (size_t i = 0; i < labels.size(); ++i) {
    double m = -INFINITY, s = 0;
    for (size_t k = 0; k < classes; ++k) m = std::max(m, z[i * classes + k]);
    for (size_t k = 0; k < classes; ++k) s += std::exp(z[i * classes + k] - m);
    for (size_t k = 0; k < classes; ++k) {
      const double d = (std::exp(z[i * classes + k] - m) / s -
                        (static_cast<int64_t>(k) == labels[i] ? 1.0 : 0.0)) /
                       static_cast<double>(labels.size());
      g2 += d * d;
      z2 += z[i * classes + k] * z[i * classes + k];
    }
  }
  c.loss_per_logits = std::sqrt(g2) * std::sqrt(z2) / std::abs(host_values(f32.loss)[0]);
  return c;
}

}  // namespace stoke::test
