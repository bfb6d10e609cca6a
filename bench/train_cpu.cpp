// bench/train_cpu: training throughput (images/s) of stoke vs PyTorch on the same models, batch
// and threads, both measured in this run: stoke first, then the PyTorch twin
// (bench/train_cpu_torch.py), model by model, on synthetic data (random images and labels). A
// benchmark, not a test.
//
//   stoke-bench-train-cpu [--steps 50] [--batch 128] [--models lenet5,resnet8] [--no-peer]
//                         [--size 28] [--channels 1] [--classes 10]
//
// ResNet-50 at ImageNet's geometry: --models resnet50 --size 224 --channels 3 --classes 1000.
// Each row also has the model's FLOPs per training image (the convolutions' and linear layers'
// forward and backward, 2 per multiply-add, as the profiler counts them in one profiled step) and
// the MFU: the achieved FLOP/s over the best 1024^3 f32 matrix product
// measured on this machine in this run (nn/throughput.h).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/loss.h"
#include "bench/bench_util.h"
#include "nn/models/models.h"
#include "nn/optim/optimizer.h"
#include "nn/throughput.h"
#include "stoke/stoke.h"

using namespace stoke;

namespace {

struct Args {
  int64_t steps = 50, warmup = 5, batch = 128;
  int64_t size = 28, channels = 1, classes = 10;
  std::vector<std::string> models = {"lenet5", "resnet8"};
  bool peer = true;
};

struct StokeRow {
  double images_per_s = 0, flops_per_image = 0;
};

StokeRow stoke_row(const std::string& name, const Args& a) {
  Generator g(0);
  auto model = nn::models::make_model(
      name,
      {.in_channels = a.channels, .num_classes = a.classes, .input_size = a.size, .generator = &g});
  nn::optim::SGD opt(model->parameters(), {.lr = 0.01, .momentum = 0.9});
  const Tensor x = randn({a.batch, a.channels, a.size, a.size}, {}, &g);
  const Tensor y = randint(0, a.classes, {a.batch}, {.dtype = DType::i64}, &g);
  auto step = [&] {
    Tensor loss = cross_entropy((*model)(x), y);
    loss.backward();
    opt.step();
    opt.zero_grad();
    return loss.item();
  };
  for (int64_t i = 0; i < a.warmup; ++i) step();
  StokeRow row;
  row.flops_per_image = nn::training_flops(step) / static_cast<double>(a.batch);  // untimed
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < a.steps; ++i) step();
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  row.images_per_s = static_cast<double>(a.batch * a.steps) / dt;
  return row;
}

double torch_images_per_s(const std::string& name, const Args& a) {
  std::ostringstream cmd;
  cmd << "/usr/bin/python3 " << STOKE_SOURCE_DIR << "/bench/train_cpu_torch.py --model " << name
      << " --batch " << a.batch << " --steps " << a.steps << " --warmup " << a.warmup
      << " --threads " << num_threads() << " --size " << a.size << " --channels " << a.channels
      << " --classes " << a.classes << " 2>/dev/null";
  FILE* p = popen(cmd.str().c_str(), "r");
  if (!p) return 0;
  char line[1024] = {0};
  std::string out;
  while (std::fgets(line, sizeof line, p)) out += line;
  pclose(p);
  const auto k = out.find("\"images_per_s\": ");
  return k == std::string::npos ? 0 : std::atof(out.c_str() + k + 16);
}

