// stoke-train --cuda-graph: the training step (forward, loss, backward, clipping, the loss scaler
// and the optimizer) captured once as a CUDA graph after a few eager warm-up steps, then replayed
// with one launch per step (cuda/runtime/graph.h). With --accum k a step is k micro-batches: the
// graph holds the k forwards and backwards and the update, and replays once per k batches. Each
// batch is copied into the graph's static inputs first; the losses and correct counts come out in
// static outputs.
//
// A replay repeats the capture's kernel arguments, so what changes between steps reaches the
// kernels through device memory: the optimizer's learning rate (Optimizer::keep_lr_on_device,
// written by the schedule between replays) and step counts. A batch of another shape (the
// epoch's last, smaller one) runs eagerly, and so does the rest of its accumulation group. A step
// that draws random numbers (dropout, stochastic depth) cannot be replayed: its draws would
// repeat, so the capture refuses it, naming the cause.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "evaluate.h"

namespace stoke::train {

// Whether two batches have the same shapes and dtypes: one graph serves both.
bool same_batch_shapes(const DeviceBatch& a, const DeviceBatch& b);

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

  // Why a batch ran eagerly (each batch counted once, for the whole accumulation group it is in:
  // warm-up, else vetting a scheduled checkpoint (its loss is read before the update), else a
  // batch of another shape in the group).
  enum class Eager { warmup, vetting, other_shape };

  // Whether the warm-up steps are over: from then on a group of batches may be replayed.
  bool warmed_up() const { return warmup_steps_ >= kWarmupSteps; }
  // Whether batch `b` can go through the graph: warm-up is over and, once a graph is captured,
  // the batch has its shapes.
  bool accepts(const DeviceBatch& b) const;
  // Counts an eager batch and its reason.
  void note_eager_step(Eager why);

  // Copies the group's batches into the static inputs (one slot each), captures `step` (run on the
  // static batches) the first time, and replays the graph. Every group has the captured size.
  void run(const std::vector<DeviceBatch>& group,
           const std::function<void(const std::vector<DeviceBatch>&)>& step);

  int64_t captures() const { return captures_; }
  int64_t replays() const { return replays_; }
  // "N steps replayed, C captures, E eager (W warm-up, S of another shape, K vetting a
  // checkpoint)": the run's last line about its graph. Steps here are batches: with --accum k, a
  // replay counts k.
  std::string summary() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int64_t captures_ = 0, replays_ = 0;
  // The eager steps by reason (each counted once: warm-up, else vetting, else shape).
  int64_t warmup_steps_ = 0, other_shape_steps_ = 0, checkpoint_steps_ = 0;
};

}  // namespace stoke::train
