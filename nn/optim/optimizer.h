// Optimizers with PyTorch's exact update rules (torch.optim, single-tensor path), learning-rate
// schedulers and gradient clipping. The rules themselves are ops (ops::fused_sgd_ and
// ops::fused_adam_, ops/optimizer.h): one multi-tensor pass over a parameter group on every
// device; the optimizers keep the state, the groups and the step counts.
//
//   optim::SGD opt(model.parameters(), {.lr = 0.1, .momentum = 0.9, .nesterov = true});
//   ...; loss.backward(); opt.step(); opt.zero_grad();
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "nn/module.h"
#include "ops/optimizer.h"

namespace stoke::nn::optim {

// Parameters that share a learning rate and a weight decay, like one entry of torch.optim's
// param_groups; what a group leaves unset comes from the optimizer's options. The usual recipe,
// no decay on biases and norm weights, is weight_decay_groups() below.
//   optim::SGD opt({{.params = weights}, {.params = biases, .weight_decay = 0.0}},
//                  {.lr = 0.1, .momentum = 0.9, .weight_decay = 5e-4});
struct ParamGroup {
  std::vector<Tensor> params;
  std::optional<double> lr = std::nullopt;
  std::optional<double> weight_decay = std::nullopt;
};

// Two groups from a module's parameters: those with 2 or more dims (conv and linear weights) with
// `weight_decay`, the others (biases, batch/layer norm weights) with none.
std::vector<ParamGroup> weight_decay_groups(const Module& module, double weight_decay);

class Optimizer {
 public:
  // `groups` must be non-empty and no parameter may be in two groups; every parameter is a
  // contiguous f32/f64/f16/bf16 leaf that requires grad (f16/bf16 ones, with their state, are
  // updated in f32 and rounded back, as torch does for low-precision parameters). Parameters are
  // numbered across the groups in order (state_dict()'s "state.<i>", as torch numbers them).
  Optimizer(std::vector<ParamGroup> groups, double lr, double weight_decay, const char* name);
  virtual ~Optimizer() = default;
  // Applies one update to every parameter that has a gradient (no autograd recording).
  virtual void step() = 0;
  // The same, unless found_inf (a one-element f32 tensor on the parameters' device, set by the
  // GradScaler's unscale when a gradient was inf/NaN) is nonzero. stoke's optimizers decide on
  // the device, without a host read (SGD's and Adam's kernels take the flag; RMSprop and Adagrad
  // put back what a skipped step wrote), and each parameter's step count lives on the device from
  // then on. This default, for other optimizers, reads the flag, then calls step() or not.
  virtual void step_if_finite(const Tensor& found_inf);
  // Whether step_if_finite decides on the device, with no host read.
  virtual bool skips_on_device() const { return false; }
  // Whether step() itself counts the steps on the device once keep_lr_on_device() is on (RMSprop,
  // Adagrad), so that a captured step() replays as it should; SGD and Adam move their counts to
  // the device under step_if_finite only.
  virtual bool counts_on_device_in_step() const { return false; }
  // Sets gradients to none (dist::ZeroOptimizer also zeroes the flat gradients it keeps).
  virtual void zero_grad();
  // Scales this optimizer's gradients so that their global L2 norm is at most max_norm and returns
  // the norm before clipping: clip_grad_norm_no_sync_ over params() (on a GPU without a host read;
  // on the CPU in f64). dist::ZeroOptimizer overrides it: its gradients live in its shards, the
  // norm summed over the ranks. So a training loop clips the same way with or without ZeRO.
  virtual Tensor clip_grad_norm_(double max_norm);
  // The gradients that step() reads, complete and contiguous, to be scaled in place (the
  // GradScaler's unscale_): each parameter's .grad that is defined (made contiguous and set back
  // where it was not). dist::ZeroOptimizer overrides it with its gradient shards, after the
  // reductions in flight finish. So loss scaling works the same way with or without ZeRO.
  virtual std::vector<Tensor> gradients_to_unscale();

  // The live learning rates and weight decays, per group (schedulers scale each group's rate from
  // its own initial value). lr() is group 0's; set_lr() sets every group's.
  size_t num_groups() const { return groups_.size(); }
  double lr(size_t group = 0) const;
  void set_lr(double lr);
  void set_lr(size_t group, double lr);
  double weight_decay(size_t group = 0) const;
  void set_weight_decay(size_t group, double weight_decay);

