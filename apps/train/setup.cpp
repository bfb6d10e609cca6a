#include "setup.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "data/cache.h"
#include "data/channel_stats.h"
#include "data/idx_dataset.h"
#include "data/packed.h"
#include "data_check.h"
#include "nn/models/models.h"
#include "ops/backend.h"
#include "progress.h"
#include "stoke/stoke.h"
#if STOKE_HAS_CUDA || STOKE_CUDA_EMU
#include "cuda/runtime/pinned.h"
#endif

namespace stoke::train {
namespace {

// One split of the dataset named by --data and --data-format.
std::shared_ptr<const data::Dataset> open_split(const Flags& f, bool train) {
  if (f.data_format == "idx")  // --limit-train/-test: the files are read only as far as needed
    return std::make_shared<data::IdxImageDataset>(
        f.data,
        data::IdxImageOptions{.train = train, .limit = train ? f.limit_train : f.limit_test});
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

// The training loader (shuffled; with --augment --augment-on workers, augmented by its workers)
// or the test loader (in order).
std::unique_ptr<data::DataLoader> make_loader(const Flags& f,
                                              std::shared_ptr<const data::Dataset> ds,
                                              int64_t limit, bool train, Device device,
                                              const Distributed& dist) {
  const int64_t n = limit > 0 ? std::min(limit, ds->size()) : ds->size();
  std::shared_ptr<data::Sampler> sampler;
  if (train && dist.active()) {
    sampler = std::make_shared<data::DistributedSampler>(
        n, data::DistributedSamplerOptions{
               .rank = dist.rank, .world_size = dist.size, .shuffle = true, .seed = f.seed});
  } else if (train) {
    sampler = std::make_shared<data::RandomSampler>(n, f.seed);
  } else if (dist.active()) {
    sampler = std::make_shared<ShardSampler>(n, dist.rank, dist.size);
  } else {
    sampler = std::make_shared<data::SequentialSampler>(n);
  }
  std::shared_ptr<const data::Transform> transform;
  if (train && f.augment && f.augment_on == "workers")
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

// --mean/--std, or each channel's mean and std of x / 255 over the training split: all of it for
// IDX files (bytes in memory: Fashion-MNIST's 60,000 images take a fraction of a second), up to
// 50,000 records spread over packed shards (a memcpy each from the mapping: CIFAR-10's whole
// training split; an ImageNet-sized pack would take tens of seconds whole) and 10,000 images over
// an image folder (each one a decode). The same figures on every rank: the sums are exact integers.
data::NormalizeOptions normalization(const Flags& f, const data::Dataset& train, int64_t channels,
                                     std::string& from) {
  data::NormalizeOptions n;
  if (!f.mean.empty()) {
    for (const auto& [flag, v] : {std::pair{"--mean", &f.mean}, std::pair{"--std", &f.std}})
      STOKE_CHECK(v->size() == 1 || static_cast<int64_t>(v->size()) == channels, "stoke-train",
                  flag, " has ", v->size(), " values, but the images of ", f.data, " have ",
                  channels, " channels: give one per channel, or one for all");
    n.mean = f.mean;
    n.std = f.std;
    from = "--mean/--std";
    return n;
  }
  const int64_t cap = f.data_format == "folder" ? 10000 : f.data_format == "packed" ? 50000 : 0;
  const data::ChannelStats s =
      data::channel_stats(train, {.max_images = cap}, f.data + " (training split)");
  n.mean = s.mean;
  n.std = s.std;
  from = std::to_string(s.images) + " training images";
  for (size_t c = 0; c < n.std.size(); ++c) {
    if (n.std[c] > 0) continue;
    // A constant channel (a synthetic set, an unused alpha plane): dividing by its std of 0 would
    // make every value inf or NaN. It is scaled by 1, as scikit-learn's StandardScaler does.
    n.std[c] = 1;
    std::printf(
        "note: channel %zu of the training images has one value (%.4f) in every pixel: "
        "its std is 0, so it is scaled by 1\n",
        c, static_cast<double>(n.mean[c]));
  }
  return n;
}

}  // namespace

std::optional<Device> select_device(const Flags& f) {
  const std::optional<int> index = cuda_index(f.device);
  if (!index) return Device::cpu();
  const Device want = Device::cuda(*index);
  try {
    // ops:: on purpose: stoke:: has no call that says whether a device is usable, and why not;
    // the lookup of the device's kernels throws that reason.
    ops::backend_for("stoke-train", want);
    return want;
  } catch (const Error& e) {
    if (!f.allow_cpu_fallback) {
      std::fprintf(stderr,
                   "stoke-train: --device %s: this build has no CUDA backend (or no GPU is "
                   "present); stopping. Use --device cpu, or --allow-cpu-fallback.\n  (%s)\n",
                   f.device.c_str(), e.what());
      return std::nullopt;
    }
    std::fprintf(stderr, "stoke-train: no CUDA device available; falling back to the CPU.\n");
    return Device::cpu();
  }
}

Data load_data(const Flags& f, Device device, const Distributed& dist) {
  const auto t_load = Clock::now();
  Data d;
  d.train_set = open_split(f, true);
  d.test_set = open_split(f, false);
  d.train = make_loader(f, d.train_set, f.limit_train, true, device, dist);
  d.train_samples =
      f.limit_train > 0 ? std::min(f.limit_train, d.train_set->size()) : d.train_set->size();
  d.test = make_loader(f, d.test_set, f.limit_test, false, device, dist);
  d.train_set->get(0, d.first);
  check_splits_match(*d.train_set, d.first, *d.test_set, f.data + " (training split)",
                     f.data + " (test split)");
  d.normalize = normalization(f, *d.train_set, d.first.channels, d.normalize_from);
  std::printf(
      "data: %lld train / %lld test images (%lldx%lldx%lld) from %s as %s, %lld workers, "
      "prefetch %lld (%.2f s)\n",
      static_cast<long long>(d.train->size()), static_cast<long long>(d.test->size()),
      static_cast<long long>(d.first.height), static_cast<long long>(d.first.width),
      static_cast<long long>(d.first.channels), f.data.c_str(), f.data_format.c_str(),
      static_cast<long long>(f.workers), static_cast<long long>(f.prefetch), seconds_since(t_load));
  return d;
}

std::shared_ptr<nn::Module> build_model(const Flags& f, const Data& data, Device device) {
  Generator init_gen(f.seed);
  auto model = nn::models::make_model(f.model, {.in_channels = data.first.channels,
                                                .num_classes = data.train_set->num_classes(),
                                                .input_size = data.first.height,
                                                .generator = &init_gen});
  model->to(device);  // before the optimizer: its state is made on the parameters' device
  check_model_fits(*model, f.model, data.first, data.train_set->num_classes(), device);
  return model;
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
    return std::make_unique<Adam>(
        std::move(groups), AdamOptions{.lr = f.lr, .weight_decay = wd, .amsgrad = f.amsgrad});
  if (f.optimizer == "adamw")
    return std::make_unique<AdamW>(
        std::move(groups), AdamWOptions{.lr = f.lr, .weight_decay = wd, .amsgrad = f.amsgrad});
  if (f.optimizer == "rmsprop")
    return std::make_unique<RMSprop>(std::move(groups),
                                     RMSpropOptions{.lr = f.lr, .weight_decay = wd});
  if (f.optimizer == "adagrad")
    return std::make_unique<Adagrad>(std::move(groups),
                                     AdagradOptions{.lr = f.lr, .weight_decay = wd});
  STOKE_FAIL("stoke-train", "unknown optimizer '", f.optimizer,
             "' (known: sgd, adam, adamw, rmsprop, adagrad)");
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

namespace {

// nn::measured_matmul_gflops on `device` at 1024^3 in `dtype` (128^3 and f32 in stoke-train-emu,
// whose "GPU" is the emulator on CPU threads: its rate is no peak of anything, and 1024^3
// products there take minutes; the small product keeps the columns' format).
double device_peak_gflops(Device device, DType dtype) {
#if defined(STOKE_TRAIN_EMU)
  (void)dtype;
  return nn::measured_matmul_gflops(device, 128);
#else
  return nn::measured_matmul_gflops(device, 1024, dtype);
#endif
}

}  // namespace

ThroughputBasis measure_throughput_basis(const Flags& f, const Data& data, Device device) {
  Generator gen(0);  // not the run's generators
  auto twin = nn::models::make_model(f.model, {.in_channels = data.first.channels,
                                               .num_classes = data.train_set->num_classes(),
                                               .input_size = data.first.height,
                                               .generator = &gen});
  twin->eval();
  const Tensor x = zeros({1, data.first.channels, data.first.height, data.first.width});
  ThroughputBasis b;
  b.flops_per_image = nn::training_flops([&] { sum(twin->forward(x)).backward(); });
  // A mixed-precision run on a GPU is held to the tensor cores' peak in its dtype; on the CPU,
  // autocast's convolutions and products accumulate in f32 kernels, so f32's.
  if (device.is_cuda() && !f.amp.empty()) b.peak_dtype = f.amp == "fp16" ? DType::f16 : DType::bf16;
  b.peak_gflops = device_peak_gflops(device, b.peak_dtype);
  return b;
}

void print_model_line(const Flags& f, const nn::Module& model, Device device) {
  std::printf(
      "model: %s, %lld parameters on %s | %s%s lr %g, batch %lld x %lld accum, %lld epochs, %d "
      "threads\n",
      f.model.c_str(), static_cast<long long>(model.num_parameters()),
      device.is_cpu() ? "cpu" : f.device.c_str(), f.optimizer.c_str(),
      f.optimizer == "sgd" && f.nesterov ? " (nesterov)"
      : f.amsgrad                        ? " (amsgrad)"
                                         : "",
      f.lr, static_cast<long long>(f.batch), static_cast<long long>(f.accum),
      static_cast<long long>(f.epochs), num_threads());
}

}  // namespace stoke::train
