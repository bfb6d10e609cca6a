// The training step of one batch: to the device, forward and loss, backward, and the optimizer's
// update; eager, or replayed as a CUDA graph with --cuda-graph (step_graph.h). The host's side of
// a step (the schedule, logs, checkpoints, evaluations) is in trainer.cpp.
#include <algorithm>
#include <optional>

#include "autograd/autocast.h"
#include "core/profiler.h"
#include "stoke/stoke.h"
#include "trainer.h"

namespace stoke::train {

void Trainer::train_batch(const data::Batch& batch, int64_t num_batches, EpochStats& e) {
  const DeviceBatch b = [&] {
    const profiler::Range phase("h2d", profiler::Category::phase);
    return to_device(batch, device_, finish_);
  }();
  // Accumulation groups count from this run's first batch of the epoch: a resumed run starts at
  // a checkpoint, which follows an optimizer step, so at the start of a group.
  const int64_t group_begin = batch_ / f_.accum * f_.accum;
  const int64_t group_size = std::min(f_.accum, num_batches - group_begin);
  const StagedBatch staged{b, batch_, batch.labels.numel(), batch.wait_seconds};
  if (graph_) {
    // A group goes through the graph whole, or runs eagerly whole: decided at its first batch. A
    // scheduled checkpoint needs the next batch's loss before the update (eager: a replay makes
    // both in one launch); the epoch's last group may be shorter than --accum.
    if (batch_ == group_begin) {
      staged_.clear();
      graph_group_ = !scheduled_ && group_size == f_.accum && graph_->accepts(b);
      eager_reason_ = !graph_->warmed_up() ? StepGraph::Eager::warmup
                      : scheduled_         ? StepGraph::Eager::vetting
                                           : StepGraph::Eager::other_shape;
    }
    if (graph_group_) {
      if (staged_.empty() || same_batch_shapes(staged_.front().b, b)) {
        staged_.push_back(staged);
        if (static_cast<int64_t>(staged_.size()) == group_size) graph_group(e);
        return;
      }
      // A batch of another shape (the epoch's last) in the group: the group runs eagerly, the
      // batches before it from their device copies.
      graph_group_ = false;
      eager_reason_ = StepGraph::Eager::other_shape;
      for (const StagedBatch& s : staged_) eager_batch(s, group_begin + group_size, e);
      staged_.clear();
    }
  }
  eager_batch(staged, group_begin + group_size, e);
}

void Trainer::eager_batch(const StagedBatch& s, int64_t group_end, EpochStats& e) {
  const int64_t group_size = group_end - s.batch / f_.accum * f_.accum;
  const bool sync = s.batch + 1 == group_end;
  std::optional<profiler::Range> phase(std::in_place, "forward", profiler::Category::phase);
  Tensor logits;
  Tensor loss = forward_loss(s.b, sync, logits);
  // The loss and the count of correct predictions stay on the device (settle_steps).
  step_values_.push(loss, {correct_predictions(logits, s.b.labels)});
  pending_.push_back({s.batch, pos_.global_step, s.images});
  // On the CPU a read costs nothing: every loss is checked before its backward. On a device the
  // host reads them when it needs them, or when the buffer is full.
  if (device_.is_cpu() || step_values_.full()) settle_steps("a step's values");
  phase.reset();
  // The weights of a scheduled checkpoint have just given a finite loss: written if it is good.
  if (scheduled_) write_scheduled_save(settle_steps("a scheduled checkpoint"));
  // Each micro-batch's mean loss is scaled so that k micro-batches of b give the gradient of
  // one batch of k*b (when the micro-batches have equal size).
  if (group_size > 1) loss = loss * (1.0 / static_cast<double>(group_size));
  phase.emplace("backward", profiler::Category::phase);
  (scaler_ ? scaler_->scale(loss) : loss).backward();
  pos_.epoch_seen += s.images;
  e.images += s.images;
  phase.reset();
  if (sync) optimizer_step(s.wait_seconds);
  if (graph_) graph_->note_eager_step(eager_reason_);
}

void Trainer::graph_group(EpochStats& e) {
  const auto k = static_cast<int64_t>(staged_.size());
  std::vector<DeviceBatch> group;
  for (const StagedBatch& s : staged_) group.push_back(s.b);
  {
    const profiler::Range phase("graph", profiler::Category::phase);
    graph_->run(group, [&](const std::vector<DeviceBatch>& inputs) {
      // The eager group's operations in its order (eager_batch), each micro-batch's loss and
      // correct count also copied into the static outputs.
      for (int64_t i = 0; i < k; ++i) {
        Tensor logits;
        Tensor loss = forward_loss(inputs[static_cast<size_t>(i)], i + 1 == k, logits);
        {
          NoGradGuard no_grad;
          graph_loss_.narrow(0, i, 1).copy_(loss.detach().reshape({1}).to(DType::f32));
          graph_correct_.narrow(0, i, 1).copy_(
              correct_predictions(logits, inputs[static_cast<size_t>(i)].labels).reshape({1}));
        }
        if (k > 1) loss = loss * (1.0 / static_cast<double>(k));
        (scaler_ ? scaler_->scale(loss) : loss).backward();
      }
      update_weights();
    });
  }
  for (int64_t i = 0; i < k; ++i) {
    const StagedBatch& s = staged_[static_cast<size_t>(i)];
    step_values_.push(graph_loss_.narrow(0, i, 1), {graph_correct_.narrow(0, i, 1)});
    pending_.push_back({s.batch, pos_.global_step, s.images});
    if (step_values_.full()) settle_steps("a step's values");
    pos_.epoch_seen += s.images;
    e.images += s.images;
  }
  const double wait = staged_.back().wait_seconds;
  staged_.clear();
  after_update(wait);
}

void Trainer::update_weights() {
  {
    if (scaler_) {
      // Clipping sees the true gradients: unscale first (the step then does not unscale again).
      // Under ZeRO both work on this rank's gradient shard (the optimizer's own overrides).
      if (f_.clip_grad > 0) {
        scaler_->unscale_(*opt_);
        opt_->clip_grad_norm_(f_.clip_grad);
      }
      // Skipped when a gradient is inf/NaN (on any rank): on a device decided there, without a
      // read (the scale and skip count are read with the metrics).
      if (device_.is_cpu())
        scaler_->step(*opt_);
      else
        scaler_->step_on_device(*opt_);
      scaler_->update();
    } else {
      if (f_.clip_grad > 0) opt_->clip_grad_norm_(f_.clip_grad);  // ZeRO's: in its shards
      // With a graph, the step counts must live on the device, as a replay needs: SGD's and
      // Adam's are there under step_if_finite (with an all-clear flag); RMSprop's and Adagrad's
      // under step() once the rate is on the device (their step_if_finite would copy and put
      // back every value it writes, for nothing here).
      if (graph_ && !opt_->counts_on_device_in_step())
        opt_->step_if_finite(no_inf_);
      else
        opt_->step();
    }
    opt_->zero_grad();
  }
}

Tensor Trainer::forward_loss(const DeviceBatch& b, bool sync, Tensor& logits) {
  std::optional<autocast> region;
  if (amp_) region.emplace(device_.type, AutocastOptions{.dtype = *amp_});
  logits = forward(b.images, sync);
  // The loss is in autocast's f32 list: cross entropy of f16/bf16 logits is computed in f32.
  return cross_entropy(logits, b.labels, {.label_smoothing = f_.label_smoothing});
}

Tensor Trainer::forward(const Tensor& images, bool sync) {
  if (zero_buffers_ && model_->is_training()) (*zero_buffers_)(dist_.gradient_comm());
  if (!ddp_) return (*model_)(images);
  if (sync) return (*ddp_)(images);
  auto no_sync = ddp_->no_sync();  // a micro-batch of --accum: gradients stay local
  return (*ddp_)(images);
}

}  // namespace stoke::train
