// cuda/kernels/optimizer.cu in cuda/emu against the CPU ops: sgd_step_kernel and adam_step_kernel
// give ops::sgd_step_'s and ops::adam_step_'s f32 results over three steps (momentum's first step,
// nesterov, dampening, L2 and decoupled decay), on sizes 0, 1, 7, 1000 and 2^16 + 3, with aligned
// operands (16-byte accesses) and misaligned ones (element accesses); then the ops on "cuda"
// tensors, the optimizers on them, and the errors a device adds (f64, mixed devices).
#include <catch2/catch.hpp>

#include "core/grad_mode.h"
#include "cuda/kernels/optimizer.h"
#include "nn/optim/optimizer.h"
#include "ops/optimizer.h"
#include "ops_cuda_util.h"
#include "test_kernels_util.h"

using namespace stoke;
namespace kt = stoke::kernels_test;

namespace {

const std::vector<int64_t> kSizes = {0, 1, 7, 1000, (1 << 16) + 3};
// f32 on both sides; the host compiler may contract a multiply-add differently in each.
const kt::Tolerance kTol{1e-6, 1e-7};

}  // namespace

TEST_CASE("cuda kernels: sgd_step_kernel matches ops::sgd_step_", "[cuda][kernels][optimizer]") {
  NoGradGuard no_grad;
  struct Case {
    double momentum, dampening, weight_decay;
    bool nesterov;
  };
  const std::vector<Case> cases = {{0, 0, 0, false}, {0.9, 0.2, 0.01, false}, {0.8, 0, 0.05, true}};
  for (int64_t n : kSizes)
    for (bool mis : {false, true})
      for (const Case& c : cases) {
        if (n > 1000 && mis && c.nesterov) continue;  // the emulator is slow: enough big cases
        const std::string what =
            detail::str_cat("sgd n=", n, mis ? " misaligned" : " aligned", " momentum=", c.momentum,
                            c.nesterov ? " nesterov" : "");
        const Tensor p0 = kt::input({n}, DType::f32, mis, -2, 2, 1);
        Tensor pk = kt::output({n}, DType::f32, mis), bk = kt::output({n}, DType::f32, mis);
        pk.copy_(p0);
        Tensor pc = p0.clone(), bc = empty({n});
        for (int step = 0; step < 3; ++step) {
          // Step 1's gradient is misaligned even in the aligned runs: element accesses there.
          const Tensor g = kt::input({n}, DType::f32, step == 1, -1, 1, 10 + step);
          const ops::SgdStepOptions o{.lr = 0.1,
                                      .momentum = c.momentum,
                                      .dampening = c.dampening,
                                      .weight_decay = c.weight_decay,
                                      .nesterov = c.nesterov,
                                      .first_step = step == 0};
          ops::sgd_step_(pc, g, c.momentum != 0 ? bc : Tensor(), o);
          cuda::sgd_step(pk.data<float>(), g.data<float>(),
                         c.momentum != 0 ? bk.data<float>() : nullptr, n,
                         {.lr = o.lr,
                          .momentum = o.momentum,
                          .dampening = o.dampening,
                          .weight_decay = o.weight_decay,
                          .nesterov = o.nesterov,
                          .first_step = o.first_step},
                         nullptr);
          kt::require_close(pk, pc, kTol, what + " param, step " + std::to_string(step));
          if (c.momentum != 0)
            kt::require_close(bk, bc, kTol, what + " buffer, step " + std::to_string(step));
        }
      }
}

TEST_CASE("cuda kernels: adam_step_kernel matches ops::adam_step_", "[cuda][kernels][optimizer]") {
  NoGradGuard no_grad;
  for (int64_t n : kSizes)
    for (bool mis : {false, true})
      for (bool decoupled : {false, true}) {
        const double wd = 0.03;
        const std::string what = detail::str_cat(decoupled ? "adamw" : "adam", " n=", n,
                                                 mis ? " misaligned" : " aligned");
        const Tensor p0 = kt::input({n}, DType::f32, mis, -2, 2, 2);
        Tensor pk = kt::output({n}, DType::f32, mis), mk = kt::output({n}, DType::f32, false),
               vk = kt::output({n}, DType::f32, mis);
        pk.copy_(p0);
        mk.copy_(zeros({n}));
        vk.copy_(zeros({n}));
        Tensor pc = p0.clone(), mc = zeros({n}), vc = zeros({n});
        for (int64_t t = 1; t <= 3; ++t) {
          const Tensor g = kt::input({n}, DType::f32, mis, -1, 1, 20 + static_cast<uint64_t>(t));
          const ops::AdamStepOptions o{.lr = 0.01,
                                       .beta1 = 0.9,
                                       .beta2 = 0.99,
                                       .eps = 1e-6,
                                       .weight_decay = wd,
                                       .decoupled = decoupled,
                                       .step = t};
          ops::adam_step_(pc, g, mc, vc, o);
          const ops::AdamStepScalars s = ops::adam_step_scalars(o);
          cuda::adam_step(pk.data<float>(), g.data<float>(), mk.data<float>(), vk.data<float>(), n,
                          {.lr = o.lr,
                           .beta1 = o.beta1,
                           .beta2 = o.beta2,
                           .eps = o.eps,
                           .weight_decay = o.weight_decay,
                           .decoupled = o.decoupled,
                           .step_size = s.step_size,
                           .bias2_sqrt = s.bias2_sqrt},
                          nullptr);
          const std::string at = what + " step " + std::to_string(t);
          kt::require_close(pk, pc, kTol, at + " param");
          kt::require_close(mk, mc, kTol, at + " exp_avg");
          kt::require_close(vk, vc, kTol, at + " exp_avg_sq");
        }
      }
}

