// What a steady-state training step costs the host on (emulated) cuda: host-device
// synchronizations, device allocations and kernel launches, counted by core/sync_debug.h and the
// caching allocator. After warm-up a step of LeNet-5 or ResNet-8 (forward, cross entropy,
// backward, SGD-momentum or AdamW, zero_grad, and the step's loss and correct count kept on the
// device) makes no synchronization and no cudaMalloc, and the same number of launches every step.
// A change that adds a read-back or an allocation to the step fails here, with no GPU.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "autograd/loss.h"
#include "core/sync_debug.h"
#include "cuda/runtime/caching_allocator.h"
#include "dist/ddp.h"
#include "dist_ranks.h"
#include "nn/models/models.h"
#include "nn/optim/optimizer.h"
#include "ops_cuda_util.h"

using namespace stoke;
using namespace stoke::test;

namespace {

struct StepCost {
  DeviceActivity activity;
  size_t device_mallocs = 0;
};

// cudaMalloc calls on `device` so far (per device: ranks as threads each have their own).
size_t device_mallocs(int device = 0) {
  return cuda::caching_allocator().device_stats(device).cuda_malloc_calls;
}

// One training step with its metrics kept on the device: the loss goes into slot k of a device
// buffer, the count of correct predictions into slot k of another (read once per log interval
// by a trainer, never here).
struct Stepper {
  std::shared_ptr<nn::Module> model;
  std::unique_ptr<nn::optim::Optimizer> opt;
  Tensor x, y, losses, correct;
  int64_t k = 0;

  Stepper(const std::string& name, const std::string& optimizer, int64_t batch) {
    model = nn::models::make_model(name, {.in_channels = 1, .num_classes = 10});
    model->to(kCuda);
    if (optimizer == "sgd")
      opt = std::make_unique<nn::optim::SGD>(
          model->parameters(),
          nn::optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 5e-4});
    else
      opt = std::make_unique<nn::optim::AdamW>(model->parameters(),
                                               nn::optim::AdamWOptions{.lr = 1e-3});
    Generator g(5);
    x = randn({batch, 1, 28, 28}, {}, &g).to(kCuda);
    y = randint(0, 10, {batch}, {.dtype = DType::i64}, &g).to(kCuda);
    losses = zeros({16}, {.device = kCuda});
    correct = zeros({16}, {.dtype = DType::i64, .device = kCuda});
  }

  StepCost step() {
    const DeviceActivity a0 = device_activity();
    const size_t m0 = device_mallocs();
    {
      Tensor logits = (*model)(x);
      Tensor loss = cross_entropy(logits, y);
      loss.backward();
      opt->step();
      opt->zero_grad();
      NoGradGuard no_grad;
      losses.narrow(0, k, 1).copy_(loss.detach().reshape({1}));
      correct.narrow(0, k, 1).copy_(sum(eq(argmax(logits, 1), y)).reshape({1}));
      k = (k + 1) % 16;
    }
    return {device_activity() - a0, device_mallocs() - m0};
  }
};

}  // namespace

// Not under ThreadSanitizer, whose OS-thread emulator takes minutes a ResNet-8 step: the counts
// are the same in every build, and the kernels' races are checked in the kernel tests.
#if !defined(__SANITIZE_THREAD__)
TEST_CASE("steady-state training step on cuda: 0 syncs, 0 device allocations, fixed launches",
          "[step_syncs]") {
  // The launches a step takes, stated: a change that adds kernels to the step shows here. LeNet-5:
  // 5 layers' forward and backward, the loss, the fused optimizer step, zero_grad and the two
  // metric copies; ResNet-8 adds batch norms, residual adds and their backward.
  const auto [name, optimizer, launches] =
      GENERATE(table<const char*, const char*, int64_t>({{"lenet5", "sgd", 57},
                                                         {"lenet5", "adamw", 57},
                                                         {"resnet8", "sgd", 134},
                                                         {"resnet8", "adamw", 134}}));
  INFO(name << ", " << optimizer);
  Stepper s(name, optimizer, 4);
  for (int warm = 0; warm < 2; ++warm) s.step();
  const StepCost first = s.step();
  std::printf("%s %s: a step launches %lld kernels, %lld syncs, %zu device mallocs\n", name,
              optimizer, static_cast<long long>(first.activity.launches),
              static_cast<long long>(first.activity.syncs), first.device_mallocs);
  for (int i = 0; i < 3; ++i) {
    const StepCost c = i == 0 ? first : s.step();
    CHECK(c.activity.syncs == 0);
    CHECK(c.activity.expected_syncs == 0);
    CHECK(c.device_mallocs == 0);
    CHECK(c.activity.launches == launches);
  }
  // The values kept on the device are the steps' own: read once, here, on purpose.
  const ExpectedSync read("the test reads the step values");
  CHECK(std::isfinite(s.losses.narrow(0, 0, 1).item()));
}
#endif

