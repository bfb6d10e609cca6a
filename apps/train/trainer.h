// stoke-train's training loop: epochs of optimizer steps (with gradient accumulation, clipping
// and the schedule), step and epoch records, evaluations, checkpoints, early stopping and
// --resume from the last checkpoint.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "checkpoints.h"
#include "device_values.h"
#include "dist/buffer_broadcast.h"
#include "dist/ddp.h"
#include "dist/zero.h"
#include "distributed.h"
#include "evaluate.h"
#include "flags.h"
#include "metrics_records.h"
#include "nn/amp/grad_scaler.h"
#include "profile.h"
#include "progress.h"
#include "run_dir.h"
#include "setup.h"
#include "step_graph.h"

namespace stoke::train {

// What the "done:" line reports.
struct RunTotals {
  double best_acc = 0, seconds = 0, train_seconds = 0;
  int64_t images = 0;
};

class Trainer {
 public:
  // Loads the data and builds the model, optimizer and schedule (printing the "data:" and
  // "model:" lines); records go to `metrics`, which must outlive the trainer, as must `dist`. In
  // a job of several ranks the model is wrapped in dist::DistributedDataParallel, every total
  // (train and test loss, accuracy, images) is summed over the ranks, and rank 0 alone writes
  // checkpoints (the others read them on --resume).
  Trainer(const Flags& f, Device device, MetricsLog& metrics, Distributed& dist);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // With --resume: continues from DIR/last.safetensors if there is one (its normalization
  // included), and drops the metrics records the interrupted run wrote past it. Prints the
  // "normalize:" line, resumed or not.
  void resume();

  // Trains the remaining epochs (or until early stopping).
  RunTotals fit();

 private:
  void resume_from_checkpoint();
  // One epoch's timing and throughput, for the progress bar and the summary.
  struct EpochStats {
    Clock::time_point start = Clock::now();
    double data_wait = 0, seconds = 0;
    int64_t images = 0;
  };

  EpochStats train_epoch();
  void train_batch(const data::Batch& batch, int64_t num_batches, EpochStats& e);
  void optimizer_step(double data_wait_s);
  // The device side of an optimizer step: clipping, the loss scaler, the update, zero_grad.
  void update_weights();
  // The host side after it: the schedule, the step count, step logs, checkpoints, evaluations.
  void after_update(double data_wait_s);
  // A batch on the device, waiting in its accumulation group for the graph's replay.
  struct StagedBatch {
    DeviceBatch b;
    int64_t batch, images;
    double wait_seconds;
  };
  // One micro-batch's forward, loss and backward, eagerly; the update after the group's last
  // batch (`group_end` is one past it).
  void eager_batch(const StagedBatch& s, int64_t group_end, EpochStats& e);
  // --cuda-graph: the accumulation group in staged_ (one batch without --accum), replayed
  // (step_graph.h).
  void graph_group(EpochStats& e);
  std::string progress_text(const EpochStats& e) const;
  // Evaluates, logs and checkpoints at the end of an epoch; true when early stopping ends the run.
  bool end_epoch(const EpochStats& e);
  bool update_best(const EvalResult& r);
  EvalResult evaluate_finite();
  // The step's loss is finite; `batch` and `step` say which step it was (batch_ and
  // pos_.global_step when it was pushed).
  void check_finite_loss(double loss_value, int64_t batch, int64_t step) const;
  // Reads the losses and correct counts the steps since the last read left on the device, checks
  // each loss and adds them to the epoch's totals (on the CPU every step; on a device at a
  // progress refresh, a log interval, a checkpoint, an evaluation, the epoch's end, or every
  // kPendingSteps steps). Returns the last step's loss.
  double settle_steps(const char* why);
  // The samples of this epoch's order the job has trained on after this run's batch `batch_`.
  int64_t samples_after_batch() const { return samples_after_batch(batch_); }
  int64_t samples_after_batch(int64_t batch) const;
  // A checkpoint due after an optimizer step is written only once it is known to be good: its
  // weights are finite and the training loss they give (the next forward) is finite and no worse
  // than both a uniform guess (ln C) and ten times the lowest training loss of the run. So the
  // checkpoint named as the last good one at a divergence never holds weights that diverged
  // (weights of ~1e24 give a finite loss of ~1e25). What changes until the next forward is kept
  // here: the position, the generator's state and the buffers (a training forward updates
  // BatchNorm's running stats).
  void schedule_save(const Position& p);
  // After the next forward's finite `loss`: writes the scheduled checkpoint if it is good (every
  // rank agrees), or says why not.
  void write_scheduled_save(double loss);
  void save_position(const Position& p, const GeneratorState& rng,
                     const nn::NamedTensors& model_state);
  // STOKE_TRAIN_TEST_SAMPLE_LOG: each rank appends the dataset indices of every batch it trains.
  void log_samples(const data::Batch& batch) const;
  // The model's forward: through DDP in a job (without gradient sync unless `sync`); under
  // --zero the module's own, after rank 0's buffers are broadcast as DDP would.
  Tensor forward(const Tensor& images, bool sync);
  // The forward and the loss, inside an autocast region with --amp.
  Tensor forward_loss(const DeviceBatch& b, bool sync, Tensor& logits);

