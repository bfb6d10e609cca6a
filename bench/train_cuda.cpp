// bench/train_cuda: training throughput on a CUDA device with synthetic data (random images and
// labels resident on the device): images/s, the model's FLOPs per training image, and the MFU
// against a large matrix product in the row's own precision measured in this run, for fp32, TF32,
// fp16 (autocast with the GradScaler deciding on the device) and bf16 (autocast), each eager and,
// with --graph, replayed as one CUDA graph per step (cuda/runtime/graph.h), and in each memory
// format of --layouts (nchw; nhwc: the images in channels_last, which every layer keeps, cuDNN's
// NHWC convolutions). Also the host waits and the kernel launches of one steady-state step. A
// benchmark, not a test: a table and one JSON line. Without a CUDA device it says so and exits 0.
//
//   stoke-bench-train-cuda [--models resnet50] [--size 224] [--channels 3] [--classes 1000]
//                          [--batch 64] [--steps 20] [--warmup 3] [--precision fp32,tf32,fp16,bf16]
//                          [--graph] [--layouts nchw,nhwc] [--peak-n 8192] [--quick]
//
// The defaults are NVIDIA's ResNet-50 v1.5 reference geometry (224x224, 1000 classes); SGD with
// momentum. --quick: LeNet-5 at 28x28, batch 4, 2 steps, fp32 and fp16, eager and graphed, both
// layouts, a 128^3 peak (the smoke run of the emulated build, stoke-bench-train-cuda-emu).
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/autocast.h"
#include "autograd/loss.h"
#include "bench/bench_util.h"
#include "core/sync_debug.h"
#include "cuda/runtime/device.h"
#include "cuda/runtime/graph.h"
#include "nn/amp/grad_scaler.h"
#include "nn/models/models.h"
#include "nn/optim/optimizer.h"
#include "nn/throughput.h"
#include "ops/math_mode.h"
#include "stoke/stoke.h"

using namespace stoke;

namespace {

struct Args {
  std::vector<std::string> models = {"resnet50"}, precisions = {"fp32", "tf32", "fp16", "bf16"};
  std::vector<std::string> layouts = {"nchw", "nhwc"};
  int64_t size = 224, channels = 3, classes = 1000, batch = 64, steps = 20, warmup = 3;
  int64_t peak_n = 8192;
  bool graph = false;
};

struct Row {
  std::string model, precision, mode, layout;
  double images_per_s = 0, flops_per_image = 0, peak_gflops = 0;
  int64_t launches = 0, syncs = 0;
};

std::optional<DType> autocast_dtype_of(const std::string& p) {
  if (p == "fp16") return DType::f16;
  if (p == "bf16") return DType::bf16;
  return std::nullopt;
}

// One model in one precision: `steps` timed steps after `warmup` eager ones (graphed: captured
// after the warm-up and replayed). The step reads nothing back, so it can be captured.
Row run(const std::string& name, const std::string& precision, bool graphed,
        const std::string& layout, double flops, double peak, const Args& a, Device device) {
  set_allow_tf32(precision == "tf32");
  Generator g(0);
  auto model = nn::models::make_model(
      name,
      {.in_channels = a.channels, .num_classes = a.classes, .input_size = a.size, .generator = &g});
  model->to(device);
  nn::optim::SGD opt(model->parameters(), {.lr = 0.01, .momentum = 0.9});
  if (graphed) opt.keep_lr_on_device();
  const std::optional<DType> amp = autocast_dtype_of(precision);
  std::unique_ptr<nn::amp::GradScaler> scaler;
  if (amp == DType::f16) scaler = std::make_unique<nn::amp::GradScaler>();
  const Tensor x =
      randn({a.batch, a.channels, a.size, a.size}, {}, &g)
          .to(device)
          .contiguous(layout == "nhwc" ? MemoryFormat::channels_last : MemoryFormat::contiguous);
  const Tensor y = randint(0, a.classes, {a.batch}, {.dtype = DType::i64}, &g).to(device);
  auto step = [&] {
    Tensor loss;
    {
      std::optional<autocast> region;
      if (amp) region.emplace(device.type, AutocastOptions{.dtype = *amp});
      loss = cross_entropy((*model)(x), y);
    }
    if (scaler) {
      scaler->scale(loss).backward();
      scaler->step_on_device(opt);
      scaler->update();
    } else {
      loss.backward();
      opt.step();
    }
    opt.zero_grad();
  };
  auto wait = [&] {
    const ExpectedSync read("the benchmark times whole steps");
    (void)sum(model->parameters().front()).item();
  };
  for (int64_t i = 0; i < a.warmup; ++i) step();
  cuda::Graph graph;
  if (graphed) graph.capture(step);
  auto one = [&] { graphed ? graph.replay() : step(); };
  wait();
  const DeviceActivity a0 = device_activity();
  one();
  const DeviceActivity per_step = device_activity() - a0;
  wait();
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < a.steps; ++i) one();
  wait();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  set_allow_tf32(false);
  return {.model = name,
          .precision = precision,
          .mode = graphed ? "graph" : "eager",
          .layout = layout,
          .images_per_s = static_cast<double>(a.batch * a.steps) / s,
          .flops_per_image = flops,
          .peak_gflops = peak,
          .launches = per_step.launches,
          .syncs = per_step.syncs};
}

