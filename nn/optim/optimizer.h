// Optimizers with PyTorch's exact update rules (torch.optim, single-tensor path), learning-rate
// schedulers and gradient clipping.
//
//   optim::SGD opt(model.parameters(), {.lr = 0.1, .momentum = 0.9, .nesterov = true});
//   ...; loss.backward(); opt.step(); opt.zero_grad();
#pragma once

#include <string>
#include <vector>

#include "core/tensor.h"
#include "nn/module.h"

namespace stoke::nn::optim {

class Optimizer {
 public:
  explicit Optimizer(std::vector<Tensor> params, double lr);
  virtual ~Optimizer() = default;
  // Applies one update to every parameter that has a gradient (no autograd recording).
  virtual void step() = 0;
  void zero_grad();  // sets gradients to none
  double lr() const { return lr_; }
  void set_lr(double lr) { lr_ = lr; }
  const std::vector<Tensor>& params() const { return params_; }

  // State as named tensors, keyed like PyTorch's optimizer state_dict flattened:
  // "state.<param index>.<buffer>" (e.g. "state.3.momentum_buffer", "state.0.exp_avg") plus
  // "state.<i>.step" for Adam; scalar hyper-parameters are not included (they come from code).
  virtual NamedTensors state_dict() const = 0;
  // Restores state saved by state_dict(); reports missing or mismatched entries.
  virtual void load_state_dict(const NamedTensors& state) = 0;

 protected:
  std::vector<Tensor> params_;
  double lr_;
};

struct SGDOptions {
  double lr = 0.01;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, SGDOptions options);
  void step() override;
  NamedTensors state_dict() const override;
  void load_state_dict(const NamedTensors& state) override;
  SGDOptions options;

 private:
  std::vector<Tensor> momentum_buffers_;  // undefined until the first step with a gradient
};

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;  // Adam: L2 added to the gradient; AdamW: decoupled decay
};

class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, AdamOptions options, bool decoupled_weight_decay = false);
  void step() override;
  NamedTensors state_dict() const override;
  void load_state_dict(const NamedTensors& state) override;
  AdamOptions options;

 private:
  bool decoupled_;
  std::vector<Tensor> exp_avg_, exp_avg_sq_;
  std::vector<int64_t> steps_;
};

// AdamW's options: Adam's, with torch.optim.AdamW's default weight decay (1e-2). A struct of its
// own so that `AdamW opt(params, {.lr = 1e-3})` decays as in PyTorch.
struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;  // decoupled: p *= 1 - lr * weight_decay before the Adam step
};

// AdamW (Loshchilov & Hutter): p *= 1 - lr * weight_decay, then the Adam step.
class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, AdamWOptions o)
      : Adam(std::move(params),
             {.lr = o.lr,
              .beta1 = o.beta1,
              .beta2 = o.beta2,
              .eps = o.eps,
              .weight_decay = o.weight_decay},
             true) {}
};

// Scales all gradients so that their global L2 norm is at most max_norm; returns the norm before
// clipping (torch.nn.utils.clip_grad_norm_).
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm);

}  // namespace stoke::nn::optim
