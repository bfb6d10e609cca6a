// stoke-train --cuda-graph: the training step (forward, loss, backward, clipping, the loss scaler
// and the optimizer) captured once as a CUDA graph after a few eager warm-up steps, then replayed
// with one launch per step (cuda/runtime/graph.h). Each batch is copied into the graph's static
// inputs first; the step's loss and correct count come out in static outputs.
//
// A replay repeats the capture's kernel arguments, so what changes between steps reaches the
// kernels through device memory: the optimizer's learning rate (Optimizer::keep_lr_on_device,
// written by the schedule between replays) and step counts. A batch of another shape (the
// epoch's last, smaller one) runs eagerly. A step that draws random numbers (dropout, stochastic
// depth) cannot be replayed: its draws would repeat, so the capture refuses it, naming the cause.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/tensor.h"
#include "evaluate.h"

namespace stoke::train {

class StepGraph {
 public:
  // Eager steps before the first capture: the optimizer's and the scaler's state is made, and the
  // caching allocator's pools hold what a step needs.
  static constexpr int64_t kWarmupSteps = 3;

  // Throws when this build has no CUDA (emulated or real).
  explicit StepGraph(Device device);
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  // Whether batch `b` can go through the graph: warm-up is over and, once a graph is captured,
  // the batch has its shapes.
  bool accepts(const DeviceBatch& b) const;
  // Counts an eager step and its reason: warm-up, the step that vets a scheduled checkpoint
  // (`vets_checkpoint`: its loss is read before the update), or a batch of another shape.
  void note_eager_step(bool vets_checkpoint);

  // Copies `b` into the static inputs, captures `step` (run on the static batch) the first time,
  // and replays the graph.
  void run(const DeviceBatch& b, const std::function<void(const DeviceBatch&)>& step);

  int64_t captures() const { return captures_; }
  int64_t replays() const { return replays_; }
  // "N steps replayed, C captures, E eager (W warm-up, S of another shape, K vetting a
  // checkpoint)": the run's last line about its graph.
  std::string summary() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int64_t captures_ = 0, replays_ = 0;
  // The eager steps by reason (each counted once: warm-up, else vetting, else shape).
  int64_t warmup_steps_ = 0, other_shape_steps_ = 0, checkpoint_steps_ = 0;
};

}  // namespace stoke::train