  // Keeps every group's learning rate in device memory from now on (torch's capturable
  // optimizers with a Tensor lr): a one-element f64 tensor on the group's device, which SGD's,
  // Adam's and AdamW's fused kernels read when they run (RMSprop and Adagrad multiply by it on
  // the device). set_lr() then writes it (one fill launch on the current stream when the value
  // changes, no host wait), so a CUDA graph that captured step() follows a schedule between
  // replays; set_lr() while the current stream captures is refused (the replays would write that
  // value again). An optimizer whose update takes lr as a host value (ZeRO's wrapper) refuses
  // this.
  void keep_lr_on_device();
  bool lr_on_device() const { return lr_on_device_; }
  // Whether keep_lr_on_device() is possible (the update kernels read Group::lr_device).
  virtual bool reads_lr_from_device() const { return false; }
  // Group g's device learning rate (undefined unless lr_on_device()).
  const Tensor& lr_tensor(size_t group) const;
  // Every parameter, in state order; params_of(g) is group g's.
  const std::vector<Tensor>& params() const { return params_; }
  std::vector<Tensor> params_of(size_t group) const;

  // State as named tensors, keyed like PyTorch's optimizer state_dict flattened:
  // "state.<param index>.<buffer>" (e.g. "state.3.momentum_buffer", "state.0.exp_avg") plus
  // "state.<i>.step" for Adam; scalar hyper-parameters are not included (they come from code).
  virtual NamedTensors state_dict() const = 0;
  // Whether state_dict() is a collective that every rank of a data-parallel job must call
  // (dist::ZeroOptimizer gathers its shards in it); a plain optimizer's is local.
  virtual bool state_dict_is_collective() const { return false; }
  // Restores state saved by state_dict(); reports missing or mismatched entries.
  virtual void load_state_dict(const NamedTensors& state) = 0;

 protected:
  struct Group {
    size_t begin = 0, end = 0;  // its parameters: params_[begin, end)
    double lr = 0, weight_decay = 0;
    Tensor lr_device;  // with keep_lr_on_device: lr, one f64 on the group's device
  };
  std::vector<Tensor> params_;
  std::vector<Group> groups_;
  bool lr_on_device_ = false;
};

// lr and weight_decay are the defaults of groups that do not set their own; the live values are
// the optimizer's lr(g) and weight_decay(g).
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
  SGD(std::vector<ParamGroup> groups, SGDOptions options);
  void step() override;
  void step_if_finite(const Tensor& found_inf) override;
  bool skips_on_device() const override { return true; }
  NamedTensors state_dict() const override;
  void load_state_dict(const NamedTensors& state) override;
  const SGDOptions& options() const { return options_; }

  bool reads_lr_from_device() const override { return true; }

 private:
  SGDOptions options_;
  std::vector<Tensor> momentum_buffers_;  // undefined until the first step with a gradient
  // step_if_finite's count of the momentum updates applied to each parameter (one-element f32
  // tensors on its device; the first is where it becomes 1), made from the buffers at its first
  // call.
  std::vector<Tensor> step_counts_;
};

// lr and weight_decay are defaults for groups, as in SGDOptions.
struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;  // Adam: L2 added to the gradient; AdamW: decoupled decay
  bool amsgrad = false;     // divide by the largest exp_avg_sq so far (state max_exp_avg_sq)
};

class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, AdamOptions options, bool decoupled_weight_decay = false);
  Adam(std::vector<ParamGroup> groups, AdamOptions options, bool decoupled_weight_decay = false);
  void step() override;
  void step_if_finite(const Tensor& found_inf) override;
  bool skips_on_device() const override { return true; }
  NamedTensors state_dict() const override;
  void load_state_dict(const NamedTensors& state) override;
  const AdamOptions& options() const { return options_; }

  bool reads_lr_from_device() const override { return true; }

 private:
  // The host's step counts, brought back from the device after step_if_finite (a read).
  void counts_to_host();
  // The tensor lists of one fused pass over parameters `idx` (state made as zeros where none is
  // yet), and their state kept after it: step() and step_if_finite share them.
  struct Lists {
    std::vector<Tensor> params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs;
  };
  Lists lists_for(const std::vector<size_t>& idx) const;
  void keep_state(const std::vector<size_t>& idx, const Lists& l);
  // A group's options for ops::fused_adam_ (the step or the device counts still to set).
  ops::AdamStepOptions step_options(const Group& group) const;

  AdamOptions options_;
  bool decoupled_;
  std::vector<Tensor> exp_avg_, exp_avg_sq_, max_exp_avg_sq_;  // the last with amsgrad only
  std::vector<int64_t> steps_;
  // After step_if_finite: each parameter's step count on its device (one-element f32), which
  // then holds the truth (steps_ is stale until counts_to_host).
  std::vector<Tensor> step_counts_;
};

// AdamW's options: Adam's, with torch.optim.AdamW's default weight decay (1e-2). A struct of its
// own so that `AdamW opt(params, {.lr = 1e-3})` decays as in PyTorch.
struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;  // decoupled: p *= 1 - lr * weight_decay before the Adam step
  bool amsgrad = false;
};

