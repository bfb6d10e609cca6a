// nn::amp::GradScaler on (emulated) cuda tensors: step_on_device decides the skip on the device
// and equals the CPU's step() (which reads the flag) bit for bit, for SGD and AdamW, the first
// step skipped and a later one; and an f16 autocast training step with the scaler makes no host
// wait and no cudaMalloc after warm-up.
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
TEST_CASE("cuda: syncs: an f16 autocast step of LeNet-5 with the GradScaler makes no host wait",
          "[grad_scaler_cuda][step_syncs]") {
  Generator init(3), g(5);
  auto model = nn::models::make_model("lenet5", {.generator = &init});
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
    }
  }
  std::printf("lenet5 f16 autocast + GradScaler + clip: a step launches %lld kernels\n",
              static_cast<long long>(cost.launches));
  const ExpectedSync read("the test reads the scaler");
  CHECK(scaler.skipped_steps() >= 0);
  CHECK(std::isfinite(scaler.get_scale()));
}
#endif
