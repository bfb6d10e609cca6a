#include "flags.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "data/channel_stats.h"
#include "nn/models/models.h"

namespace stoke::train {

namespace {

// Flags that count things are bounded so that products with them (epochs x steps, batch x image
// bytes) cannot overflow: the bounds are far above any real run.
constexpr int64_t kMaxCount = int64_t{1} << 31;
constexpr double kInf = std::numeric_limits<double>::infinity();

// The range of every numeric flag, in one table: the parser enforces it and --help prints it
// (usage() replaces each "@--flag@" of the text with the flag's range, and fails if a flag of the
// table has none), so the two cannot disagree.
struct IntRange {
  int64_t lo, hi;
};
struct RealRange {
  double lo, hi;
  bool lo_open = false, hi_open = false;  // the bound itself is left out: (0, 1]
};
const std::map<std::string, IntRange>& int_ranges() {
  static const std::map<std::string, IntRange> r = {
      {"--workers", {0, 256}},
      {"--prefetch", {1, 1024}},
      {"--epochs", {1, 1 << 20}},
      {"--batch", {1, 1 << 20}},
      {"--step-size", {1, 1 << 20}},
      {"--milestones", {1, 1 << 20}},
      {"--warmup", {0, kMaxCount}},
      {"--accum", {1, 1 << 20}},
      {"--patience", {0, kMaxCount}},
      {"--seed", {0, INT64_MAX}},
      {"--threads", {0, 1024}},
      {"--checkpoint-every", {0, kMaxCount}},
      {"--eval-every", {0, kMaxCount}},
      {"--log-every", {0, kMaxCount}},
      {"--limit-train", {0, kMaxCount}},
      {"--limit-test", {0, kMaxCount}},
      {"--zero", {1, 3}},
      {"--profile-steps", {0, kMaxCount}},
  };
  return r;
}
const std::map<std::string, RealRange>& real_ranges() {
  static const std::map<std::string, RealRange> r = {
      {"--lr", {0, kInf, true, true}},
      {"--momentum", {0, 1}},
      {"--weight-decay", {0, kInf, false, true}},
      // A decay factor: > 1 grows the learning rate, <= 0 makes it zero or negative (--gamma -1
      // made it negative every other epoch).
      {"--gamma", {0, 1, true, false}},
      {"--label-smoothing", {0, 1}},  // torch's range for cross_entropy
      {"--clip-grad", {0, kInf, false, true}},
      // Under 0.1 s no collective completes reliably (1e-4 s rounded to 0 ms, which turned the
      // watchdog off); past 1e6 s (11.6 days) the deadline nears the clock's range (1e10 s fired
      // at the first collective, 1e300 s overflowed the cast to milliseconds).
      {"--dist-timeout", {0.1, 1e6}},
  };
  return r;
}

std::string range_text(const IntRange& r) {
  return "[" + std::to_string(r.lo) + ", " + std::to_string(r.hi) + "]";
}

std::string range_text(const RealRange& r) {
  const auto num = [](double x) {
    if (std::isinf(x)) return std::string(x > 0 ? "inf" : "-inf");
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", x);
    return std::string(buf);
  };
  return (r.lo_open ? "(" : "[") + num(r.lo) + ", " + num(r.hi) + (r.hi_open ? ")" : "]");
}

int64_t to_int(const std::string& flag, const std::string& v, IntRange range) {
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  STOKE_CHECK(!v.empty() && *end == '\0' && errno != ERANGE && x >= range.lo && x <= range.hi,
              "stoke-train", "flag ", flag, " expects an integer in ", range_text(range), ", got '",
              v, "'");
  return x;
}

// An integer flag in its range from the table.
int64_t to_int(const std::string& flag, const std::string& v) {
  return to_int(flag, v, int_ranges().at(flag));
}

// A real flag: finite, and in its range from the table.
double to_double(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  errno = 0;
  const double x = std::strtod(v.c_str(), &end);
  STOKE_CHECK(!v.empty() && *end == '\0' && errno != ERANGE && std::isfinite(x), "stoke-train",
              "flag ", flag, " expects a finite number, got '", v, "'");
  const RealRange& r = real_ranges().at(flag);
  const bool above = r.lo_open ? x > r.lo : x >= r.lo;
  const bool below = r.hi_open ? x < r.hi : x <= r.hi;
  STOKE_CHECK(above && below, "stoke-train", "flag ", flag, " expects a number in ", range_text(r),
              ", got '", v, "'");
  return x;
}

// A switch given as --flag or --flag=true|false|1|0.
bool to_bool(const std::string& flag, const std::string& v, bool has_value) {
  if (!has_value || v == "true" || v == "1") return true;
  STOKE_CHECK(v == "false" || v == "0", "stoke-train", "flag ", flag,
              " is a switch: give it alone or as ", flag, "=true|false, got '", v, "'");
  return false;
}

// `value` of a flag that names one of `known` ("unknown optimizer 'x' (known: sgd, adam, adamw,
// ...)").
void check_known(const char* what, const std::string& value,
                 const std::vector<std::string>& known) {
  if (std::find(known.begin(), known.end(), value) != known.end()) return;
  std::string list;
  for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
  STOKE_FAIL("stoke-train", "unknown ", what, " '", value, "' (known: ", list, ")");
}

// The help text; each "@--flag@" stands for the flag's range (usage() fills them in).
constexpr const char* kUsage = R"(usage: stoke-train [flags]
  A range [a, b] holds the values a numeric flag takes, ends included; ( or ) leaves an end out.
  --model NAME            lenet5 (default), resnet8, resnet8_pool (ResNet-8 with a 2x2
                          max-pool after the stem), resnet20, resnet56, resnet18, resnet8_gn,
                          resnet20_gn, resnet18_gn (GroupNorm), resnet9, vgg11, vgg16, mobilenetv2,
                          efficientnet_b0, convnext_nano, convnext_tiny (needs >= 32x32 inputs)
  --data DIR              the dataset (default /usr/share/datasets/fashion-mnist), as --data-format:
  --data-format F         idx (default): DIR holds the MNIST-style IDX files (gzip or raw)
                          packed: DIR/train and DIR/test are stoke-pack outputs
                          folder: DIR/train and DIR/test are image folders (<class>/<file>.png)
  --workers N             data loader threads, @--workers@ (2; 0 = load in the training thread)
  --prefetch N            batches each loader thread prepares ahead, @--prefetch@ (2)
  --recipe fast           a tuned CPU speedrun recipe: resnet8_pool, 4 epochs, batch 128, SGD
                          nesterov lr 0.1, one-cycle, weight decay 5e-4, label smoothing 0.1, no
                          augmentation (flags given with it override its values)
  --epochs N              @--epochs@ (2)
  --batch N               images per step (per rank under mpirun), @--batch@ (128)
  --lr X                  learning rate, @--lr@ (0.05)
  --seed N                @--seed@ (0)
  --threads N             @--threads@ (0: stoke's default)
  --optimizer sgd|adam|adamw|rmsprop|adagrad (sgd; rmsprop and adagrad with torch's defaults)
  --momentum X            sgd's momentum, @--momentum@ (0.9)
  --nesterov              sgd with Nesterov momentum
  --amsgrad               adam and adamw: AMSGrad
  --weight-decay X        @--weight-decay@ (0; adamw: 1e-2, as torch.optim.AdamW)
  --no-decay-norm-bias    no weight decay on biases and norm weights (1-dim parameters)
  --schedule none|step|multistep|cosine|onecycle  the learning-rate schedule (none)
  --step-size EPOCHS      --schedule step: decay every EPOCHS epochs, @--step-size@ (1)
  --milestones E1,E2      --schedule multistep (needed): decay at these epochs, increasing,
                          each @--milestones@
  --gamma X               --schedule step and multistep: the decay factor, @--gamma@ (0.1)
  --warmup STEPS          linear warm-up over STEPS optimizer steps, @--warmup@ (0)
  --label-smoothing X     @--label-smoothing@ (0)
  --clip-grad NORM        clip the gradients' global norm to NORM, @--clip-grad@ (0: off)
  --accum K               gradient accumulation: K micro-batches per step, @--accum@ (1)
  --mean M1,M2,.. --std S1,S2,..  normalize images as (x / 255 - mean) / std, one value per
                          channel or one for all; default: each channel's mean and std over the
                          training split (all of it; at most 50,000 records of a pack and 10,000
                          images of a folder, spread evenly), printed and kept in the checkpoints
                          (--resume and stoke-logits use the checkpoint's)
  --augment               random crop (padding 2) and horizontal flip of training images
  --augment-on device|workers  where: folded into the normalize pass on the training device
                          (default; one kernel on a GPU) or the loader's worker transforms
  --patience EPOCHS       early stopping on test loss, @--patience@ (0: off)
  --checkpoint DIR        keep DIR/best.safetensors and DIR/last.safetensors (DIR is created,
                          and must be writable, before anything is loaded)
  --checkpoint-every N    also save DIR/last.safetensors every N optimizer steps,
                          @--checkpoint-every@ (0: at the end of each epoch only)
  --resume                continue from DIR/last.safetensors (mid-epoch if it was saved there,
                          at any -np and --batch), appending to the metrics (records past that
                          step are written again); with no last.safetensors it starts from scratch
                          if DIR holds no earlier results, and refuses (exit 2) if it does
  --overwrite             start over in a DIR (or --metrics FILE) that holds an earlier run's
                          results, removing them; without --resume or --overwrite such a run
                          refuses to start (exit 2)
  --eval-every N          evaluate every N optimizer steps, @--eval-every@ (0: once per epoch)
  --metrics FILE          JSONL metrics (default DIR/metrics.jsonl with --checkpoint), written
                          at every record; a failed write stops the run
  --log-every N           steps between step records in the metrics, @--log-every@ (50)
  --limit-train N         use the first N training images only, @--limit-train@ (0: all)
  --limit-test N          use the first N test images only, @--limit-test@ (0: all)
  --device cpu|cuda|cuda:I  --allow-cpu-fallback   --no-progress
  --tf32                  let f32 matmul/conv on CUDA use TF32 tensor cores (~1e-3 rel. error)
  --amp fp16|bf16         mixed precision: convs and matmuls in fp16/bf16 under autocast, losses
                          and normalization in f32 (batch norm on cuda: fp16/bf16 activations,
                          f32 statistics); fp16 scales the loss (dynamic GradScaler)
  --profile FILE          record optimizer steps A..B-1 (--profile-steps A:B, default 10:30, or
                          fewer if the run is shorter; A and B each @--profile-steps@, A < B) as
                          a Chrome trace in FILE (open it in ui.perfetto.dev or chrome://tracing)
                          and print the summary: the step breakdown and the ops and backward
                          nodes by self time, with GFLOP/s against this device's measured 1024^3
                          matmul
  --profile-device        with --profile and --device cuda: also each op's time on the GPU (CUDA
                          events around it, a track per device in the trace, `device` rows in
                          the summary); costs a few microseconds of host time per op
  --cuda-graph            with --device cuda: after 3 eager steps, capture the training step
                          (forward, loss, backward, clipping, loss scaler, optimizer) as one CUDA
                          graph and replay it each step (any --schedule: the optimizer reads
                          the learning rate from device memory; with --accum, one graph per
                          accumulation group; every optimizer skips an overflowing --amp fp16
                          step on the device); not in a job of several ranks yet
  --channels-last         the batches in the channels_last memory format (NHWC strides, as torch's
                          memory_format=torch.channels_last), which every layer's output keeps;
                          on a GPU the convolutions run cuDNN's NHWC (tensor-core) kernels. The
                          parameters stay NCHW; on the CPU the convolutions copy to NCHW and back
Output paths (--metrics, --profile, DIR's files) must be regular files or not exist yet, each a
file of its own: a FIFO, a directory or one path given twice is refused before anything runs.
Under mpirun -np N (one process per rank; --batch is per rank, each rank trains on its shard).
These flags mean nothing in one process, and are refused there (exit 2):
  --allreduce native|ring|tree|rhd|auto  the gradient allreduce: the engine's own (default),
                          stoke's ring, binomial tree or halving-doubling, or auto: chosen per
                          bucket size by a cost model calibrated at start (docs/allreduce.md);
                          with --zero: native, ring, rhd or auto
  --dist-backend auto|nccl|mpi  with --device cuda: NCCL (GPU memory to GPU memory), or MPI
                          with the tensors staged through host memory; auto (default) is NCCL
                          when this build has it. --device cuda means cuda:<local rank>
  --dist-timeout SECONDS  a rank that waits longer than this in one collective aborts the job,
                          naming the collective, @--dist-timeout@ (300)
  --zero 1|2|3            ZeRO instead of DDP, stage @--zero@: each rank keeps the optimizer
                          state of 1/N of the parameters (1), and of their gradients too (2),
                          and of the parameters themselves, each module's gathered around its
                          forward and backward (3); last.safetensors holds the whole state, so
                          a run resumes at any -np and stage, or without --zero. With --amp
                          fp16 the loss scaler unscales and checks each rank's gradient shard,
                          and every rank skips alike
  --master-weights        with --zero and --amp: the convolutions' and linear layers' parameters
                          in the --amp dtype (norms stay f32), stepped through f32 master
                          weights in ZeRO's shards; evaluation runs in the autocast region too.
                          Checkpoints hold the half parameters: resume with the same flags
)";

}  // namespace

std::optional<int> cuda_index(const std::string& device) {
  if (device == "cpu") return std::nullopt;
  STOKE_CHECK(device == "cuda" || device.rfind("cuda:", 0) == 0, "stoke-train", "unknown device '",
              device, "' (cpu or cuda[:i])");
  const std::string index = device == "cuda" ? "0" : device.substr(5);
  STOKE_CHECK(!index.empty() && index.size() <= 3 &&
                  index.find_first_not_of("0123456789") == std::string::npos,
              "stoke-train", "unknown device '", device, "' (cpu or cuda[:i])");
  return std::stoi(index);
}

std::string usage() {
  std::string text = kUsage;
  const auto fill = [&](const std::string& flag, const std::string& range) {
    const std::string token = "@" + flag + "@";
    const size_t at = text.find(token);
    // Every flag of the tables has its range in the text (a test runs --help).
    STOKE_CHECK(at != std::string::npos, "stoke-train", "--help lists no range for ", flag);
    for (size_t p = at; p != std::string::npos; p = text.find(token, p))
      text.replace(p, token.size(), range);
  };
  for (const auto& [flag, r] : int_ranges()) fill(flag, range_text(r));
  for (const auto& [flag, r] : real_ranges()) fill(flag, range_text(r));
  STOKE_CHECK(text.find("@--") == std::string::npos, "stoke-train",
              "--help has a range of no flag: ", text.substr(text.find("@--"), 20));
  return text;
}

std::string distributed_only_flags(const Flags& f) {
  std::string out;
  for (const char* flag :
       {"--allreduce", "--dist-backend", "--dist-timeout", "--zero", "--master-weights"})
    if (std::find(f.given.begin(), f.given.end(), flag) != f.given.end())
      out += (out.empty() ? "" : ", ") + std::string(flag);
  return out;
}

void apply_fast_recipe(Flags& f) {
  // ResNet-8 with a max-pooled stem: its stages run on 14x14, 7x7 and 4x4 planes, ~12,000 img/s
  // on 2 Zen 5 cores against ResNet-8's ~4,300, and it learns about as much per epoch (92.2% after
  // 4 epochs, 21 s; 10 epochs at batch 256: 93.0-93.3%, 53 s). LeNet-5, the recipe before it,
  // leveled off near 92% however long it ran. Crop+flip augmentation cost accuracy at these
  // budgets (91.8% against 93.0% after 10 epochs), so it is off; --augment adds it.
  f.model = "resnet8_pool";
  f.epochs = 4;
  f.batch = 128;
  f.optimizer = "sgd";
  f.lr = 0.1;
  f.momentum = 0.9;
  f.nesterov = true;
  f.weight_decay = 5e-4;
  f.schedule = "onecycle";
  f.label_smoothing = 0.1;
}

Flags parse_flags(int argc, char** argv) {
  Flags f;
  // --recipe first: its values are defaults that the other flags override (`--recipe fast
  // --epochs 15` trains 15 epochs), wherever they stand.
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--recipe=fast" ||
        (arg == "--recipe" && i + 1 < argc && std::string(argv[i + 1]) == "fast"))
      apply_fast_recipe(f);
  }
  using Setter = std::function<void(const std::string&, const std::string&)>;
  const std::map<std::string, Setter> with_value = {
      {"--model", [&](auto&, auto& v) { f.model = v; }},
      {"--data", [&](auto&, auto& v) { f.data = v; }},
      {"--data-format", [&](auto&, auto& v) { f.data_format = v; }},
      {"--workers", [&](auto& k, auto& v) { f.workers = to_int(k, v); }},
      {"--prefetch", [&](auto& k, auto& v) { f.prefetch = to_int(k, v); }},
      {"--recipe", [&](auto&, auto& v) { f.recipe = v; }},
      {"--epochs", [&](auto& k, auto& v) { f.epochs = to_int(k, v); }},
      {"--batch", [&](auto& k, auto& v) { f.batch = to_int(k, v); }},
      {"--optimizer", [&](auto&, auto& v) { f.optimizer = v; }},
      {"--augment-on", [&](auto&, auto& v) { f.augment_on = v; }},
      {"--mean",
       [&](auto& k, auto& v) {
         f.mean = data::parse_channels(v, false, "stoke-train", "flag " + k);
       }},
      {"--std",
       [&](auto& k, auto& v) {
         f.std = data::parse_channels(v, true, "stoke-train", "flag " + k);
       }},
      {"--lr", [&](auto& k, auto& v) { f.lr = to_double(k, v); }},
      {"--momentum", [&](auto& k, auto& v) { f.momentum = to_double(k, v); }},
      {"--weight-decay", [&](auto& k, auto& v) { f.weight_decay = to_double(k, v); }},
      {"--schedule", [&](auto&, auto& v) { f.schedule = v; }},
      {"--step-size", [&](auto& k, auto& v) { f.step_size = to_int(k, v); }},
      {"--milestones", [&](auto&, auto& v) { f.milestones = v; }},
      {"--gamma", [&](auto& k, auto& v) { f.gamma = to_double(k, v); }},
      {"--warmup", [&](auto& k, auto& v) { f.warmup = to_int(k, v); }},
      {"--label-smoothing", [&](auto& k, auto& v) { f.label_smoothing = to_double(k, v); }},
      {"--clip-grad", [&](auto& k, auto& v) { f.clip_grad = to_double(k, v); }},
      {"--accum", [&](auto& k, auto& v) { f.accum = to_int(k, v); }},
      {"--patience", [&](auto& k, auto& v) { f.patience = to_int(k, v); }},
      {"--seed", [&](auto& k, auto& v) { f.seed = static_cast<uint64_t>(to_int(k, v)); }},
      {"--threads", [&](auto& k, auto& v) { f.threads = static_cast<int>(to_int(k, v)); }},
      {"--checkpoint", [&](auto&, auto& v) { f.checkpoint = v; }},
      {"--checkpoint-every", [&](auto& k, auto& v) { f.checkpoint_every = to_int(k, v); }},
      {"--eval-every", [&](auto& k, auto& v) { f.eval_every = to_int(k, v); }},
      {"--metrics", [&](auto&, auto& v) { f.metrics = v; }},
      {"--log-every", [&](auto& k, auto& v) { f.log_every = to_int(k, v); }},
      {"--limit-train", [&](auto& k, auto& v) { f.limit_train = to_int(k, v); }},
      {"--limit-test", [&](auto& k, auto& v) { f.limit_test = to_int(k, v); }},
      {"--device", [&](auto&, auto& v) { f.device = v; }},
      {"--allreduce", [&](auto&, auto& v) { f.allreduce = v; }},
      {"--dist-backend", [&](auto&, auto& v) { f.dist_backend = v; }},
      {"--dist-timeout", [&](auto& k, auto& v) { f.dist_timeout = to_double(k, v); }},
      {"--zero", [&](auto& k, auto& v) { f.zero = to_int(k, v); }},
      {"--profile", [&](auto&, auto& v) { f.profile = v; }},
      {"--amp",
       [&](auto& k, auto& v) {
         STOKE_CHECK(v == "fp16" || v == "bf16", "stoke-train", k,
                     " expects fp16 or bf16 (the autocast precision), got '", v, "'");
         f.amp = v;
       }},
      {"--profile-steps",
       [&](auto& k, auto& v) {
         const auto colon = v.find(':');
         STOKE_CHECK(colon != std::string::npos, "stoke-train", k,
                     " expects A:B (optimizer steps A to B-1), got '", v, "'");
         f.profile_begin = to_int(k, v.substr(0, colon));
         f.profile_end = to_int(k, v.substr(colon + 1));
         STOKE_CHECK(f.profile_begin < f.profile_end, "stoke-train", k, " expects A < B, got '", v,
                     "'");
       }},
  };
  const std::map<std::string, std::function<void(bool)>> switches = {
      {"--nesterov", [&](bool on) { f.nesterov = on; }},
      {"--amsgrad", [&](bool on) { f.amsgrad = on; }},
      {"--no-decay-norm-bias", [&](bool on) { f.no_decay_norm_bias = on; }},
      {"--augment", [&](bool on) { f.augment = on; }},
      {"--profile-device", [&](bool on) { f.profile_device = on; }},
      {"--cuda-graph", [&](bool on) { f.cuda_graph = on; }},
      {"--channels-last", [&](bool on) { f.channels_last = on; }},
      {"--master-weights", [&](bool on) { f.master_weights = on; }},
      {"--resume", [&](bool on) { f.resume = on; }},
      {"--overwrite", [&](bool on) { f.overwrite = on; }},
      {"--allow-cpu-fallback", [&](bool on) { f.allow_cpu_fallback = on; }},
      {"--tf32", [&](bool on) { f.tf32 = on; }},
      {"--no-progress", [&](bool on) { f.progress = !on; }},
  };
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i], value;
    bool has_value = false;
    if (arg == "--help" || arg == "-h") {
      std::fputs(usage().c_str(), stdout);
      std::exit(0);
    }
    if (const auto eq = arg.find('='); eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      has_value = true;
    } else if (with_value.count(arg)) {
      STOKE_CHECK(i + 1 < argc, "stoke-train", "flag ", arg, " needs a value");
      value = argv[++i];
    }
    if (auto it = with_value.find(arg); it != with_value.end()) {
      it->second(arg, value);
    } else if (auto sw = switches.find(arg); sw != switches.end()) {
      sw->second(to_bool(arg, value, has_value));
    } else {
      STOKE_FAIL("stoke-train", "unknown flag '", arg, "' (see --help)");
    }
    f.given.push_back(arg);
  }
  // Schedule values: each in its range (the setters), the milestones increasing, and each flag
  // only with the schedule that reads it (it was ignored without a word).
  std::stringstream milestones(f.milestones);
  int64_t last_milestone = 0;
  for (std::string item; std::getline(milestones, item, ',');) {
    const int64_t m = to_int("--milestones", item);
    STOKE_CHECK(m > last_milestone, "stoke-train",
                "flag --milestones expects increasing epochs, got '", f.milestones, "'");
    last_milestone = m;
  }
  const auto given = [&](const char* flag) {
    return std::find(f.given.begin(), f.given.end(), flag) != f.given.end();
  };
  STOKE_CHECK(!given("--step-size") || f.schedule == "step", "stoke-train",
              "--step-size is --schedule step's, got --schedule ", f.schedule);
  STOKE_CHECK(!given("--milestones") || f.schedule == "multistep", "stoke-train",
              "--milestones is --schedule multistep's, got --schedule ", f.schedule);
  STOKE_CHECK(f.schedule != "multistep" || last_milestone > 0, "stoke-train",
              "--schedule multistep needs --milestones E1,E2,...");
  STOKE_CHECK(!given("--gamma") || f.schedule == "step" || f.schedule == "multistep", "stoke-train",
              "--gamma is --schedule step's and multistep's, got --schedule ", f.schedule);
  // The names are checked here, before anything is loaded (they used to fail after the data).
  check_known("model", f.model, nn::models::model_names());
  check_known("optimizer", f.optimizer, {"sgd", "adam", "adamw", "rmsprop", "adagrad"});
  STOKE_CHECK(!f.amsgrad || f.optimizer == "adam" || f.optimizer == "adamw", "stoke-train",
              "--amsgrad is Adam's: it needs --optimizer adam or adamw, got ", f.optimizer);
  check_known("augment-on", f.augment_on, {"device", "workers"});
  STOKE_CHECK(f.mean.empty() == f.std.empty(), "stoke-train",
              "--mean and --std go together: give both, or neither (computed from the data)");
  STOKE_CHECK(f.mean.size() == f.std.size() || f.mean.size() == 1 || f.std.size() == 1,
              "stoke-train", "--mean has ", f.mean.size(), " values and --std ", f.std.size(),
              ": give one per channel for both, or one for all");
  check_known("schedule", f.schedule, {"none", "step", "multistep", "cosine", "onecycle"});
  check_known("allreduce", f.allreduce, {"native", "ring", "tree", "rhd", "auto"});
  check_known("dist backend", f.dist_backend, {"auto", "nccl", "mpi"});
  cuda_index(f.device);
  STOKE_CHECK(f.recipe.empty() || f.recipe == "fast", "stoke-train", "unknown recipe '", f.recipe,
              "' (known: fast)");
  STOKE_CHECK(f.data_format == "idx" || f.data_format == "packed" || f.data_format == "folder",
              "stoke-train", "unknown --data-format '", f.data_format,
              "' (known: idx, packed, folder)");
  STOKE_CHECK(!f.resume || !f.checkpoint.empty(), "stoke-train", "--resume needs --checkpoint DIR");
  STOKE_CHECK(!f.profile_device || !f.profile.empty(), "stoke-train",
              "--profile-device needs --profile FILE");
  STOKE_CHECK(!f.profile_device || f.device != "cpu", "stoke-train",
              "--profile-device times ops on the GPU: it needs --device cuda");
  STOKE_CHECK(!f.cuda_graph || f.device != "cpu", "stoke-train",
              "--cuda-graph captures CUDA work: it needs --device cuda");
  STOKE_CHECK(!f.master_weights || (f.zero > 0 && !f.amp.empty()), "stoke-train",
              "--master-weights keeps f32 master weights in ZeRO's shards for half parameters: it "
              "needs --zero 1|2|3 and --amp fp16|bf16");
  STOKE_CHECK(!f.resume || !f.overwrite, "stoke-train",
              "--resume and --overwrite exclude each other: --resume continues the run in DIR, "
              "--overwrite starts a new one over it");
  return f;
}

}  // namespace stoke::train
