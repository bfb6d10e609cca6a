// nn::amp::GradScaler on (emulated) cuda tensors: step_on_device decides the skip on the device
// and equals the CPU's step() (which reads the flag) bit for bit, for SGD and AdamW, the first
// step skipped and a later one; an f16 autocast training step with the scaler makes no host
// wait and no cudaMalloc after warm-up; and under DDP over the emulated NCCL the ranks agree on a
// skip that one rank's gradients cause.
#include <catch2/catch.hpp>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "autograd/autocast.h"
#include "autograd/loss.h"
#include "core/grad_mode.h"
#include "core/sync_debug.h"
#include "cuda/runtime/caching_allocator.h"
#include "dist/ddp.h"
#include "dist_ranks.h"
#include "nn/amp/grad_scaler.h"
#include "nn/models/models.h"
#include "nn/optim/optimizer.h"
#include "ops_cuda_util.h"
#include "stoke/stoke.h"

using namespace stoke;
using namespace stoke::test;
using nn::amp::GradScaler;

namespace {

struct ScalerRun {
  std::vector<std::vector<float>> w;
  std::vector<double> scale;
  int64_t skipped = 0;
};

// loss = sum(w * x) (the gradient of w is x times the scale, exactly for a power-of-two scale),
// an inf put into the gradient at steps 0 and 4.
ScalerRun scaler_run(Device device, bool on_device, const std::string& kind) {
  const Tensor x = from_vector<float>({1e-3f, -2e-4f, 3e-2f, 5.0f}, {4}).to(device);
  GradScaler scaler({.init_scale = 256, .growth_interval = 2});
  Tensor w = from_vector<float>({0.5f, -1.0f, 2.0f, 0.25f}, {4}).to(device).set_requires_grad(true);
  std::unique_ptr<nn::optim::Optimizer> opt;
  if (kind == "sgd")
    opt = std::make_unique<nn::optim::SGD>(
        std::vector<Tensor>{w},
        nn::optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .dampening = 0.25});
  else
    opt = std::make_unique<nn::optim::AdamW>(std::vector<Tensor>{w},
                                             nn::optim::AdamWOptions{.lr = 0.01});
  ScalerRun r;
  for (int s = 0; s < 8; ++s) {
    scaler.scale(stoke::sum(stoke::mul(w, x))).backward();
    if (s == 0 || s == 4) {
      NoGradGuard no_grad;
      fill_(w.grad().narrow(0, 3, 1), INFINITY);
    }
    if (on_device)
      scaler.step_on_device(*opt);
    else
      scaler.step(*opt);
    scaler.update();
    r.w.push_back(w.detach().to_vector<float>());
    r.scale.push_back(scaler.get_scale());
    opt->zero_grad();
  }
  r.skipped = scaler.skipped_steps();
  return r;
}

}  // namespace

TEST_CASE("cuda: GradScaler step_on_device on cuda equals step() on the CPU, bit for bit",
          "[grad_scaler_cuda]") {
  for (const char* kind : {"sgd", "adamw"}) {
    INFO(kind);
    const ScalerRun cpu = scaler_run(Device::cpu(), false, kind);
    const ScalerRun dev = scaler_run(kCuda, true, kind);
    CHECK(cpu.skipped == 2);
    CHECK(dev.skipped == 2);
    CHECK(dev.scale == cpu.scale);
    for (size_t s = 0; s < cpu.w.size(); ++s) {
      INFO("step " << s);
      // The same f32 operations on both devices (the optimizer kernels are the CPU's loops).
      CHECK(dev.w[s] == cpu.w[s]);
    }
  }
}

#if !defined(__SANITIZE_THREAD__)
TEST_CASE(
    "cuda: syncs: an f16 autocast step of LeNet-5 and ResNet-8 with the GradScaler makes no host "
    "wait, in fixed launches",
    "[grad_scaler_cuda][step_syncs]") {
  // The launches stated, as in test_step_syncs.cpp: a cast pass creeping back (ResNet-8's batch
  // norms read and write f16 on cuda, AutocastPolicy::mixed_norm) or any added kernel shows here.
  const auto [name, launches] =
      GENERATE(table<const char*, int64_t>({{"lenet5", 139}, {"resnet8", 252}}));
  INFO(name);
  Generator init(3), g(5);
  auto model = nn::models::make_model(name, {.generator = &init});
  model->to(kCuda);
  nn::optim::SGD opt(model->parameters(),
                     nn::optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 5e-4});
  GradScaler scaler;
  const Tensor x = randn({4, 1, 28, 28}, {}, &g).to(kCuda);
  const Tensor y = randint(0, 10, {4}, {.dtype = DType::i64}, &g).to(kCuda);
  DeviceActivity cost{};
  size_t mallocs = 0;
  for (int step = 0; step < 5; ++step) {
    const DeviceActivity a0 = device_activity();
    const size_t m0 = cuda::caching_allocator().device_stats(0).cuda_malloc_calls;
    Tensor loss;
    {
      autocast region(kCuda.type, AutocastOptions{.dtype = DType::f16});
      loss = cross_entropy((*model)(x), y);
    }
    scaler.scale(loss).backward();
    scaler.unscale_(opt);
    nn::optim::clip_grad_norm_no_sync_(opt.params(), 5.0);
    scaler.step_on_device(opt);
    scaler.update();
    opt.zero_grad();
    if (step >= 2) {
      cost = device_activity() - a0;
      mallocs = cuda::caching_allocator().device_stats(0).cuda_malloc_calls - m0;
      INFO("step " << step);
      CHECK(cost.syncs == 0);
      CHECK(mallocs == 0);
      CHECK(cost.launches == launches);
    }
  }
  std::printf("%s f16 autocast + GradScaler + clip: a step launches %lld kernels\n", name,
              static_cast<long long>(cost.launches));
  const ExpectedSync read("the test reads the scaler");
  CHECK(scaler.skipped_steps() >= 0);
  CHECK(std::isfinite(scaler.get_scale()));
}
#endif

