// stoke-train: trains a reference CNN on Fashion-MNIST (or MNIST) from the IDX files, packed
// shards or image folders, with the habits of a good training loop built in: a threaded data
// loader (uint8 batches, normalized here in one fused pass), progress bar with the data wait,
// evaluation in eval mode under no-grad, per-epoch summary, JSONL metrics, best and last
// checkpoints, exact mid-epoch resume, gradient accumulation, early stopping.
#include <charconv>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <memory>
#include <sstream>

#include "autograd/loss.h"
#include "data/cache.h"
#include "data/idx_dataset.h"
#include "data/loader.h"
#include "data/normalize.h"
#include "data/packed.h"
#include "data_check.h"
#include "flags.h"
#include "metrics_records.h"
#include "nn/checkpoint/safetensors.h"
#include "nn/models/models.h"
#include "nn/optim/optimizer.h"
#include "nn/optim/scheduler.h"
#include "ops/device_kernels.h"
#include "ops/reduce.h"
#include "progress.h"
#include "run_dir.h"
#include "stoke/stoke.h"
#if STOKE_HAS_CUDA || STOKE_CUDA_EMU
#include "cuda/runtime/pinned.h"
#endif

namespace stoke::train {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Fashion-MNIST statistics of the training images (pixel / 255).
constexpr float kMean = 0.2860f, kStd = 0.3530f;

// The recipe that --recipe fast stands for (see README: the CPU speedrun).
void apply_fast_recipe(Flags& f) {
  // LeNet-5 is the model that fits: on 2 cores ResNet-8 trains at ~1,000 img/s, under one epoch
  // a minute, while LeNet-5 does ~13,000 img/s. Crop+flip augmentation cost accuracy at this
  // budget (90.84% after 11 epochs with it, 91.55% without), so it is off; --augment adds it.
  f.model = "lenet5";
  f.epochs = 10;
  f.batch = 128;
  f.optimizer = "sgd";
  f.lr = 0.1;
  f.momentum = 0.9;
  f.nesterov = true;
  f.weight_decay = 5e-4;
  f.schedule = "onecycle";
  f.label_smoothing = 0.1;
}

// uint8 batches become (x / 255 - mean) / std, f32 NCHW, at the consumer.
const data::NormalizeOptions kNormalize = {.mean = {kMean}, .std = {kStd}};

// One split of the dataset named by --data and --data-format.
std::shared_ptr<const data::Dataset> open_split(const Flags& f, bool train) {
  if (f.data_format == "idx")
    return std::make_shared<data::IdxImageDataset>(f.data, data::IdxImageOptions{.train = train});
  const std::string dir = f.data + (train ? "/train" : "/test");
  if (f.data_format == "packed") return std::make_shared<data::PackedDataset>(dir);
  return data::open_image_folder(dir);
}

// Batches bound for a GPU are filled in pinned host memory, so that their upload is asynchronous
// (PyTorch's pin_memory=True); otherwise the CPU allocator's.
data::BatchAllocator batch_allocator(Device device) {
#if STOKE_HAS_CUDA || STOKE_CUDA_EMU
  if (device.is_cuda()) return [](size_t nbytes) { return cuda::pinned_storage(nbytes); };
#endif
  (void)device;
  return nullptr;
}

// The training loader (shuffled, augmented with --augment) or the test loader (in order).
std::unique_ptr<data::DataLoader> make_loader(const Flags& f,
                                              std::shared_ptr<const data::Dataset> ds,
                                              int64_t limit, bool train, Device device) {
  const int64_t n = limit > 0 ? std::min(limit, ds->size()) : ds->size();
  std::shared_ptr<data::Sampler> sampler;
  if (train) {
    sampler = std::make_shared<data::RandomSampler>(n, f.seed);
  } else {
    sampler = std::make_shared<data::SequentialSampler>(n);
  }
  std::shared_ptr<const data::Transform> transform;
  if (train && f.augment)
    transform = std::make_shared<data::Compose>(std::vector<std::shared_ptr<const data::Transform>>{
        std::make_shared<data::RandomCrop>(data::RandomCropOptions{.padding = 2}),
        std::make_shared<data::HorizontalFlip>()});
  return std::make_unique<data::DataLoader>(
      std::move(ds), std::move(sampler),
      data::LoaderOptions{.batch_size = train ? f.batch : 1000,
                          .seed = f.seed,
                          .workers = f.workers,
                          .prefetch = f.prefetch,
                          .transform = transform,
                          .allocator = batch_allocator(device)});
}

// Checkpoints are written from the CPU: device tensors are copied back first.
nn::NamedTensors on_cpu(nn::NamedTensors tensors) {
  for (auto& [name, t] : tensors)
    if (!t.device().is_cpu()) t = t.to(Device::cpu());
  return tensors;
}

// A batch on the training device: the u8 images cross the bus as bytes (non-blocking) and are
// normalized there; labels likewise.
struct DeviceBatch {
  Tensor images, labels;
};
DeviceBatch to_device(const data::Batch& batch, Device device) {
  if (device.is_cpu()) return {data::normalize(batch.images, kNormalize), batch.labels};
  return {data::normalize(batch.images.to(device, /*non_blocking=*/true), kNormalize),
          batch.labels.to(device, /*non_blocking=*/true)};
}

struct EvalResult {
  double loss = 0, acc = 0;
};

EvalResult evaluate(nn::Module& model, data::DataLoader& test, Device device) {
  NoGradGuard no_grad;
  model.eval();
  double loss_sum = 0;
  int64_t correct = 0;
  test.set_epoch(0);
  while (auto batch = test.next()) {
    const DeviceBatch b = to_device(*batch, device);
    const Tensor logits = model(b.images);
    loss_sum += ops::cross_entropy(logits, b.labels, {.reduction = ops::Reduction::sum}).item();
    const auto pred = ops::argmax(logits, 1).to(Device::cpu()).to_vector<int64_t>();
    const auto labels = batch->labels.to_vector<int64_t>();
    for (size_t i = 0; i < pred.size(); ++i) correct += pred[i] == labels[i];
  }
  model.train();
  const double n = static_cast<double>(test.size());
  return {loss_sum / n, 100.0 * static_cast<double>(correct) / n};
}

std::unique_ptr<nn::optim::Optimizer> make_optimizer(const Flags& f, const nn::Module& model) {
  using namespace nn::optim;
  const double wd =
      f.weight_decay.value_or(f.optimizer == "adamw" ? AdamWOptions{}.weight_decay : 0);
  // One group, or (--no-decay-norm-bias) matrices decayed and 1-dim parameters not.
  std::vector<ParamGroup> groups = f.no_decay_norm_bias
                                       ? weight_decay_groups(model, wd)
                                       : std::vector<ParamGroup>{{.params = model.parameters()}};
  if (f.optimizer == "sgd")
    return std::make_unique<SGD>(
        std::move(groups),
        SGDOptions{.lr = f.lr, .momentum = f.momentum, .weight_decay = wd, .nesterov = f.nesterov});
  if (f.optimizer == "adam")
    return std::make_unique<Adam>(std::move(groups), AdamOptions{.lr = f.lr, .weight_decay = wd});
  if (f.optimizer == "adamw")
    return std::make_unique<AdamW>(std::move(groups), AdamWOptions{.lr = f.lr, .weight_decay = wd});
  STOKE_FAIL("stoke-train", "unknown optimizer '", f.optimizer, "' (known: sgd, adam, adamw)");
}

std::unique_ptr<nn::optim::LRScheduler> make_scheduler(const Flags& f, nn::optim::Optimizer& opt,
                                                       int64_t steps_per_epoch) {
  using namespace nn::optim;
  const int64_t total = f.epochs * steps_per_epoch;
  std::unique_ptr<LRScheduler> s;
  if (f.schedule == "step") {
    s = std::make_unique<StepLR>(opt, f.step_size * steps_per_epoch, f.gamma);
  } else if (f.schedule == "multistep") {
    std::vector<int64_t> ms;
    std::stringstream ss(f.milestones);
    for (std::string item; std::getline(ss, item, ',');)
      ms.push_back(std::stoll(item) * steps_per_epoch);
    s = std::make_unique<MultiStepLR>(opt, ms, f.gamma);
  } else if (f.schedule == "cosine") {
    s = std::make_unique<CosineAnnealingLR>(opt, std::max<int64_t>(total - f.warmup, 1));
  } else if (f.schedule == "onecycle") {
    s = std::make_unique<OneCycleLR>(opt, f.lr, std::max<int64_t>(total - f.warmup, 2));
  } else {
    STOKE_CHECK(f.schedule == "none", "stoke-train", "unknown schedule '", f.schedule,
                "' (known: none, step, multistep, cosine, onecycle)");
  }
  if (f.warmup > 0) s = std::make_unique<LinearWarmup>(opt, f.warmup, 0.0, std::move(s));
  return s;
}

// Everything a resumed run needs besides the tensors.
struct Position {
  int64_t epoch = 0, batch = 0, global_step = 0;
  double best_acc = -1, best_loss = 1e300;
  int64_t bad_epochs = 0;
  double epoch_loss_sum = 0;
  int64_t epoch_correct = 0, epoch_seen = 0;
};

std::map<std::string, std::string> to_metadata(const Position& p, const Flags& f) {
  const GeneratorState g = default_generator().state();
  return {{"format", "stoke-train/1"},
          {"model", f.model},
          {"epoch", std::to_string(p.epoch)},
          {"batch", std::to_string(p.batch)},
          {"global_step", std::to_string(p.global_step)},
          {"best_acc", std::to_string(p.best_acc)},
          {"best_loss", std::to_string(p.best_loss)},
          {"bad_epochs", std::to_string(p.bad_epochs)},
          {"epoch_loss_sum", std::to_string(p.epoch_loss_sum)},
          {"epoch_correct", std::to_string(p.epoch_correct)},
          {"epoch_seen", std::to_string(p.epoch_seen)},
          {"rng_seed", std::to_string(g.seed)},
          {"rng_offset", std::to_string(g.offset)}};
}

std::string meta(const std::map<std::string, std::string>& m, const std::string& key,
                 const std::string& path) {
  auto it = m.find(key);
  STOKE_CHECK(it != m.end(), "stoke-train", path, ": checkpoint metadata has no '", key, "'");
  return it->second;
}

// An integer of the metadata in [lo, hi]: the whole value must parse (a mutated "-5" or "12abc"
// used to train a wrong number of epochs, and a non-number aborted with stoll's bare message).
template <class Int>
Int meta_int(const std::map<std::string, std::string>& m, const std::string& key,
             const std::string& path, Int lo, Int hi) {
  const std::string v = meta(m, key, path);
  Int x = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  STOKE_CHECK(ec == std::errc() && end == v.data() + v.size() && x >= lo && x <= hi, "stoke-train",
              path, ": checkpoint metadata '", key, "' is '", v, "', expected an integer in [", lo,
              ", ", hi, "]");
  return x;
}

// A finite number of the metadata (not NaN or infinite: those would poison the resumed run).
double meta_double(const std::map<std::string, std::string>& m, const std::string& key,
                   const std::string& path) {
  const std::string v = meta(m, key, path);
  double x = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  STOKE_CHECK(ec == std::errc() && end == v.data() + v.size() && std::isfinite(x), "stoke-train",
              path, ": checkpoint metadata '", key, "' is '", v, "', expected a finite number");
  return x;
}

// "nan", "inf" or "-inf", whatever sign bit a NaN carries.
const char* non_finite_name(double v) {
  return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
}

// A non-finite test loss means the weights diverged in the last steps: stop before it is logged
// or the model is saved.
void check_finite_eval(const EvalResult& r, const Position& pos, const std::string& last_good) {
  STOKE_CHECK(std::isfinite(r.loss), "stoke-train", "the test loss is ", non_finite_name(r.loss),
              " after step ", pos.global_step, " (epoch ", pos.epoch + 1,
              "): the weights diverged; the last good checkpoint is ",
              last_good.empty() ? "none" : last_good,
              ". Stopping: lower --lr, add --clip-grad, or check the data");
}

void save_last(const std::string& path, const nn::Module& model, const nn::optim::Optimizer& opt,
               const Position& p, const Flags& f) {
  remove_stale_temp_files(f.checkpoint);  // of saves that were killed before their rename
  nn::NamedTensors all = on_cpu(model.state_dict());
  for (auto& [k, t] : on_cpu(opt.state_dict())) all.emplace_back("optimizer." + k, t);
  nn::save_safetensors(path, all, to_metadata(p, f));
}

Position load_last(const std::string& path, nn::Module& model, nn::optim::Optimizer& opt,
                   const Flags& f) {
  const nn::SafetensorsFile file = nn::load_safetensors(path);
  STOKE_CHECK(meta(file.metadata, "model", path) == f.model, "stoke-train", path,
              ": checkpoint is of model '", meta(file.metadata, "model", path), "', not '", f.model,
              "'");
  nn::NamedTensors model_state, opt_state;
  for (const auto& [k, t] : file.tensors) {
    if (k.rfind("optimizer.", 0) == 0) {
      opt_state.emplace_back(k.substr(10), t);
    } else {
      model_state.emplace_back(k, t);
    }
  }
  model.load_state_dict(model_state);
  opt.load_state_dict(opt_state);
  Position p;
  const auto& m = file.metadata;
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  p.epoch = meta_int<int64_t>(m, "epoch", path, 0, kMax);
  STOKE_CHECK(p.epoch <= f.epochs, "stoke-train", path, ": the checkpoint is at epoch ", p.epoch,
              ", past --epochs ", f.epochs, ": pass --epochs ", p.epoch + 1,
              " or more to train on from it");
  p.batch = meta_int<int64_t>(m, "batch", path, 0, kMax);
  p.global_step = meta_int<int64_t>(m, "global_step", path, 0, kMax);
  p.best_acc = meta_double(m, "best_acc", path);
  p.best_loss = meta_double(m, "best_loss", path);
  p.bad_epochs = meta_int<int64_t>(m, "bad_epochs", path, 0, kMax);
  p.epoch_loss_sum = meta_double(m, "epoch_loss_sum", path);
  p.epoch_seen = meta_int<int64_t>(m, "epoch_seen", path, 0, kMax);
  p.epoch_correct = meta_int<int64_t>(m, "epoch_correct", path, 0, p.epoch_seen);
  constexpr uint64_t kMaxU = std::numeric_limits<uint64_t>::max();
  default_generator().set_state({meta_int<uint64_t>(m, "rng_seed", path, 0, kMaxU),
                                 meta_int<uint64_t>(m, "rng_offset", path, 0, kMaxU)});
  return p;
}

int run(Flags f) {
  if (f.recipe == "fast") apply_fast_recipe(f);
  Device device = Device::cpu();
  if (f.device != "cpu") {
    STOKE_CHECK(f.device == "cuda" || f.device.rfind("cuda:", 0) == 0, "stoke-train",
                "unknown device '", f.device, "' (cpu or cuda[:i])");
    const std::string index = f.device == "cuda" ? "0" : f.device.substr(5);
    STOKE_CHECK(!index.empty() && index.size() <= 3 &&
                    index.find_first_not_of("0123456789") == std::string::npos,
                "stoke-train", "unknown device '", f.device, "' (cpu or cuda[:i])");
    const Device want = Device::cuda(std::stoi(index));
    try {
      ops::device_kernels("stoke-train", want);  // throws naming the reason when unusable
      device = want;
    } catch (const Error& e) {
      if (!f.allow_cpu_fallback) {
        std::fprintf(stderr,
                     "stoke-train: --device %s: this build has no CUDA backend (or no GPU is "
                     "present); stopping. Use --device cpu, or --allow-cpu-fallback.\n  (%s)\n",
                     f.device.c_str(), e.what());
        return 2;
      }
      std::fprintf(stderr, "stoke-train: no CUDA device available; falling back to the CPU.\n");
    }
  }
  if (f.tf32) set_allow_tf32(true);
  if (f.threads > 0) set_num_threads(f.threads);
  manual_seed(f.seed);

  // The run's files, before any data is read: an earlier run's results are not replaced without
  // --overwrite, the checkpoint directory must be writable, the metrics file must open.
  if (f.metrics.empty() && !f.checkpoint.empty())
    f.metrics = (std::filesystem::path(f.checkpoint) / "metrics.jsonl").string();
  if (const auto refusal = earlier_results(f)) {
    std::fprintf(stderr, "%s\n", refusal->c_str());
    return 2;
  }
  prepare_checkpoint_dir(f);
  MetricsLog metrics;
  if (!f.metrics.empty()) metrics.open(f.metrics, f.resume);

  const auto t_load = Clock::now();
  const auto train_set = open_split(f, true);
  const auto test_set = open_split(f, false);
  auto loader = make_loader(f, train_set, f.limit_train, true, device);
  auto test_loader = make_loader(f, test_set, f.limit_test, false, device);
  data::Example first;  // the model's input shape and classes come from the data
  train_set->get(0, first);
  train::check_splits_match(*train_set, first, *test_set, f.data + " (training split)",
                            f.data + " (test split)");
  std::printf(
      "data: %lld train / %lld test images (%lldx%lldx%lld) from %s as %s, %lld workers, "
      "prefetch %lld (%.2f s)\n",
      static_cast<long long>(loader->size()), static_cast<long long>(test_loader->size()),
      static_cast<long long>(first.height), static_cast<long long>(first.width),
      static_cast<long long>(first.channels), f.data.c_str(), f.data_format.c_str(),
      static_cast<long long>(f.workers), static_cast<long long>(f.prefetch), seconds_since(t_load));

  Generator init_gen(f.seed);
  auto model = nn::models::make_model(f.model, {.in_channels = first.channels,
                                                .num_classes = train_set->num_classes(),
                                                .input_size = first.height,
                                                .generator = &init_gen});
  model->to(device);  // before the optimizer: its state is made on the parameters' device
  train::check_model_fits(*model, f.model, first, train_set->num_classes(), device);
  auto opt = make_optimizer(f, *model);
  const int64_t steps_per_epoch = (loader->num_batches() + f.accum - 1) / f.accum;
  auto sched = make_scheduler(f, *opt, steps_per_epoch);
  std::printf(
      "model: %s, %lld parameters on %s | %s%s lr %g, batch %lld x %lld accum, %lld epochs, %d "
      "threads\n",
      f.model.c_str(), static_cast<long long>(model->num_parameters()),
      device.is_cpu() ? "cpu" : f.device.c_str(), f.optimizer.c_str(),
      f.optimizer == "sgd" && f.nesterov ? " (nesterov)" : "", f.lr,
      static_cast<long long>(f.batch), static_cast<long long>(f.accum),
      static_cast<long long>(f.epochs), num_threads());

  // A test hook, not a flag: the crash-and-resume tests kill the run right after this optimizer
  // step (STOKE_TRAIN_TEST_KILL_AT_STEP=N), deterministically, without a timing race.
  const char* kill_env = std::getenv("STOKE_TRAIN_TEST_KILL_AT_STEP");
  const int64_t kill_at_step = kill_env ? std::strtoll(kill_env, nullptr, 10) : 0;
  const std::string last_path = f.checkpoint.empty() ? "" : f.checkpoint + "/last.safetensors";
  const std::string best_path = f.checkpoint.empty() ? "" : f.checkpoint + "/best.safetensors";

  Position pos;
  // For the divergence message: the last finite training loss and the last checkpoint written
  // (or resumed from) by this run.
  double last_finite_loss = std::numeric_limits<double>::quiet_NaN();
  std::string last_good;
  if (f.resume && std::filesystem::exists(last_path)) {
    last_good = last_path;
    pos = load_last(last_path, *model, *opt, f);
    if (sched) sched->set_last_step(pos.global_step);
    std::printf("resumed from %s at epoch %lld, batch %lld (step %lld)\n", last_path.c_str(),
                static_cast<long long>(pos.epoch + 1), static_cast<long long>(pos.batch),
                static_cast<long long>(pos.global_step));
  } else if (f.resume) {
    std::printf("no checkpoint at %s: starting from scratch\n", last_path.c_str());
  }
  if (f.resume) {
    // The records the interrupted run wrote past its checkpoint are written again from here.
    const int64_t dropped = metrics.drop_records_after(pos.epoch, pos.global_step);
    if (dropped > 0)
      std::printf("metrics: dropped %lld record%s of %s past step %lld (written again here)\n",
                  static_cast<long long>(dropped), dropped == 1 ? "" : "s", f.metrics.c_str(),
                  static_cast<long long>(pos.global_step));
  }

  const auto t_total = Clock::now();
  int64_t images_total = 0;
  double train_seconds = 0;
  bool stop = false;
  for (; pos.epoch < f.epochs && !stop; ++pos.epoch) {
    // A resumed run continues mid-epoch: the loader starts at the saved batch.
    loader->set_epoch(pos.epoch, pos.batch);
    model->train();
    const auto t_epoch = Clock::now();
    double data_wait = 0;
    int64_t epoch_images = 0;
    const int64_t nb = loader->num_batches();
    ProgressBar bar("epoch " + std::to_string(pos.epoch + 1) + "/" + std::to_string(f.epochs), nb,
                    f.progress);
    for (; pos.batch < nb; ++pos.batch) {
      auto batch = loader->next();
      STOKE_CHECK(batch.has_value(), "stoke-train", "the loader ended after ", pos.batch, " of ",
                  nb, " batches");
      data_wait += batch->wait_seconds;
      const DeviceBatch b = to_device(*batch, device);
      const int64_t group_begin = pos.batch / f.accum * f.accum;
      const int64_t group_size = std::min(f.accum, nb - group_begin);
      Tensor logits = (*model)(b.images);
      Tensor loss = cross_entropy(logits, b.labels, {.label_smoothing = f.label_smoothing});
      const double loss_value = loss.item();
      // Divergence stops the run before the step that would put it into the weights: nothing
      // non-finite is trained on, logged or saved.
      STOKE_CHECK(std::isfinite(loss_value), "stoke-train", "the training loss is ",
                  non_finite_name(loss_value), " at epoch ", pos.epoch + 1, ", batch ",
                  pos.batch + 1, " (step ", pos.global_step + 1, "); the last finite loss was ",
                  last_finite_loss, "; the last good checkpoint is ",
                  last_good.empty() ? "none" : last_good,
                  ". Stopping: lower --lr, add --clip-grad, or check the data");
      last_finite_loss = loss_value;
      // Each micro-batch's mean loss is scaled so that k micro-batches of b give the gradient of
      // one batch of k*b (when the micro-batches have equal size).
      if (group_size > 1) loss = loss * (1.0 / static_cast<double>(group_size));
      loss.backward();
      {
        NoGradGuard no_grad;
        // B predictions come back to the host (the loss value already synchronized the step).
        const auto pred = ops::argmax(logits, 1).to(Device::cpu()).to_vector<int64_t>();
        const auto labels = batch->labels.to_vector<int64_t>();
        for (size_t i = 0; i < pred.size(); ++i) pos.epoch_correct += pred[i] == labels[i];
      }
      const int64_t n = batch->labels.numel();
      pos.epoch_loss_sum += loss_value * static_cast<double>(n);
      pos.epoch_seen += n;
      epoch_images += n;
      const bool boundary = pos.batch + 1 == group_begin + group_size;
      if (boundary) {
        if (f.clip_grad > 0) nn::optim::clip_grad_norm_(opt->params(), f.clip_grad);
        opt->step();
        opt->zero_grad();
        if (sched) sched->step();
        ++pos.global_step;
        if (f.log_every > 0 && pos.global_step % f.log_every == 0)
          log_step(metrics, pos.epoch + 1, pos.global_step, loss_value, opt->lr(),
                   batch->wait_seconds);
        if (f.checkpoint_every > 0 && pos.global_step % f.checkpoint_every == 0 &&
            !last_path.empty()) {
          Position next = pos;
          ++next.batch;
          save_last(last_path, *model, *opt, next, f);
          last_good = last_path;
        }
        if (f.eval_every > 0 && pos.global_step % f.eval_every == 0) {
          const EvalResult r = evaluate(*model, *test_loader, device);
          check_finite_eval(r, pos, last_good);
          log_eval(metrics, pos.global_step, r.loss, r.acc);
        }
        // Nothing is flushed first: every record is already written.
        if (kill_at_step > 0 && pos.global_step == kill_at_step) std::raise(SIGKILL);
      }
      char extra[96];
      std::snprintf(
          extra, sizeof extra, "loss %.4f acc %.1f%% wait %.0f%%",
          pos.epoch_loss_sum / static_cast<double>(pos.epoch_seen),
          100.0 * static_cast<double>(pos.epoch_correct) / static_cast<double>(pos.epoch_seen),
          100.0 * data_wait / std::max(seconds_since(t_epoch), 1e-9));
      bar.update(pos.batch + 1,
                 static_cast<double>(epoch_images) / std::max(seconds_since(t_epoch), 1e-9), extra);
    }
    bar.finish();
    const double epoch_time = seconds_since(t_epoch);
    train_seconds += epoch_time;
    images_total += epoch_images;
    const double train_loss =
        pos.epoch_loss_sum / static_cast<double>(std::max<int64_t>(pos.epoch_seen, 1));
    const double train_acc = 100.0 * static_cast<double>(pos.epoch_correct) /
                             static_cast<double>(std::max<int64_t>(pos.epoch_seen, 1));
    const auto t_eval = Clock::now();
    const EvalResult r = evaluate(*model, *test_loader, device);
    check_finite_eval(r, pos, last_good);
    const double eval_time = seconds_since(t_eval);
    const double ips = static_cast<double>(epoch_images) / std::max(epoch_time, 1e-9);
    std::printf(
        "epoch %lld/%lld: train loss %.4f acc %.2f%% | test loss %.4f acc %.2f%% | %.1f s "
        "(%.0f img/s, data wait %.1f%%), eval %.1f s, rss %.0f MiB (peak %.0f)\n",
        static_cast<long long>(pos.epoch + 1), static_cast<long long>(f.epochs), train_loss,
        train_acc, r.loss, r.acc, epoch_time, ips, 100.0 * data_wait / std::max(epoch_time, 1e-9),
        eval_time, current_rss_mib(), peak_rss_mib());
    std::fflush(stdout);
    log_epoch(metrics, {.epoch = pos.epoch + 1,
                        .step = pos.global_step,
                        .train_loss = train_loss,
                        .train_acc = train_acc,
                        .test_loss = r.loss,
                        .test_acc = r.acc,
                        .time_s = epoch_time,
                        .images_per_s = ips,
                        .data_wait_s = data_wait,
                        .data_wait_pct = 100.0 * data_wait / std::max(epoch_time, 1e-9),
                        .lr = opt->lr(),
                        .rss_mib = current_rss_mib(),
                        .peak_rss_mib = peak_rss_mib()});
    if (r.acc > pos.best_acc) {
      pos.best_acc = r.acc;
      if (!best_path.empty())
        nn::save_safetensors(best_path, on_cpu(model->state_dict()),
                             {{"epoch", std::to_string(pos.epoch + 1)},
                              {"test_acc", std::to_string(r.acc)},
                              {"model", f.model}});
    }
    if (r.loss < pos.best_loss) {
      pos.best_loss = r.loss;
      pos.bad_epochs = 0;
    } else if (f.patience > 0 && ++pos.bad_epochs >= f.patience) {
      std::printf("early stopping: test loss has not improved for %lld epochs\n",
                  static_cast<long long>(pos.bad_epochs));
      stop = true;
    }
    pos.batch = 0;
    pos.epoch_loss_sum = 0;
    pos.epoch_correct = pos.epoch_seen = 0;
    if (!last_path.empty()) {
      Position next = pos;
      ++next.epoch;
      save_last(last_path, *model, *opt, next, f);
      last_good = last_path;
    }
  }
  metrics.close();
  std::printf("done: best test acc %.2f%% | total %.1f s | %.0f img/s training\n", pos.best_acc,
              seconds_since(t_total),
              static_cast<double>(images_total) / std::max(train_seconds, 1e-9));
  return 0;
}

}  // namespace
}  // namespace stoke::train

int main(int argc, char** argv) {
  try {
    return stoke::train::run(stoke::train::parse_flags(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