  const Flags f_;
  const Device device_;
  MetricsLog& metrics_;
  Distributed& dist_;
  Data data_;
  std::shared_ptr<nn::Module> model_;
  std::unique_ptr<dist::DistributedDataParallel> ddp_;  // in a job of several ranks, no --zero
  std::unique_ptr<nn::optim::Optimizer> opt_;
  // With --zero: rank 0's buffers into every rank's before each training forward, one broadcast
  // per dtype (DDP does its own).
  std::optional<dist::BufferBroadcast> zero_buffers_;
  std::unique_ptr<nn::optim::LRScheduler> sched_;
  const std::string last_path_, best_path_;  // empty without --checkpoint
  const int64_t kill_at_step_;               // the crash-and-resume tests' hook; 0 = off
  const ThroughputBasis throughput_;         // the epoch line's MFU: FLOPs per image, peak
  StepProfiler profiler_;                    // --profile (its "% peak" is throughput_'s)
  const std::optional<DType> amp_;           // --amp: the autocast dtype
  // Training batches: normalized to the --amp dtype (autocast's convs take it as is), and with
  // --augment on the device, cropped and flipped in the same pass.
  BatchFinish finish_;  // its normalization: the checkpoint's on --resume
  // --amp fp16's loss scaler (null otherwise); in a job its found-inf flag is MAX-allreduced, so
  // that every rank skips the same steps.
  std::unique_ptr<nn::amp::GradScaler> scaler_;
  Position pos_;
  int64_t batch_ = 0;        // this run's batch of the current epoch (0 = the first it trains)
  int64_t epoch_start_ = 0;  // samples of the epoch trained before this run's first batch of it
  struct ScheduledSave {
    Position position;
    GeneratorState rng;
    nn::NamedTensors buffers;
  };
  std::optional<ScheduledSave> scheduled_;
  // For the divergence message: the last finite training loss and the last checkpoint written
  // (or resumed from) by this run, with its step.
  double last_finite_loss_;
  std::string last_good_;
  const double uniform_loss_;  // ln(classes): cross entropy of a uniform guess
  double lowest_loss_;         // the lowest training loss of this run
  int sample_log_fd_ = -1;     // STOKE_TRAIN_TEST_SAMPLE_LOG's file, or -1
  // Each step's loss and correct count, on the device until settle_steps reads them, and which
  // batch and step each was.
  static constexpr int64_t kPendingSteps = 64;
  DeviceValues step_values_;
  struct PendingStep {
    int64_t batch, step, images;
  };
  std::vector<PendingStep> pending_;
  double last_loss_;  // the last settled step's loss
  // --cuda-graph (null otherwise); the graph's static outputs (the step's loss and correct count),
  // and an all-clear found-inf flag: with a graph the optimizer always takes its step counts from
  // the device (step_if_finite), so that a replay advances them.
  std::unique_ptr<StepGraph> graph_;
  Tensor graph_loss_, graph_correct_, no_inf_;  // the outputs: one element per micro-batch
  // The current accumulation group's batches so far, whether it goes through the graph, and why
  // it runs eagerly when it does not.
  std::vector<StagedBatch> staged_;
  bool graph_group_ = false;
  StepGraph::Eager eager_reason_ = StepGraph::Eager::warmup;
};

}  // namespace stoke::train