#if !defined(__SANITIZE_THREAD__)
TEST_CASE(
    "cuda: DDP over the emulated NCCL, 2 ranks, f16 autocast with the GradScaler on the device: "
    "an inf on one rank skips the step on both, with no host wait",
    "[grad_scaler_cuda][step_syncs]") {
  constexpr int kSteps = 6, kInfStep = 3;
  struct RankResult {
    std::vector<std::vector<float>> w;
    int64_t skipped = -1;
    double scale = 0;
    int64_t syncs = 0;
  };
  std::vector<RankResult> results(2);  // written by the rank threads, checked here
  run_nccl(2, [&](dist::NcclCommunicator& c) {
    const Device device = Device::cuda(c.device());
    auto model = lenet5_replica(c);
    dist::DistributedDataParallel ddp(model, c);
    nn::optim::AdamW opt(model->parameters(), nn::optim::AdamWOptions{.lr = 1e-3});
    GradScaler scaler({.init_scale = 1024, .growth_interval = 2});
    // As stoke-train sets it: the ranks agree on found-inf by a MAX allreduce of the flag.
    scaler.found_inf_reducer = [&c](Tensor& found_inf) {
      c.allreduce(found_inf, dist::ReduceOp::max);
    };
    Generator g(5 + static_cast<uint64_t>(c.rank()));
    const Tensor x = randn({4, 1, 28, 28}, {}, &g).to(device);
    const Tensor y = randint(0, 10, {4}, {.dtype = DType::i64}, &g).to(device);
    RankResult& r = results[static_cast<size_t>(c.rank())];
    for (int step = 0; step < kSteps; ++step) {
      const DeviceActivity a0 = device_activity();
      Tensor loss;
      {
        autocast region(device.type, AutocastOptions{.dtype = DType::f16});
        loss = cross_entropy(ddp(x), y);
      }
      scaler.scale(loss).backward();  // the buckets' allreduces run during backward
      if (step == kInfStep && c.rank() == 0) {
        // After the allreduce: only rank 0's gradient holds the inf, as a local overflow would.
        NoGradGuard no_grad;
        fill_(model->parameters()[0].grad().narrow(0, 0, 1), INFINITY);
      }
      scaler.step_on_device(opt);
      scaler.update();
      opt.zero_grad();
      if (step >= 2) r.syncs += (device_activity() - a0).syncs;
      const ExpectedSync read("the test reads the weights");
      std::vector<float> all;
      for (const Tensor& p : model->parameters()) {
        const std::vector<float> v = p.detach().to_vector<float>();
        all.insert(all.end(), v.begin(), v.end());
      }
      r.w.push_back(std::move(all));
    }
    const ExpectedSync read("the test reads the scaler");
    r.skipped = scaler.skipped_steps();
    r.scale = scaler.get_scale();
  });
  for (int rank = 0; rank < 2; ++rank) {
    INFO("rank " << rank);
    const RankResult& r = results[static_cast<size_t>(rank)];
    CHECK(r.syncs == 0);
    CHECK(r.skipped == 1);
    // 1024 grows to 2048 after steps 0-1 and 4096 after 2-3 would, but step 3 skips: backoff to
    // 1024 (0.5 x 2048), then steps 4-5 grow it to 2048.
    CHECK(r.scale == 2048);
    // The skipped step changed no weight on either rank.
    CHECK(r.w[kInfStep] == r.w[kInfStep - 1]);
  }
  // Both ranks hold the same replicas after every step: the same averaged gradients, the same
  // skip (bit for bit: the same operations on the same values).
  for (int step = 0; step < kSteps; ++step) {
    INFO("step " << step);
    CHECK(results[0].w[static_cast<size_t>(step)] == results[1].w[static_cast<size_t>(step)]);
  }
}
#endif
