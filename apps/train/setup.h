// stoke-train's setup, in the order run() does it: the device, the data and its
// loaders, the model, the optimizer and its learning-rate schedule.
#pragma once

#include <memory>
#include <optional>

#include "data/loader.h"
#include "data/normalize.h"
#include "distributed.h"
#include "flags.h"
#include "nn/module.h"
#include "nn/optim/optimizer.h"
#include "nn/optim/scheduler.h"

namespace stoke::train {

// The device --device names. Nothing when a CUDA device is unusable and --allow-cpu-fallback is
// not given: the reason is on stderr and the run exits 2.
std::optional<Device> select_device(const Flags& f);

// Both splits of the dataset and their loaders.
struct Data {
  std::shared_ptr<const data::Dataset> train_set, test_set;
  std::unique_ptr<data::DataLoader> train, test;
  data::Example first;        // the first training image: the model's input shape comes from it
  int64_t train_samples = 0;  // a training epoch's samples (--limit-train applied), all ranks'
  // What batches are normalized with (--mean/--std, or the training split's statistics), and
  // where it came from, for the "normalize:" line.
  data::NormalizeOptions normalize;
  std::string normalize_from;
};

// Opens both splits, checks that they match, makes the loaders and prints the "data:" line. Under
// mpirun each rank's training loader visits its DistributedSampler shard (reshuffled every epoch
// from --seed, the same permutation a single process would use) and its test loader its
// ShardSampler shard.
Data load_data(const Flags& f, Device device, const Distributed& dist);

// The model --model names, for the data's shape and classes, on `device`, checked to fit them.
std::shared_ptr<nn::Module> build_model(const Flags& f, const Data& data, Device device);

std::unique_ptr<nn::optim::Optimizer> make_optimizer(const Flags& f, const nn::Module& model);

// The schedule --schedule names (nullptr for none), stepped once per optimizer step.
std::unique_ptr<nn::optim::LRScheduler> make_scheduler(const Flags& f, nn::optim::Optimizer& opt,
                                                       int64_t steps_per_epoch);

// What the epoch line's MFU is made of: the model's FLOPs per training image (nn::training_flops
// of one zero image through a CPU twin of the model in eval mode: the convolutions' and linear
// layers' forward and backward, as in training; the run's model, data and generators untouched)
// and the peak of `device`: nn::measured_matmul_gflops at 1024^3 (128^3 in stoke-train-emu, whose
// emulated GPU has no peak to speak of), measured once at start; --profile's "% peak" uses it too.
struct ThroughputBasis {
  double flops_per_image = 0, peak_gflops = 0;
  DType peak_dtype = DType::f32;  // the GEMM's dtype: --amp's on a GPU, else f32
};
ThroughputBasis measure_throughput_basis(const Flags& f, const Data& data, Device device);

// The "model:" line: model, parameters, device, optimizer and the run's shape.
void print_model_line(const Flags& f, const nn::Module& model, Device device);

}  // namespace stoke::train
