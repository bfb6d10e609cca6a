// Dynamic loss scaling for f16 training, torch.cuda.amp.GradScaler's API, defaults and rules:
// the loss is multiplied by the scale before backward() so that small f16 gradients do not flush
// to zero; unscale_() divides the gradients back (one multi-tensor pass per device,
// ops::non_finite_check_and_unscale_) and records whether any was inf/NaN; step() skips the
// optimizer's step when one was; update() halves the scale after a skipped step and doubles it
// after growth_interval finite steps in a row.
//
//   nn::amp::GradScaler scaler;            // init scale 2^16, growth 2, backoff 0.5, interval 2000
//   scaler.scale(loss).backward();
//   scaler.unscale_(opt);                  // optional: before clip_grad_norm_
//   nn::optim::clip_grad_norm_(opt.params(), 1.0);
//   const bool skipped = scaler.step(opt); // unscales first if unscale_ was not called
//   scaler.update();
//
// One found-inf flag per optimizer and step: a one-element f32 tensor on the gradients' device
// (one per device when the parameters span several), written by the unscale kernels without a
// host round trip and read back once, in step(), which must know whether to step.
//
// Data parallel: every rank must skip the same steps, or the replicas drift apart. Set
// `found_inf_reducer` to a MAX allreduce of the flag; it is called on each flag after the unscale
// and before the read (nn/ does not depend on dist/, so the scaler takes a function):
//   scaler.found_inf_reducer = [&comm](Tensor& f) { comm.allreduce(f, dist::ReduceOp::max); };
//
// The scale stays within [min_scale, max_scale]: growth stops at max_scale, and a backoff below
// min_scale throws, naming the step (the gradients have been non-finite for many steps in a row:
// the loss or the model diverged, and no scale will save it).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "core/tensor.h"
#include "nn/named_tensors.h"
#include "nn/optim/optimizer.h"

namespace stoke::nn::amp {

struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool enabled = true;  // disabled: scale() returns the loss, step() just steps (bf16, f32)
  double min_scale = 1.0 / (1 << 24);         // 2^-24: 40 halvings of the default
  double max_scale = 18446744073709551616.0;  // 2^64: 1 / scale stays a normal f32
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  // loss * scale (the loss itself when disabled).
  Tensor scale(const Tensor& loss) const;
  // Unscales opt's gradients in place (opt.gradients_to_unscale(): the parameters' .grad, made
  // contiguous; a dist::ZeroOptimizer's shards) and records the found-inf flags. At most once per
  // optimizer between update()s.
  void unscale_(optim::Optimizer& opt);
  // Unscales if unscale_ was not called, then calls opt.step() unless a gradient was inf/NaN
  // (on any rank, with found_inf_reducer). Returns true when the step was skipped. It reads the
  // flag back: one synchronization per step on a GPU.
  bool step(optim::Optimizer& opt);
  // The same decided on the device, with no read (torch's fused optimizers with found_inf): the
  // optimizer's step_if_finite. From its first call the scale, the growth tracker and the skip
  // count live on the parameters' device and update() is one kernel (ops::amp_update_scale_);
  // get_scale(), growth_tracker(), skipped_steps() and state_dict() then read them back (a
  // synchronization: read where one is meant), and report a collapse below min_scale there.
  // The parameters must be on one device.
  void step_on_device(optim::Optimizer& opt);
  // Backs the scale off if any optimizer's step since the last update() was skipped, else counts
  // a finite step and grows the scale every growth_interval of them; then forgets the flags.
  void update();

  double get_scale() const;
  int64_t growth_tracker() const;
  int64_t skipped_steps() const;  // since construction (or load)
  bool is_enabled() const { return options_.enabled; }
  const GradScalerOptions& options() const { return options_; }

  // torch's keys: "scale" (f64), "growth_factor", "backoff_factor" (f64), "growth_interval",
  // "_growth_tracker" (i64), 0-dim tensors on the CPU; plus "_skipped_steps" and "_updates".
  NamedTensors state_dict() const;
  void load_state_dict(const NamedTensors& state);

  // Called on each found-inf flag (a one-element f32 tensor, 1 = inf/NaN seen) before it is read;
  // data parallel training sets it to a MAX allreduce across ranks.
  std::function<void(Tensor&)> found_inf_reducer;

 private:
  struct PerOptimizer {
    bool unscaled = false, stepped = false;
    std::vector<Tensor> found_inf;  // one per device
    bool found = false;             // read in step()
    bool on_device = false;         // stepped by step_on_device: found is not known here
  };
  // Moves the scale, tracker and skip count to `device` (once; on_device_ from then on).
  void state_to_device(Device device);
  // The device state read back into the host values (one read), throwing on a collapse.
  void read_device_state() const;
  PerOptimizer& state_of(const optim::Optimizer& opt);

  GradScalerOptions options_;
  // The host state; after step_on_device a copy of the device state as of the last read.
  mutable double scale_;
  mutable int64_t growth_tracker_ = 0;
  mutable int64_t skipped_ = 0;
  int64_t updates_ = 0;  // update() calls: the step that messages name
  std::map<const optim::Optimizer*, PerOptimizer> per_optimizer_;
  // step_on_device's state: one-element f32 tensors on the parameters' device.
  bool on_device_ = false;
  Tensor d_scale_, d_growth_tracker_, d_skipped_, d_collapsed_;
};

}  // namespace stoke::nn::amp