TEST_CASE(
    "sync debug: error mode throws at item() naming it, warn mode counts, "
    "ExpectedSync exempts",
    "[step_syncs]") {
  const SyncDebugMode before = sync_debug_mode();
  const Tensor t = ones({1}, {.device = kCuda});
  set_sync_debug_mode(SyncDebugMode::error);
  const DeviceActivity a0 = device_activity();
  CHECK_THROWS_WITH(t.item(), Catch::Contains("Tensor::item blocked the host"));
  CHECK_THROWS_WITH(t.to(Device::cpu()), Catch::Contains("Tensor::to(cpu)"));
  {
    const ExpectedSync expected("a deliberate read");
    CHECK(t.item() == 1.0);
  }
  const DeviceActivity d = device_activity() - a0;
  CHECK(d.syncs == 2);
  CHECK(d.expected_syncs == 1);
  set_sync_debug_mode(SyncDebugMode::off);
  CHECK(t.item() == 1.0);
  CHECK((device_activity() - a0).syncs == 3);
  set_sync_debug_mode(before);
}

TEST_CASE("clip_grad_norm_no_sync_ on cuda: the norm and the gradients of an f64 loop, no sync",
          "[step_syncs]") {
  const double max_norm = GENERATE(0.5, 1e3);  // clips; does not clip
  Generator g(11);
  std::vector<Tensor> params;
  for (const Shape& s : std::vector<Shape>{{7, 5}, {300}, {4, 3, 3, 3}}) {
    Tensor p = zeros(s, {.device = kCuda});
    params.push_back(p);
  }
  for (int call = 0; call < 2; ++call) {  // the second on the memory the first left cached
    std::vector<std::vector<float>> want;
    double sq = 0;
    for (Tensor& p : params) {
      const Tensor grad = randn(p.shape(), {}, &g);
      want.push_back(grad.to_vector<float>());
      for (const float v : want.back()) sq += static_cast<double>(v) * v;
      p.set_grad(grad.to(kCuda));
    }
    const double norm = std::sqrt(sq);
    const double coef = std::min(1.0, max_norm / (norm + 1e-6));
    const DeviceActivity a0 = device_activity();
    const Tensor got_norm = nn::optim::clip_grad_norm_no_sync_(params, max_norm);
    CHECK((device_activity() - a0).syncs == 0);
    const ExpectedSync read("the test reads the results");
    // f32 sum of n = 443 squares: within n u of the sum of squares (u = 2^-24), half that after
    // the sqrt; the coefficient and each product add a few u more: 2 n u bounds both.
    const double tol = 2 * 443 * std::ldexp(1.0, -24);
    CHECK(std::abs(got_norm.item() - norm) <= tol * norm);
    for (size_t i = 0; i < params.size(); ++i) {
      const std::vector<float> got = params[i].grad().to_vector<float>();
      for (size_t j = 0; j < got.size(); ++j)
        // + 1e-30: an exact zero must come out exactly zero (1e-30 is below any element here).
        REQUIRE(std::abs(got[j] - coef * want[i][j]) <= tol * std::abs(coef * want[i][j]) + 1e-30);
    }
  }
}

#if !defined(__SANITIZE_THREAD__)
TEST_CASE(
    "steady-state DDP step on cuda over the emulated NCCL, 2 ranks: 0 syncs, 0 device "
    "allocations, fixed launches",
    "[step_syncs]") {
  constexpr int kMeasured = 3;
  std::vector<StepCost> costs(2 * kMeasured);  // written by the rank threads, checked here
  run_nccl(2, [&](dist::NcclCommunicator& c) {
    const Device device = Device::cuda(c.device());
    auto model = lenet5_replica(c);
    dist::DistributedDataParallel ddp(model, c);
    nn::optim::SGD opt(model->parameters(),
                       nn::optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 5e-4});
    Generator g(5 + static_cast<uint64_t>(c.rank()));
    const Tensor x = randn({4, 1, 28, 28}, {}, &g).to(device);
    const Tensor y = randint(0, 10, {4}, {.dtype = DType::i64}, &g).to(device);
    for (int step = 0; step < 2 + kMeasured; ++step) {
      const DeviceActivity a0 = device_activity();
      const size_t m0 = device_mallocs(c.device());
      cross_entropy(ddp(x), y).backward();  // the buckets' allreduces run during backward
      opt.step();
      opt.zero_grad();
      if (step >= 2)
        costs[static_cast<size_t>(c.rank() * kMeasured + step - 2)] = {
            device_activity() - a0, device_mallocs(c.device()) - m0};
    }
  });
  for (int r = 0; r < 2; ++r)
    for (int i = 0; i < kMeasured; ++i) {
      INFO("rank " << r << ", step " << i + 3);
      const StepCost& c = costs[static_cast<size_t>(r * kMeasured + i)];
      CHECK(c.activity.syncs == 0);
      CHECK(c.device_mallocs == 0);
      // Stated: LeNet-5's forward, loss, backward and SGD step (the 57 above less the 5 of the
      // metrics) and 20 of DDP's bucket work; NCCL's own calls are not stoke launches.
      CHECK(c.activity.launches == 72);
    }
  std::printf("lenet5 DDP over NCCL (emu), 2 ranks: a step launches %lld kernels\n",
              static_cast<long long>(costs[0].activity.launches));
}
#endif