// Returns the exit code for bad flags, or -1 when `a` holds them all.
int parse_args(int argc, char** argv, Args& a) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto next = [&] {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "stoke-bench-train-cpu: %s needs a value\n", arg.c_str());
        std::exit(2);
      }
      return std::string(argv[++i]);
    };
    auto integer = [&](int64_t& out) {
      const std::string v = next();
      if (bench::parse_int(v, out)) return true;
      std::fprintf(stderr, "stoke-bench-train-cpu: %s expects an integer, got '%s'\n", arg.c_str(),
                   v.c_str());
      return false;
    };
    if (arg == "--steps" || arg == "--warmup" || arg == "--batch") {
      if (!integer(arg == "--steps" ? a.steps : arg == "--warmup" ? a.warmup : a.batch)) return 2;
    } else if (arg == "--size" || arg == "--channels" || arg == "--classes") {
      if (!integer(arg == "--size" ? a.size : arg == "--channels" ? a.channels : a.classes))
        return 2;
    } else if (arg == "--no-peer")
      a.peer = false;
    else if (arg == "--quick") {
      a.steps = 2;
      a.warmup = 1;
      a.batch = 16;
      a.peer = false;
    } else if (arg == "--models") {
      a.models.clear();
      std::stringstream ss(next());
      for (std::string m; std::getline(ss, m, ',');) a.models.push_back(m);
    } else {
      std::fprintf(stderr, "unknown flag %s\n", arg.c_str());
      return 2;
    }
  }
  const std::vector<std::string> known = nn::models::model_names();
  if (const std::string* m = bench::first_unknown(a.models, known)) {
    std::fprintf(stderr, "stoke-bench-train-cpu: --models: unknown model '%s' (known: %s)\n",
                 m->c_str(), bench::join_commas(known).c_str());
    return 2;
  }
  if (a.steps < 1 || a.warmup < 0 || a.batch < 1 || a.size < 1 || a.channels < 1 || a.classes < 1) {
    std::fprintf(stderr,
                 "stoke-bench-train-cpu: expected --steps >= 1, --warmup >= 0, and --batch, "
                 "--size, --channels, --classes >= 1\n");
    return 2;
  }
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (int rc = parse_args(argc, argv, a); rc >= 0) return rc;
  if (a.peer && std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) {
    std::fprintf(stderr, "PyTorch not importable: measuring stoke only\n");
    a.peer = false;
  }
  const double peak = nn::measured_matmul_gflops(Device::cpu());
  std::printf(
      "train_cpu: batch %lld of %lldx%lldx%lld, %lld classes, %lld steps after %lld warm-up, "
      "%d threads; peak %.0f GFLOP/s (best 1024^3 f32 matmul, measured now)\n",
      static_cast<long long>(a.batch), static_cast<long long>(a.channels),
      static_cast<long long>(a.size), static_cast<long long>(a.size),
      static_cast<long long>(a.classes), static_cast<long long>(a.steps),
      static_cast<long long>(a.warmup), num_threads(), peak);
  std::printf("%-13s %14s %14s %8s %14s %8s\n", "model", "stoke img/s", "torch img/s", "ratio",
              "GFLOP/image", "MFU");
  std::ostringstream json;
  json << "{\"bench\":\"train_cpu\",\"threads\":" << num_threads() << ",\"batch\":" << a.batch
       << ",\"steps\":" << a.steps << ",\"size\":" << a.size << ",\"channels\":" << a.channels
       << ",\"classes\":" << a.classes << ",\"peak_gflops\":" << peak << ",\"rows\":[";
  for (size_t i = 0; i < a.models.size(); ++i) {
    StokeRow r;
    try {
      r = stoke_row(a.models[i], a);
    } catch (const std::exception& e) {  // e.g. convnext_tiny, which needs >= 32x32 inputs
      std::fprintf(stderr, "stoke-bench-train-cpu: %s: %s\n", a.models[i].c_str(), e.what());
      return 1;
    }
    const double s = r.images_per_s;
    const double t = a.peer ? torch_images_per_s(a.models[i], a) : 0;
    const double mfu = peak > 0 ? s * r.flops_per_image / (peak * 1e9) : 0;
    char ratio[32] = "-";
    if (t > 0) std::snprintf(ratio, sizeof ratio, "%.2fx", s / t);
    std::printf("%-13s %14.1f %14.1f %8s %14.3f %7.1f%%\n", a.models[i].c_str(), s, t, ratio,
                r.flops_per_image / 1e9, 100 * mfu);
    std::fflush(stdout);
    json << (i ? "," : "") << "{\"model\":\"" << a.models[i] << "\",\"stoke_images_per_s\":" << s
         << ",\"torch_images_per_s\":" << t << ",\"flops_per_image\":" << r.flops_per_image
         << ",\"mfu\":" << mfu << "}";
  }
  json << "]}";
  std::printf("(ratio = stoke / torch, above 1: stoke is faster)\n%s\n", json.str().c_str());
  return 0;
}
