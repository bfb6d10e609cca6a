#include "trainer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>

#include "autograd/autocast.h"
#include "core/profiler.h"
#include "data/channel_stats.h"
#include "stoke/stoke.h"

namespace stoke::train {
namespace {

// "nan", "inf" or "-inf", whatever sign bit a NaN carries.
const char* non_finite_name(double v) {
  return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
}

// A test hook, not a flag: the crash-and-resume tests kill the run right after this optimizer
// step (STOKE_TRAIN_TEST_KILL_AT_STEP=N), deterministically, without a timing race; under mpirun
// only rank STOKE_TRAIN_TEST_KILL_RANK if that is set.
int64_t kill_at_step_from_env(int rank) {
  const char* kill_env = std::getenv("STOKE_TRAIN_TEST_KILL_AT_STEP");
  const char* rank_env = std::getenv("STOKE_TRAIN_TEST_KILL_RANK");
  if (rank_env && std::strtoll(rank_env, nullptr, 10) != rank) return 0;
  return kill_env ? std::strtoll(kill_env, nullptr, 10) : 0;
}

// STOKE_TRAIN_TEST_KILL_SIGNAL=STOP stops the rank there instead (a stalled rank, for the
// --dist-timeout watchdog's test); anything else, or nothing, kills it.
int kill_signal_from_env() {
  const char* sig = std::getenv("STOKE_TRAIN_TEST_KILL_SIGNAL");
  return sig && std::string(sig) == "STOP" ? SIGSTOP : SIGKILL;
}

// A test hook, not a flag: STOKE_TRAIN_TEST_SAMPLE_LOG=PREFIX makes rank r append a line
// "epoch E step S: i1 i2 ..." to PREFIX.r for every batch it trains (E 1-based, S the optimizer
// steps before the batch, then the batch's dataset indices), so that a test can count the samples
// an epoch visited across a kill and a resume at another world size.
int open_sample_log(int rank) {
  const char* prefix = std::getenv("STOKE_TRAIN_TEST_SAMPLE_LOG");
  if (!prefix || !*prefix) return -1;
  const std::string path = std::string(prefix) + "." + std::to_string(rank);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  STOKE_CHECK(fd >= 0, "stoke-train", "STOKE_TRAIN_TEST_SAMPLE_LOG: cannot open ", path);
  return fd;
}

std::string in_checkpoint_dir(const Flags& f, const char* name) {
  return f.checkpoint.empty() ? "" : f.checkpoint + "/" + name;
}

double per_second(double amount, double seconds) {
  return amount / std::max(seconds, 1e-9);
}

std::optional<DType> amp_dtype(const Flags& f) {
  if (f.amp.empty()) return std::nullopt;
  return f.amp == "fp16" ? DType::f16 : DType::bf16;
}

// bf16 has f32's exponent range, so its gradients need no scaling (as llm.c and torch do it).
std::unique_ptr<nn::amp::GradScaler> make_scaler(const Flags& f, Distributed& dist) {
  if (f.amp != "fp16") return nullptr;
  auto scaler = std::make_unique<nn::amp::GradScaler>();
  if (dist.active())
    scaler->found_inf_reducer = [&dist](Tensor& found_inf) {
      dist.gradient_comm().allreduce(found_inf, dist::ReduceOp::max);
    };
  return scaler;
}

void print_epoch_line(const EpochRecord& r, int64_t epochs, double eval_seconds) {
  char top5[32] = "";
  if (r.test_acc5 >= 0) std::snprintf(top5, sizeof top5, " (top-5 %.2f%%)", r.test_acc5);
  std::printf(
      "epoch %lld/%lld: train loss %.4f acc %.2f%% | test loss %.4f acc %.2f%%%s | %.1f s "
      "(%.0f img/s, data wait %.1f%%), eval %.1f s, rss %.0f MiB (peak %.0f) | MFU %.1f%% "
      "(%.3g GFLOP/img, peak %.0f GFLOP/s %s)\n",
      static_cast<long long>(r.epoch), static_cast<long long>(epochs), r.train_loss, r.train_acc,
      r.test_loss, r.test_acc, top5, r.time_s, r.images_per_s, r.data_wait_pct, eval_seconds,
      r.rss_mib, r.peak_rss_mib, 100 * r.mfu, r.flops_per_image / 1e9, r.peak_gflops,
      r.peak_dtype.c_str());
  std::fflush(stdout);
}

}  // namespace

Trainer::Trainer(const Flags& f, Device device, MetricsLog& metrics, Distributed& dist)
    : f_(f),
      device_(device),
      metrics_(metrics),
      dist_(dist),
      data_(load_data(f_, device_, dist_)),
      model_(build_model(f_, data_, device_)),
      ddp_(dist_.active() && f_.zero == 0
               ? std::make_unique<dist::DistributedDataParallel>(
                     model_, dist_.gradient_comm(),
                     dist::DdpOptions{
                         .algorithm = dist::parse_allreduce_algorithm(f_.allreduce, "--allreduce")})
               : nullptr),
      opt_(make_optimizer(f_, *model_)),
      sched_(make_scheduler(f_, *opt_, (data_.train->num_batches() + f_.accum - 1) / f_.accum)),
      last_path_(in_checkpoint_dir(f_, "last.safetensors")),
      best_path_(in_checkpoint_dir(f_, "best.safetensors")),
      kill_at_step_(kill_at_step_from_env(dist_.rank)),
      throughput_(measure_throughput_basis(f_, data_, device_)),
      profiler_(f_, dist_.root(), device_, throughput_, metrics_),
      amp_(amp_dtype(f_)),
      finish_{.normalize = data_.normalize,
              .dtype = amp_.value_or(DType::f32),
              .augment = f_.augment && f_.augment_on == "device",
              .crop = {.padding = 2},
              .seed = f_.seed,
              .memory_format =
                  f_.channels_last ? MemoryFormat::channels_last : MemoryFormat::contiguous},
      scaler_(make_scaler(f_, dist_)),
      last_finite_loss_(std::numeric_limits<double>::quiet_NaN()),
      uniform_loss_(
          std::log(static_cast<double>(std::max<int64_t>(data_.train_set->num_classes(), 2)))),
      lowest_loss_(std::numeric_limits<double>::infinity()),
      sample_log_fd_(open_sample_log(dist_.rank)),
      step_values_(device_, kPendingSteps, 1),
      last_loss_(std::numeric_limits<double>::quiet_NaN()) {
  print_model_line(f_, *model_, device_);
  if (f_.cuda_graph) {
    STOKE_CHECK(!dist_.active(), "stoke-train",
                "--cuda-graph does not work in a job of several ranks yet (the MPI engine stages "
                "collectives through host memory, which a graph cannot hold, and stoke-train's "
                "capture over NCCL has not run)");
    graph_ = std::make_unique<StepGraph>(device_);
    graph_loss_ = zeros({f_.accum}, {.device = device_});
    graph_correct_ = zeros({f_.accum}, {.dtype = DType::i64, .device = device_});
    no_inf_ = zeros({1}, {.device = device_});
    // The schedule writes the learning rate into device memory between replays, where the
    // optimizer's update reads it (every optimizer stoke-train makes can).
    opt_->keep_lr_on_device();
    std::printf(
        "graph: each training step replays one CUDA graph, captured after %lld eager "
        "steps (the learning rate read from device memory)\n",
        static_cast<long long>(StepGraph::kWarmupSteps));
  }
  if (dist_.active() && f_.zero > 0) {
    if (f_.master_weights) {
      const int64_t n = nn::amp::half_precision_parameters(*model_, *amp_);
      std::printf(
          "zero: %lld parameters of the convolutions and linear layers in %s, stepped through f32 "
          "master weights in the shards\n",
          static_cast<long long>(n), dtype_name(*amp_));
    }
    // Before any state exists: the plain optimizer gives its kind, options and groups.
    auto zero = dist::make_zero_optimizer(
        *opt_, dist_.gradient_comm(),
        {.stage = static_cast<int>(f_.zero),
         .algorithm = dist::parse_allreduce_algorithm(f_.allreduce, "--allreduce"),
         .module = model_.get()});
    zero_buffers_.emplace(*model_);
    sched_.reset();  // it holds the plain optimizer
    opt_ = std::move(zero);
    sched_ = make_scheduler(f_, *opt_, (data_.train->num_batches() + f_.accum - 1) / f_.accum);
  }
  // --allreduce auto: what DDP's or ZeRO's constructor calibrated, and what it will pick by size.
  if (dist_.active() && f_.allreduce == "auto")
    if (const auto m = dist_.gradient_comm().cached_allreduce_model())
      std::printf("dist: allreduce auto: %s", dist::describe(*m).c_str());
  if (amp_) {
    const std::string bn = device_.is_cuda() ? std::string("; batch norm on ") + dtype_name(*amp_) +
                                                   " activations with f32 statistics"
                                             : std::string();
    std::printf("amp: %s autocast (convs and matmuls in %s, losses and normalization in f32%s), ",
                f_.amp.c_str(), dtype_name(*amp_), bn.c_str());
    if (scaler_)
      std::printf("dynamic loss scaling from %g\n", scaler_->get_scale());
    else
      std::printf("no loss scaling\n");
  }
}

Trainer::~Trainer() {
  if (sample_log_fd_ >= 0) ::close(sample_log_fd_);
}

void Trainer::resume() {
  pos_.mean = data_.normalize.mean;
  pos_.std = data_.normalize.std;
  resume_from_checkpoint();
  finish_.normalize.mean = pos_.mean;
  finish_.normalize.std = pos_.std;
  std::printf("normalize: mean %s, std %s (of x / 255, per channel) from %s\n",
              data::format_channels(pos_.mean).c_str(), data::format_channels(pos_.std).c_str(),
              data_.normalize_from.c_str());
}

void Trainer::resume_from_checkpoint() {
  if (!f_.resume) return;
  if (std::filesystem::exists(last_path_)) {
    // --zero 3: the parameters whole while they load, each rank keeping its shards of them.
    const auto whole = dist::full_parameters_of(*opt_, /*writeback=*/true);
    pos_ =
        load_last(last_path_, *model_, *opt_, scaler_.get(), f_, data_.train_samples, dist_.size);
    // The run goes on with the normalization it trained with. --mean/--std that say otherwise
    // are refused; statistics of the data that differ (other data, or a resized split) are noted.
    const bool same = pos_.mean == data_.normalize.mean && pos_.std == data_.normalize.std;
    STOKE_CHECK(same || f_.mean.empty(), "stoke-train", "--mean ", data::format_channels(f_.mean),
                " --std ", data::format_channels(f_.std), " differ from the normalization ",
                last_path_, " trained with (mean ", data::format_channels(pos_.mean), ", std ",
                data::format_channels(pos_.std), "): drop them to resume, or start a new run");
    if (!same) {
      std::printf(
          "note: %s trained with mean %s, std %s; this data's are %s, %s: the resumed run "
          "keeps the checkpoint's\n",
          last_path_.c_str(), data::format_channels(pos_.mean).c_str(),
          data::format_channels(pos_.std).c_str(),
          data::format_channels(data_.normalize.mean).c_str(),
          data::format_channels(data_.normalize.std).c_str());
      data_.normalize_from = last_path_;
    }
    last_good_ = last_path_ + " (step " + std::to_string(pos_.global_step) + ")";
    if (sched_) sched_->set_last_step(pos_.global_step);
    std::printf("resumed from %s at epoch %lld, sample %lld of %lld (step %lld)\n",
                last_path_.c_str(), static_cast<long long>(pos_.epoch + 1),
                static_cast<long long>(pos_.sample), static_cast<long long>(data_.train_samples),
                static_cast<long long>(pos_.global_step));
  } else {
    // run_dir.cpp's resume_refusal stopped the run before if the directory held results.
    std::printf("no checkpoint at %s and no earlier results: starting from scratch\n",
                last_path_.c_str());
  }
  // The saved epoch totals are the job's (save_position sums them): rank 0 carries them on.
  if (!dist_.root()) {
    pos_.epoch_loss_sum = 0;
    pos_.epoch_correct = pos_.epoch_seen = 0;
  }
  // The records the interrupted run wrote past its checkpoint are written again from here.
  const int64_t dropped = metrics_.drop_records_after(pos_.epoch, pos_.global_step);
  if (dropped > 0)
    std::printf("metrics: dropped %lld record%s of %s past step %lld (written again here)\n",
                static_cast<long long>(dropped), dropped == 1 ? "" : "s", f_.metrics.c_str(),
                static_cast<long long>(pos_.global_step));
}

RunTotals Trainer::fit() {
  const auto start = Clock::now();
  RunTotals totals;
  bool stop = false;
  for (; pos_.epoch < f_.epochs && !stop; ++pos_.epoch) {
    const EpochStats e = train_epoch();
    totals.train_seconds += e.seconds;
    totals.images += e.images;
    stop = end_epoch(e);
  }
  profiler_.finish(pos_.global_step);
  if (graph_) std::printf("graph: %s\n", graph_->summary().c_str());
  totals.best_acc = pos_.best_acc;
  totals.seconds = seconds_since(start);
  return totals;
}

Trainer::EpochStats Trainer::train_epoch() {
  // A resumed run continues mid-epoch: the loader leaves out the samples of the epoch's order
  // trained on before, whatever -np and --batch trained them, and shards the rest.
  epoch_start_ = pos_.sample;
  if (epoch_start_ > 0)
    data_.train->resume_epoch(pos_.epoch, epoch_start_);
  else
    data_.train->set_epoch(pos_.epoch);
  model_->train();
  EpochStats e;
  const int64_t nb = data_.train->num_batches();
  ProgressBar bar("epoch " + std::to_string(pos_.epoch + 1) + "/" + std::to_string(f_.epochs), nb,
                  f_.progress);
  for (batch_ = 0; batch_ < nb; ++batch_) {
    profiler_.before_batch(pos_.global_step);
    {
      const profiler::Range step("step", profiler::Category::step);
      std::optional<data::Batch> batch;
      {
        const profiler::Range phase("data wait", profiler::Category::phase);
        batch = data_.train->next();
      }
      STOKE_CHECK(batch.has_value(), "stoke-train", "the loader ended after ", batch_, " of ", nb,
                  " batches");
      e.data_wait += batch->wait_seconds;
      log_samples(*batch);
      train_batch(*batch, nb, e);
    }
    profiler_.after_batch(pos_.global_step);
    if (bar.due(batch_ + 1)) {
      settle_steps("the progress bar");
      const double seconds = seconds_since(e.start);
      bar.update(batch_ + 1, per_second(static_cast<double>(e.images), seconds), progress_text(e));
    }
  }
  settle_steps("the end of the epoch");
  bar.finish();
  e.seconds = seconds_since(e.start);
  return e;
}

double Trainer::settle_steps(const char* why) {
  if (pending_.empty()) return last_loss_;
  const DeviceValues::Values v = step_values_.take(why);
  for (size_t i = 0; i < pending_.size(); ++i) {
    const double loss = v.value[i];
    check_finite_loss(loss, pending_[i].batch, pending_[i].step);
    last_finite_loss_ = loss;
    lowest_loss_ = std::min(lowest_loss_, loss);
    pos_.epoch_loss_sum += loss * static_cast<double>(pending_[i].images);
    pos_.epoch_correct += v.count[i][0];
  }
  pending_.clear();
  last_loss_ = v.value.back();
  return last_loss_;
}

void Trainer::optimizer_step(double data_wait_s) {
  {
    const profiler::Range phase("optimizer", profiler::Category::phase);
    update_weights();
  }
  after_update(data_wait_s);
}

void Trainer::after_update(double data_wait_s) {
  if (sched_) sched_->step();
  const int64_t step = ++pos_.global_step;
  if (f_.log_every > 0 && step % f_.log_every == 0) {
    const ExpectedSync reading("the step log's loss scale");
    log_step(metrics_, pos_.epoch + 1, step, settle_steps("the step log"), opt_->lr(), data_wait_s,
             scaler_ ? std::optional<AmpRecord>(
                           AmpRecord{scaler_->get_scale(), scaler_->skipped_steps()})
                     : std::nullopt);
  }
  if (f_.checkpoint_every > 0 && step % f_.checkpoint_every == 0 && !last_path_.empty()) {
    settle_steps("a checkpoint's epoch totals");
    Position next = pos_;  // a resume starts after this batch's samples
    next.sample = samples_after_batch();
    schedule_save(next);
  }
  if (f_.eval_every > 0 && step % f_.eval_every == 0) {
    const profiler::Range phase("eval", profiler::Category::phase);
    const EvalResult r = evaluate_finite();
    log_eval(metrics_, step, r.loss, r.acc);
  }
  // Nothing is flushed first: every record is already written.
  if (kill_at_step_ > 0 && step == kill_at_step_) std::raise(kill_signal_from_env());
}

std::string Trainer::progress_text(const EpochStats& e) const {
  const auto seen = static_cast<double>(pos_.epoch_seen);
  char text[160];
  const int n = std::snprintf(text, sizeof text, "loss %.4f acc %.1f%% wait %.0f%%",
                              pos_.epoch_loss_sum / seen,
                              100.0 * static_cast<double>(pos_.epoch_correct) / seen,
                              100.0 * per_second(e.data_wait, seconds_since(e.start)));
  const ExpectedSync reading("the progress bar's loss scale");
  if (scaler_ && n > 0 && static_cast<size_t>(n) < sizeof text)
    std::snprintf(text + n, sizeof text - static_cast<size_t>(n), " scale %g skipped %lld",
                  scaler_->get_scale(), static_cast<long long>(scaler_->skipped_steps()));
  return text;
}

bool Trainer::end_epoch(const EpochStats& e) {
  // The job's totals (each rank trained on its shard).
  std::vector<double> totals{pos_.epoch_loss_sum, static_cast<double>(pos_.epoch_correct),
                             static_cast<double>(pos_.epoch_seen), static_cast<double>(e.images)};
  dist_.sum(totals);
  const double seen = std::max(totals[2], 1.0), images = totals[3];
  const auto t_eval = Clock::now();
  const EvalResult r = evaluate_finite();
  const double eval_seconds = seconds_since(t_eval);
  const RssMib rss = read_rss_mib();
  const EpochRecord record{.epoch = pos_.epoch + 1,
                           .step = pos_.global_step,
                           .train_loss = totals[0] / seen,
                           .train_acc = 100.0 * totals[1] / seen,
                           .test_loss = r.loss,
                           .test_acc = r.acc,
                           .test_acc5 = r.acc5,
                           .time_s = e.seconds,
                           .images_per_s = per_second(images, e.seconds),
                           .data_wait_s = e.data_wait,
                           .data_wait_pct = 100.0 * per_second(e.data_wait, e.seconds),
                           .lr = opt_->lr(),
                           .rss_mib = rss.current,
                           .peak_rss_mib = rss.peak,
                           .flops_per_image = throughput_.flops_per_image,
                           .peak_gflops = throughput_.peak_gflops,
                           .peak_dtype = dtype_name(throughput_.peak_dtype),
                           // the job's images over the job's peak (each rank's device measured
                           // alike)
                           .mfu = per_second(images, e.seconds) * throughput_.flops_per_image /
                                  std::max(throughput_.peak_gflops * 1e9 * dist_.size, 1.0)};
  print_epoch_line(record, f_.epochs, eval_seconds);
  if (const std::string memory = dist::memory_line(*opt_); !memory.empty()) {  // ZeRO's
    std::printf("  %s\n", memory.c_str());
    std::fflush(stdout);
  }
  const ExpectedSync reading("the epoch line's loss scale");
  if (scaler_)
    std::printf("amp: loss scale %g, %lld skipped steps so far\n", scaler_->get_scale(),
                static_cast<long long>(scaler_->skipped_steps()));
  log_epoch(metrics_, record);
  const bool stop = update_best(r);
  pos_.sample = 0;
  pos_.epoch_loss_sum = 0;
  pos_.epoch_correct = pos_.epoch_seen = 0;
  scheduled_.reset();  // the end-of-epoch checkpoint, evaluated finite, supersedes it
  if (!last_path_.empty()) {
    Position next = pos_;  // a resume starts at the next epoch
    ++next.epoch;
    save_position(next, default_generator().state(), model_->state_dict());
  }
  return stop;
}

// Saves the best weights on a better test accuracy; true when the test loss has not improved for
// --patience epochs.
bool Trainer::update_best(const EvalResult& r) {
  if (r.acc > pos_.best_acc) {
    pos_.best_acc = r.acc;
    if (!best_path_.empty()) {
      const auto whole = dist::full_parameters_of(*opt_);  // --zero 3: collective
      const ExpectedSync writing("writing the best weights");
      if (dist_.root()) save_best(best_path_, *model_, pos_.epoch + 1, r.acc, pos_, f_);
    }
  }
  if (r.loss < pos_.best_loss) {
    pos_.best_loss = r.loss;
    pos_.bad_epochs = 0;
  } else if (f_.patience > 0 && ++pos_.bad_epochs >= f_.patience) {
    std::printf("early stopping: test loss has not improved for %lld epochs\n",
                static_cast<long long>(pos_.bad_epochs));
    return true;
  }
  return false;
}

// A non-finite test loss means the weights diverged in the last steps: stop before it is logged
// or the model is saved.
EvalResult Trainer::evaluate_finite() {
  std::optional<autocast> region;  // --master-weights: half parameters take half inputs
  if (f_.master_weights) region.emplace(device_.type, AutocastOptions{.dtype = *amp_});
  const EvalResult r =
      evaluate(*model_, *data_.test, device_, dist_, finish_.normalize, finish_.memory_format);
  region.reset();
  STOKE_CHECK(std::isfinite(r.loss), "stoke-train", "the test loss is ", non_finite_name(r.loss),
              " after step ", pos_.global_step, " (epoch ", pos_.epoch + 1,
              "): the weights diverged; the last good checkpoint is ",
              last_good_.empty() ? "none" : last_good_,
              ". Stopping: lower --lr, add --clip-grad, or check the data");
  return r;
}

// Divergence stops the run before the step that would put it into the weights: nothing
// non-finite is trained on, logged or saved.
void Trainer::check_finite_loss(double loss_value, int64_t batch, int64_t step) const {
  STOKE_CHECK(std::isfinite(loss_value), "stoke-train", "the training loss is ",
              non_finite_name(loss_value), " at epoch ", pos_.epoch + 1, ", sample ",
              samples_after_batch(batch), " of ", data_.train_samples, " (step ", step + 1,
              "); the last finite loss was ", last_finite_loss_, "; the last good checkpoint is ",
              last_good_.empty() ? "none" : last_good_,
              " (one whose weights gave a finite loss, not exploding). Stopping: "
              "lower --lr, add --clip-grad, or check the data");
}

int64_t Trainer::samples_after_batch(int64_t batch) const {
  // Every rank has trained batch_ + 1 batches of --batch samples of its shard, so the job has
  // trained that many times -np positions of the rest of the epoch's order (the last batch may
  // be short, and the shards padded: the epoch's end caps it).
  return std::min(data_.train_samples, epoch_start_ + (batch + 1) * f_.batch * dist_.size);
}

void Trainer::schedule_save(const Position& p) {
  ScheduledSave s{.position = p, .rng = default_generator().state(), .buffers = {}};
  for (const auto& [name, b] : model_->named_buffers()) s.buffers.emplace_back(name, b.clone());
  scheduled_ = std::move(s);
}

void Trainer::write_scheduled_save(double loss) {
  const profiler::Range phase("checkpoint", profiler::Category::phase);
  ScheduledSave s = std::move(*scheduled_);
  scheduled_.reset();
  // A diverging run's losses grow by orders of magnitude while every weight stays finite (LeNet-5
  // at lr 100: 2.3, 1.3e5, 2e11, 1e25, nan); a healthy one's stay within a factor of a few of
  // their lowest, or below a uniform guess's. Every rank must take the same way (the save is
  // collective), so the ranks' verdicts are summed.
  const double bound = std::max(uniform_loss_, 10.0 * lowest_loss_);
  std::vector<double> exploded{loss > bound ? 1.0 : 0.0};
  dist_.sum(exploded);
  if (exploded[0] > 0) {
    std::printf(
        "checkpoint of step %lld not written: the loss its weights gave (%g%s) is over ten times "
        "the run's lowest (%g) and a uniform guess's (%g): the run is diverging; the last good "
        "checkpoint is %s\n",
        static_cast<long long>(s.position.global_step), loss,
        dist_.active() ? " on rank 0, over the bound on some rank" : "", lowest_loss_,
        uniform_loss_, last_good_.empty() ? "none" : last_good_.c_str());
    std::fflush(stdout);
    return;
  }
  // The parameters and the optimizer are as they were after the step; the buffers and the
  // generator are taken back to then.
  nn::NamedTensors state = model_->state_dict();
  for (auto& [name, t] : state)
    for (const auto& [bname, b] : s.buffers)
      if (bname == name) t = b;
  save_position(s.position, s.rng, state);
}

void Trainer::log_samples(const data::Batch& batch) const {
  if (sample_log_fd_ < 0) return;
  std::string line =
      "epoch " + std::to_string(pos_.epoch + 1) + " step " + std::to_string(pos_.global_step) + ":";
  for (const int64_t i : batch.indices.to_vector<int64_t>()) {
    line += ' ';
    line += std::to_string(i);
  }
  line += "\n";
  // One write of the whole line to an O_APPEND descriptor: a kill never leaves half a line.
  STOKE_CHECK(
      ::write(sample_log_fd_, line.data(), line.size()) == static_cast<ssize_t>(line.size()),
      "stoke-train", "STOKE_TRAIN_TEST_SAMPLE_LOG: write failed");
}

void Trainer::save_position(const Position& p, const GeneratorState& rng,
                            const nn::NamedTensors& model_state) {
  const ExpectedSync writing("writing a checkpoint");  // the state comes to the host
  const auto whole = dist::full_parameters_of(*opt_);  // --zero 3: model_state's parameters
  // Every rank reaches the same saves (they follow the step count), so the sum is collective.
  Position job = p;
  std::vector<double> totals{p.epoch_loss_sum, static_cast<double>(p.epoch_correct),
                             static_cast<double>(p.epoch_seen)};
  dist_.sum(totals);
  job.epoch_loss_sum = totals[0];
  job.epoch_correct = static_cast<int64_t>(totals[1]);
  job.epoch_seen = static_cast<int64_t>(totals[2]);
  // ZeRO's state_dict gathers the shards (every rank calls it); a plain optimizer's is rank 0's.
  if (dist_.root() || opt_->state_dict_is_collective()) {
    const nn::NamedTensors state = opt_->state_dict();
    if (dist_.root()) save_last(last_path_, model_state, state, scaler_.get(), job, rng, f_);
  }
  last_good_ = last_path_ + " (step " + std::to_string(p.global_step) + ")";
}

}  // namespace stoke::train
