// Command-line options of stoke-train.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace stoke::train {

struct Flags {
  std::string model = "lenet5";
  std::string data = "/usr/share/datasets/fashion-mnist";
  std::string data_format = "idx";  // idx | packed | folder
  int64_t workers = 2;              // loader worker threads; 0 = load in the training thread
  int64_t prefetch = 2;             // batches each worker may prepare ahead
  std::string recipe;               // "" or "fast"
  int64_t epochs = 2;
  int64_t batch = 128;
  std::string optimizer = "sgd";  // sgd | adam | adamw | rmsprop | adagrad
  double lr = 0.05;
  double momentum = 0.9;
  bool nesterov = false;
  bool amsgrad = false;                // adam and adamw
  bool no_decay_norm_bias = false;     // two parameter groups: biases and norm weights undecayed
  std::optional<double> weight_decay;  // unset: the optimizer's default (AdamW 1e-2, else 0)
  std::string schedule = "none";       // none | step | multistep | cosine | onecycle
  int64_t step_size = 1;               // epochs, for --schedule step
  std::string milestones;              // epochs, comma separated, for --schedule multistep
  double gamma = 0.1;
  int64_t warmup = 0;  // optimizer steps of linear warm-up
  double label_smoothing = 0;
  double clip_grad = 0;  // global-norm clipping; 0 = off
  int64_t accum = 1;     // gradient accumulation micro-batches per optimizer step
  int64_t patience = 0;  // early stopping on test loss; 0 = off
  bool augment = false;  // random crop (pad 2) + horizontal flip
  // Where --augment happens: "device" folds it into the normalize pass where the batch is
  // consumed (the GPU kernel on cuda), "workers" runs the loader's transforms; same batches.
  std::string augment_on = "device";
  // --mean/--std: the per-channel statistics of x / 255 that batches are normalized with (one
  // value for every channel, or one per channel); empty: computed from the training split
  // (data::channel_stats), or on --resume taken from the checkpoint.
  std::vector<float> mean, std;
  uint64_t seed = 0;
  int threads = 0;               // 0 = stoke's default
  std::string checkpoint;        // directory for best.safetensors and last.safetensors
  int64_t checkpoint_every = 0;  // optimizer steps; 0 = at the end of each epoch only
  bool resume = false;
  bool overwrite = false;   // a new run may replace an earlier run's checkpoints and metrics
  int64_t eval_every = 0;   // optimizer steps between evaluations; 0 = once per epoch
  std::string metrics;      // JSONL file; default <checkpoint>/metrics.jsonl when checkpointing
  int64_t log_every = 50;   // steps between JSONL step records
  int64_t limit_train = 0;  // use only the first N training images (tests, quick runs)
  int64_t limit_test = 0;
  std::string device = "cpu";
  bool allow_cpu_fallback = false;
  bool tf32 = false;  // f32 GEMMs and convolutions on CUDA may use TF32 tensor cores
  // --amp fp16|bf16: forward and loss inside stoke::autocast; fp16 with nn::amp::GradScaler. The
  // weights, their gradients, the optimizer and the checkpoints stay f32. "" = f32 training.
  std::string amp;
  bool progress = true;
  // Under mpirun (distributed.h): the allreduce that averages gradients, and how long a rank waits
  // for the others in one collective before the job is aborted.
  std::string allreduce = "native";   // native | ring | tree | rhd | auto
  std::string dist_backend = "auto";  // for cuda tensors: auto | nccl | mpi (host-staged)
  double dist_timeout = 300;          // seconds
  // --zero 1|2|3: the optimizer sharded over the ranks (dist/zero.h) instead of DDP; 0: off.
  int64_t zero = 0;
  // --profile FILE: a Chrome trace of optimizer steps [profile_begin, profile_end) (rank 0) and a
  // summary table on stdout (profile.h).
  std::string profile;
  int64_t profile_begin = 10, profile_end = 30;
  bool profile_device = false;  // --profile-device: CUDA-event device times (StartOptions)
  // --master-weights: with --amp and --zero, the convolutions' and linear layers' parameters in
  // the --amp dtype, f32 master weights in ZeRO's shards (nn/amp/half_parameters.h).
  bool master_weights = false;
  bool cuda_graph = false;  // --cuda-graph: each step replays a CUDA graph (step_graph.h)
  // --channels-last: each batch in the channels_last memory format (NHWC strides), which every
  // layer then keeps (ops/memory_format.h); cuDNN's NHWC convolutions on a GPU.
  bool channels_last = false;
  // The flags given on the command line, in order (without their values): what --recipe set is
  // not among them.
  std::vector<std::string> given;
};

// The flags given that mean something only in a job of 2 or more ranks (--allreduce,
// --dist-backend, --dist-timeout, --zero), "" when none was.
std::string distributed_only_flags(const Flags& f);

// Parses argv; prints usage and exits on --help; throws stoke::Error naming a bad flag or value.
Flags parse_flags(int argc, char** argv);

// The flags that --recipe fast stands for (docs/design-notes.md, "The CPU speedrun recipe").
// parse_flags applies it before the other flags, which override its values wherever they stand on
// the command line.
void apply_fast_recipe(Flags& f);
std::string usage();

// The CUDA device index --device names ("cuda" is 0), nothing for "cpu"; throws for anything else.
std::optional<int> cuda_index(const std::string& device);

}  // namespace stoke::train
