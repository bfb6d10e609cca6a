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
};

// Bounds for compare_with_f32, set from measured errors with a margin of ~2 (the CPU, one seed).
// The loss and the classifier's gradient are within the dtype's rounding (bf16 2^-9, f16 2^-12
// relative, a few roundings deep). The whole gradient is further off: going back through the
// layers, activation gradients are rounded at every op, and a ReLU or max-pool whose inputs are
// within a rounding of a tie sends its gradient elsewhere; at initialization the first layers'
// gradients are sums with much cancellation, so these flips show (measured: LeNet-5 9% bf16, 1%
// f16; ResNet-8, which adds batch norm's cancelling backward, 13% and 5%).
struct AmpTolerance {
  double loss, last_grad, grad;
};
inline AmpTolerance amp_tolerance(DType low) {
  return low == DType::bf16 ? AmpTolerance{1e-2, 1e-2, 0.3} : AmpTolerance{1e-3, 2e-3, 0.1};
}

inline constexpr double kLossScale = 1024.0;

// One forward + backward of `model` (a make_model name) on a fixed batch of n, in f32 and then
// inside an autocast region of `low`, from the same f32 weights; both in training mode (batch norm
// uses the batch's statistics; the running ones are updated twice, which nothing here reads).
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
  auto run = [&](bool amp) {
    net->zero_grad();
    Tensor loss;
    if (amp) {
      autocast region(device.type, {.dtype = low});
      loss = cross_entropy(net->forward(x), y);
    } else {
      loss = cross_entropy(net->forward(x), y);
    }
    // Scaled as GradScaler does, so that f16's small gradients do not flush to zero (a power of
    // two: the relative errors below do not depend on it).
    mul(loss, kLossScale).backward();
    std::vector<Tensor> grads;
    for (const Tensor& p : net->parameters()) grads.push_back(p.grad().flatten());
    return std::make_pair(loss.detach(), grads);
  };
  const auto [loss32, grads32] = run(false);
  const auto [loss_amp, grads_amp] = run(true);
  AmpComparison c;
  c.loss_rel_err = max_rel_err(loss_amp, loss32);
  for (const Tensor& gr : grads_amp) c.grads_f32 = c.grads_f32 && gr.dtype() == DType::f32;
  c.grad_rel_err = max_rel_err(ops::cat(grads_amp, 0), ops::cat(grads32, 0));
  // The last parameter is the classifier's bias, the one before it its weight (every model).
  c.last_grad_rel_err = max_rel_err(grads_amp[grads_amp.size() - 2], grads32[grads32.size() - 2]);
  return c;
}

}  // namespace stoke::test