// AdamW (Loshchilov & Hutter): p *= 1 - lr * weight_decay, then the Adam step.
class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, AdamWOptions o)
      : Adam(std::move(params), adam_options(o), true) {}
  AdamW(std::vector<ParamGroup> groups, AdamWOptions o)
      : Adam(std::move(groups), adam_options(o), true) {}

 private:
  static AdamOptions adam_options(const AdamWOptions& o) {
    return {.lr = o.lr,
            .beta1 = o.beta1,
            .beta2 = o.beta2,
            .eps = o.eps,
            .weight_decay = o.weight_decay,
            .amsgrad = o.amsgrad};
  }
};

// RMSprop (torch.optim.RMSprop, Hinton's lecture 6e): a running mean of squared gradients
// divides each step; centered subtracts the squared running mean of the gradients (a variance),
// momentum keeps a buffer of the divided steps. State: square_avg, momentum_buffer, grad_avg.
struct RMSpropOptions {
  double lr = 1e-2;
  double alpha = 0.99;  // the running mean's decay
  double eps = 1e-8;
  double weight_decay = 0;  // L2, added to the gradient
  double momentum = 0;
  bool centered = false;
};

// Adagrad (torch.optim.Adagrad, Duchi et al. 2011): each step divided by the root of the sum of
// all squared gradients so far; the rate decays as lr / (1 + (step - 1) lr_decay). State: sum,
// step.
struct AdagradOptions {
  double lr = 1e-2;
  double lr_decay = 0;
  double weight_decay = 0;  // L2, added to the gradient
  double initial_accumulator_value = 0;
  double eps = 1e-10;
};

// Both run torch's single-tensor update op for op on each parameter (ops:: in-place ops on any
// device), so they match torch.optim to rounding; f32 and f64 parameters. With
// keep_lr_on_device() the rate is applied as torch's differentiable form does it (param +=
// (grad * -lr) / avg, the product by a one-element tensor), and the step counts live on the
// device, so a captured step replays under any schedule. step_if_finite (the GradScaler's step)
// skips on the device: it runs the same update, then where() puts back every value the step
// wrote if found_inf is set (the update on an inf/NaN gradient is computed and thrown away), and
// each step count advances by 1 - found_inf; the rate is applied in the device form then.
class RMSprop : public Optimizer {
 public:
  RMSprop(std::vector<Tensor> params, RMSpropOptions options);
  RMSprop(std::vector<ParamGroup> groups, RMSpropOptions options);
  void step() override;
  void step_if_finite(const Tensor& found_inf) override;
  bool skips_on_device() const override { return true; }
  bool counts_on_device_in_step() const override { return true; }
  bool reads_lr_from_device() const override { return true; }
  NamedTensors state_dict() const override;
  void load_state_dict(const NamedTensors& state) override;
  const RMSpropOptions& options() const { return options_; }

 private:
  // step() (found_inf null) and step_if_finite.
  void update(const Tensor* found_inf);
  RMSpropOptions options_;
  std::vector<Tensor> square_avg_, momentum_buffer_, grad_avg_;
  std::vector<int64_t> steps_;
  // With keep_lr_on_device or after step_if_finite: each parameter's step count on its device
  // (one-element f32, exact to 2^24), counted there so that a replayed or skipped step counts
  // right; it then holds the truth (steps_ is stale).
  std::vector<Tensor> step_counts_;
};

class Adagrad : public Optimizer {
 public:
  Adagrad(std::vector<Tensor> params, AdagradOptions options);
  Adagrad(std::vector<ParamGroup> groups, AdagradOptions options);
  void step() override;
  void step_if_finite(const Tensor& found_inf) override;
  bool skips_on_device() const override { return true; }
  bool counts_on_device_in_step() const override { return true; }
  bool reads_lr_from_device() const override { return true; }
  NamedTensors state_dict() const override;
  void load_state_dict(const NamedTensors& state) override;
  const AdagradOptions& options() const { return options_; }

 private:
  // step() (found_inf null) and step_if_finite.
  void update(const Tensor* found_inf);
  AdagradOptions options_;
  std::vector<Tensor> sum_;
  std::vector<int64_t> steps_;
  // With keep_lr_on_device or after step_if_finite: each parameter's step count on its device
  // (one-element f32, exact to 2^24), lr_decay's rate computed from it there; it then holds the
  // truth (steps_ is stale).
  std::vector<Tensor> step_counts_;
};

// Scales all gradients so that their global L2 norm is at most max_norm; returns the norm before
// clipping (torch.nn.utils.clip_grad_norm_).
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm);

// The same without a host read, for a training step on a GPU: the norm is computed, and the
// coefficient min(1, max_norm / (norm + 1e-6)) applied, on the gradients' device, and the norm is
// returned there (a one-element f32 tensor, as torch's clip_grad_norm_ returns a tensor). Every
// gradient is multiplied (by 1 when the norm is within max_norm: unchanged). Gradients on the CPU
// or on several devices take clip_grad_norm_ (its f64 norm, returned as a CPU tensor).
Tensor clip_grad_norm_no_sync_(const std::vector<Tensor>& params, double max_norm);

}  // namespace stoke::nn::optim