// Returns the exit code for bad flags, or -1 when `a` holds them all.
int parse_args(int argc, char** argv, Args& a) {
  const char* me = "stoke-bench-train-cuda";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::optional<std::string> {
      if (i + 1 < argc) return std::string(argv[++i]);
      std::fprintf(stderr, "%s: %s needs a value\n", me, arg.c_str());
      return std::nullopt;
    };
    auto integer = [&](int64_t& out, int64_t min) {
      const auto v = value();
      if (!v) return false;
      if (!bench::parse_int(*v, out) || out < min) {
        std::fprintf(stderr, "%s: %s expects an integer >= %lld, got '%s'\n", me, arg.c_str(),
                     static_cast<long long>(min), v->c_str());
        return false;
      }
      return true;
    };
    bool ok = true;
    if (arg == "--size")
      ok = integer(a.size, 1);
    else if (arg == "--channels")
      ok = integer(a.channels, 1);
    else if (arg == "--classes")
      ok = integer(a.classes, 1);
    else if (arg == "--batch")
      ok = integer(a.batch, 1);
    else if (arg == "--steps")
      ok = integer(a.steps, 1);
    else if (arg == "--warmup")
      ok = integer(a.warmup, 1);  // the capture follows warm eager steps
    else if (arg == "--peak-n")
      ok = integer(a.peak_n, 1);
    else if (arg == "--graph")
      a.graph = true;
    else if (arg == "--models" || arg == "--precision" || arg == "--layouts") {
      const auto v = value();
      if (!v) return 2;
      (arg == "--models"    ? a.models
       : arg == "--layouts" ? a.layouts
                            : a.precisions) = bench::split_commas(*v);
    } else if (arg == "--quick") {
      a = Args{.models = {"lenet5"},
               .precisions = {"fp32", "fp16"},
               .size = 28,
               .channels = 1,
               .classes = 10,
               .batch = 4,
               .steps = 2,
               .warmup = 1,
               .peak_n = 128,
               .graph = true};
    } else {
      std::fprintf(stderr,
                   "%s: unknown flag '%s' (see the comment at the top of bench/train_cuda.cpp)\n",
                   me, arg.c_str());
      return 2;
    }
    if (!ok) return 2;
  }
  if (const std::string* p = bench::first_unknown(a.precisions, {"fp32", "tf32", "fp16", "bf16"})) {
    std::fprintf(stderr, "%s: --precision: unknown '%s' (fp32, tf32, fp16, bf16)\n", me,
                 p->c_str());
    return 2;
  }
  if (const std::string* m = bench::first_unknown(a.models, nn::models::model_names())) {
    std::fprintf(stderr, "%s: --models: unknown model '%s'\n", me, m->c_str());
    return 2;
  }
  if (const std::string* l = bench::first_unknown(a.layouts, {"nchw", "nhwc"})) {
    std::fprintf(stderr, "%s: --layouts: unknown '%s' (nchw, nhwc)\n", me, l->c_str());
    return 2;
  }
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (int rc = parse_args(argc, argv, a); rc >= 0) return rc;
  if (!cuda::is_available()) {
    std::printf("stoke-bench-train-cuda: no CUDA device (%s): skipped\n",
                cuda::device_unavailable_reason().c_str());
    return 0;
  }
  const Device device = Device::cuda();
  std::printf(
      "train_cuda: batch %lld of %lldx%lldx%lld, %lld classes, %lld steps after %lld "
      "warm-up, SGD momentum; peak: the best %lld^3 product in the row's precision, now; "
      "launches and syncs: one steady-state step's\n",
      static_cast<long long>(a.batch), static_cast<long long>(a.channels),
      static_cast<long long>(a.size), static_cast<long long>(a.size),
      static_cast<long long>(a.classes), static_cast<long long>(a.steps),
      static_cast<long long>(a.warmup), static_cast<long long>(a.peak_n));
  std::printf("%-10s %-9s %-6s %-6s %10s %10s %12s %7s %9s %6s\n", "model", "precision", "mode",
              "layout", "img/s", "GFLOP/img", "peak GFLOP/s", "MFU", "launches", "syncs");
  std::vector<Row> rows;
  for (const std::string& name : a.models) {
    // The FLOPs a training image costs: one profiled f32 step of a twin on the CPU at batch 1
    // (the count depends on the shapes, not on the device or the precision).
    Generator g(0);
    auto twin = nn::models::make_model(name, {.in_channels = a.channels,
                                              .num_classes = a.classes,
                                              .input_size = a.size,
                                              .generator = &g});
    const Tensor x1 = zeros({1, a.channels, a.size, a.size});
    const double flops = nn::training_flops([&] { sum((*twin)(x1)).backward(); });
    for (const std::string& p : a.precisions) {
      set_allow_tf32(p == "tf32");
      const double peak =
          nn::measured_matmul_gflops(device, a.peak_n, autocast_dtype_of(p).value_or(DType::f32));
      set_allow_tf32(false);
      for (const std::string& layout : a.layouts)
        for (const bool graphed : {false, true}) {
          if (graphed && !a.graph) continue;
          rows.push_back(run(name, p, graphed, layout, flops, peak, a, device));
          const Row& r = rows.back();
          std::printf("%-10s %-9s %-6s %-6s %10.1f %10.3f %12.1f %6.1f%% %9lld %6lld\n",
                      r.model.c_str(), r.precision.c_str(), r.mode.c_str(), r.layout.c_str(),
                      r.images_per_s, r.flops_per_image / 1e9, r.peak_gflops,
                      100 * r.images_per_s * r.flops_per_image / (r.peak_gflops * 1e9),
                      static_cast<long long>(r.launches), static_cast<long long>(r.syncs));
          std::fflush(stdout);
        }
    }
  }
  std::ostringstream json;
  json << "{\"bench\":\"train_cuda\",\"device\":"
       << bench::json_string(cuda::device_properties(0).name) << ",\"batch\":" << a.batch
       << ",\"size\":" << a.size << ",\"steps\":" << a.steps << ",\"rows\":[";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    json << (i ? "," : "") << "{\"model\":\"" << r.model << "\",\"precision\":\"" << r.precision
         << "\",\"mode\":\"" << r.mode << "\",\"layout\":\"" << r.layout
         << "\",\"images_per_s\":" << r.images_per_s << ",\"flops_per_image\":" << r.flops_per_image
         << ",\"peak_gflops\":" << r.peak_gflops
         << ",\"mfu\":" << r.images_per_s * r.flops_per_image / (r.peak_gflops * 1e9)
         << ",\"launches_per_step\":" << r.launches << ",\"syncs_per_step\":" << r.syncs << "}";
  }
  json << "]}";
  std::printf("%s\n", json.str().c_str());
  return 0;
}