TEST_CASE("cuda kernels: the optimizer launchers check their arguments",
          "[cuda][kernels][optimizer]") {
  Tensor p = zeros({8}), g = zeros({8});
  CHECK_THROWS_WITH(
      cuda::sgd_step(p.data<float>(), g.data<float>(), nullptr, 8, {.momentum = 0.9}, nullptr),
      Catch::Contains("momentum buffer"));
  CHECK_THROWS_WITH(cuda::adam_step(p.data<float>(), g.data<float>(), p.data<float>(),
                                    p.data<float>(), -1, {}, nullptr),
                    Catch::Contains("n >= 0"));
}

TEST_CASE("cuda ops: sgd_step_ and adam_step_ on cuda tensors, and the optimizers on them",
          "[ops_cuda][optimizer]") {
  using test::kCuda;
  NoGradGuard no_grad;
  const Tensor p0 = test::rand_cpu({33, 5}, 1), g = test::rand_cpu({33, 5}, 2);
  {
    Tensor pc = p0.clone(), bc = zeros({33, 5});
    Tensor pd = p0.to(kCuda), bd = zeros({33, 5}, {.device = kCuda});
    const ops::SgdStepOptions o{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01};
    ops::sgd_step_(pc, g, bc,
                   {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .first_step = true});
    ops::sgd_step_(pd, g.to(kCuda), bd,
                   {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .first_step = true});
    ops::sgd_step_(pc, g, bc, o);
    // A strided gradient on the device too.
    ops::sgd_step_(pd, g.t().contiguous().to(kCuda).t(), bd, o);
    CHECK(test::max_diff(pd, pc) <= 1e-6);
    CHECK(test::max_diff(bd, bc) <= 1e-6);
  }
  {
    Tensor pc = p0.clone(), mc = zeros({33, 5}), vc = zeros({33, 5});
    Tensor pd = p0.to(kCuda), md = zeros({33, 5}, {.device = kCuda}),
           vd = zeros({33, 5}, {.device = kCuda});
    const ops::AdamStepOptions o{.weight_decay = 0.01, .decoupled = true, .step = 2};
    ops::adam_step_(pc, g, mc, vc, o);
    ops::adam_step_(pd, g.to(kCuda).t().contiguous().t(), md, vd, o);
    CHECK(test::max_diff(pd, pc) <= 1e-6);
    CHECK(test::max_diff(vd, vc) <= 1e-6);
  }
  // Three steps of each optimizer with device parameters equal the CPU's.
  for (int which = 0; which < 3; ++which) {
    INFO("optimizer " << which);
    Tensor wc = p0.clone().set_requires_grad(true);
    Tensor wd = p0.to(kCuda).set_requires_grad(true);
    auto make = [&](Tensor w) -> std::unique_ptr<nn::optim::Optimizer> {
      if (which == 0)
        return std::make_unique<nn::optim::SGD>(
            std::vector<Tensor>{w},
            nn::optim::SGDOptions{
                .lr = 0.1, .momentum = 0.9, .weight_decay = 1e-3, .nesterov = true});
      if (which == 1)
        return std::make_unique<nn::optim::Adam>(std::vector<Tensor>{w},
                                                 nn::optim::AdamOptions{.weight_decay = 1e-2});
      return std::make_unique<nn::optim::AdamW>(std::vector<Tensor>{w},
                                                nn::optim::AdamWOptions{.lr = 1e-2});
    };
    auto oc = make(wc), od = make(wd);
    for (int step = 0; step < 3; ++step) {
      const Tensor gs = test::rand_cpu({33, 5}, 10 + static_cast<uint64_t>(step));
      wc.set_grad(gs);
      wd.set_grad(gs.to(kCuda));
      oc->step();
      od->step();
    }
    CHECK(test::max_diff(wd, wc) <= 1e-5);
  }
}

TEST_CASE("cuda ops: the optimizer ops refuse f64 on cuda and mixed devices",
          "[ops_cuda][optimizer]") {
  using test::kCuda;
  NoGradGuard no_grad;
  const Tensor p = zeros({4}, {.dtype = DType::f64, .device = kCuda});
  CHECK_THROWS_WITH(
      ops::sgd_step_(p, zeros({4}, {.dtype = DType::f64, .device = kCuda}), Tensor(), {}),
      Catch::Contains("stoke::sgd_step_") &&
          Catch::Contains("expected f32 parameters on cuda, got f64"));
  CHECK_THROWS_WITH(ops::adam_step_(p, p.clone(), p.clone(), p.clone(), {}),
                    Catch::Contains("expected f32 parameters on cuda, got f64"));
  const Tensor pd = zeros({4}, {.device = kCuda});
  CHECK_THROWS_WITH(ops::sgd_step_(pd, zeros({4}), Tensor(), {}),
                    Catch::Contains("stoke::sgd_step_") && Catch::Contains("cpu"));
  CHECK_THROWS_WITH(ops::adam_step_(pd, pd.clone(), zeros({4}), pd.clone(), {}),
                    Catch::Contains("stoke::adam_step_") && Catch::Contains("cpu"));
}
