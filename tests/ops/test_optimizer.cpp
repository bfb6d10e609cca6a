// ops::sgd_step_ and ops::adam_step_ on the CPU against the rules written out in long double with a
// rigorous bound on the kernel's rounding (tests/support/optimizer_reference.h: torch.optim's
// single-tensor SGD, Adam and AdamW), over several steps: the momentum buffer's first step,
// nesterov, dampening, L2 and decoupled weight decay, sizes that are no multiple of any vector
// width or of the parallel grain, empty tensors, strided gradients; then the argument checks.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "core/grad_mode.h"
#include "ops/optimizer.h"
#include "stoke/stoke.h"
#include "support/optimizer_reference.h"

using namespace stoke;

namespace {

std::vector<double> values(const Tensor& t) {
  return t.to_vector<double>();
}

Tensor random(int64_t n, DType dtype, uint64_t seed) {
  Generator g(seed);
  return randn({n}, {}, &g).to(dtype);
}

// Every element within its bound of the reference, reporting the first that is not.
void require_within(const Tensor& got, const std::vector<testing::Bounded>& want,
                    const std::string& what) {
  INFO(what);
  const std::vector<double> g = values(got);
  REQUIRE(g.size() == want.size());
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::fabs(g[i] - want[i].v) <= want[i].e) continue;
    INFO("element " << i << ": got " << g[i] << ", reference " << static_cast<double>(want[i].v)
                    << " +- " << static_cast<double>(want[i].e));
    REQUIRE(std::fabs(g[i] - want[i].v) <= want[i].e);
  }
}

std::vector<testing::Bounded> exact(const std::vector<double>& v) {
  std::vector<testing::Bounded> r;
  for (double x : v) r.push_back(testing::BoundedArith::exact(x));
  return r;
}

// The kernel computes in the parameter's dtype (f32 or f64).
testing::BoundedArith arith(DType dtype) {
  return testing::BoundedArith(dtype == DType::f32 ? 0x1p-24 : 0x1p-53);
}

const std::vector<int64_t> kSizes = {0, 1, 7, 1000, 3 * (1 << 14) + 5};

}  // namespace

TEST_CASE("optimizer: sgd_step_ follows torch's SGD rule step by step", "[ops][optimizer]") {
  struct Case {
    double momentum, dampening, weight_decay;
    bool nesterov;
  };
  const std::vector<Case> cases = {{0, 0, 0, false},
                                   {0, 0, 0.1, false},
                                   {0.9, 0, 0, false},
                                   {0.9, 0.3, 0.01, false},
                                   {0.8, 0, 0.05, true}};
  NoGradGuard no_grad;
  for (DType dtype : {DType::f32, DType::f64})
    for (int64_t n : kSizes)
      for (const Case& c : cases) {
        const std::string what =
            detail::str_cat(dtype, " n=", n, " momentum=", c.momentum, " dampening=", c.dampening,
                            " wd=", c.weight_decay, c.nesterov ? " nesterov" : "");
        const double lr = 0.1;
        Tensor p = random(n, dtype, 1);
        // Garbage in the buffer: the first step must not read it.
        Tensor buf = full({n}, NAN, {.dtype = dtype});
        std::vector<testing::Bounded> w = exact(values(p)), b = w;
        const testing::SgdRule rule{.lr = lr,
                                    .momentum = c.momentum,
                                    .dampening = c.dampening,
                                    .weight_decay = c.weight_decay,
                                    .nesterov = c.nesterov};
        for (int step = 0; step < 3; ++step) {
          const Tensor g = random(n, dtype, 10 + static_cast<uint64_t>(step));
          const std::vector<double> gv = values(g);
          for (size_t j = 0; j < w.size(); ++j)
            testing::bounded_sgd_step(arith(dtype), rule, step == 0, gv[j], w[j], b[j]);
          ops::sgd_step_(p, g, c.momentum != 0 ? buf : Tensor(),
                         {.lr = lr,
                          .momentum = c.momentum,
                          .dampening = c.dampening,
                          .weight_decay = c.weight_decay,
                          .nesterov = c.nesterov,
                          .first_step = step == 0});
          require_within(p, w, what + " step " + std::to_string(step));
          if (c.momentum != 0) require_within(buf, b, what + " buffer");
        }
      }
}

TEST_CASE("optimizer: adam_step_ follows torch's Adam and AdamW rules step by step",
          "[ops][optimizer]") {
  NoGradGuard no_grad;
  for (DType dtype : {DType::f32, DType::f64})
    for (int64_t n : kSizes)
      for (bool decoupled : {false, true})
        for (double wd : {0.0, 0.02}) {
          const std::string what =
              detail::str_cat(dtype, " n=", n, decoupled ? " AdamW" : " Adam", " wd=", wd);
          const double lr = 0.01, b1 = 0.9, b2 = 0.99, eps = 1e-6;
          Tensor p = random(n, dtype, 2);
          Tensor m = zeros({n}, {.dtype = dtype}), v = zeros({n}, {.dtype = dtype});
          std::vector<testing::Bounded> w = exact(values(p)), mr = exact(values(m)), vr = mr,
                                        unused = mr;
          const testing::AdamRule rule{.lr = lr,
                                       .beta1 = b1,
                                       .beta2 = b2,
                                       .eps = eps,
                                       .weight_decay = wd,
                                       .decoupled = decoupled};
          for (int64_t t = 1; t <= 3; ++t) {
            const Tensor g = random(n, dtype, 20 + static_cast<uint64_t>(t));
            const std::vector<double> gv = values(g);
            for (size_t j = 0; j < w.size(); ++j)
              testing::bounded_adam_step(arith(dtype), rule, t, gv[j], w[j], mr[j], vr[j],
                                         unused[j]);
            ops::adam_step_(p, g, m, v,
                            {.lr = lr,
                             .beta1 = b1,
                             .beta2 = b2,
                             .eps = eps,
                             .weight_decay = wd,
                             .decoupled = decoupled,
                             .step = t});
            const std::string at = what + " step " + std::to_string(t);
            require_within(p, w, at + " param");
            require_within(m, mr, at + " exp_avg");
            require_within(v, vr, at + " exp_avg_sq");
          }
        }
}

TEST_CASE("optimizer: a strided gradient updates as its contiguous copy", "[ops][optimizer]") {
  NoGradGuard no_grad;
  const Tensor g = random(35, DType::f32, 3).view({5, 7}).transpose(0, 1);
  REQUIRE_FALSE(g.is_contiguous());
  const Tensor p0 = random(35, DType::f32, 4).view({7, 5});
  Tensor pa = p0.clone(), pb = p0.clone();
  Tensor ba = zeros({7, 5}), bb = zeros({7, 5});
  const ops::SgdStepOptions so{.lr = 0.1, .momentum = 0.9, .first_step = true};
  ops::sgd_step_(pa, g, ba, so);
  ops::sgd_step_(pb, g.contiguous(), bb, so);
  // Exact: ops::sgd_step_ copies a strided gradient to a contiguous one before the same kernel.
  CHECK(values(pa) == values(pb));
  CHECK(values(ba) == values(bb));
  Tensor ma = zeros({7, 5}), va = zeros({7, 5}), mb = zeros({7, 5}), vb = zeros({7, 5});
  ops::adam_step_(pa, g, ma, va, {.weight_decay = 0.1});
  ops::adam_step_(pb, g.contiguous(), mb, vb, {.weight_decay = 0.1});
  CHECK(values(pa) == values(pb));
  CHECK(values(va) == values(vb));
}

TEST_CASE("optimizer: sgd_step_ and adam_step_ check their arguments", "[ops][optimizer]") {
  NoGradGuard no_grad;
  const Tensor p = randn({4, 3}), g = randn({4, 3});
  const Tensor m = zeros({4, 3}), v = zeros({4, 3});
  const ops::SgdStepOptions mom{.momentum = 0.9};
  // Integer parameters are refused (f16/bf16 ones are updated: tests/ops/test_fused_optimizer).
  {
    const Tensor pi = p.to(DType::i32), gi = g.to(DType::i32);
    CHECK_THROWS_WITH(ops::sgd_step_(pi, gi, Tensor(), {}),
                      Catch::Contains("stoke::sgd_step_") &&
                          Catch::Contains("param has dtype i32; expected f32, f64, f16 or bf16"));
    CHECK_THROWS_WITH(ops::adam_step_(pi, gi, m.to(DType::i32), v.to(DType::i32), {}),
                      Catch::Contains("stoke::adam_step_") &&
                          Catch::Contains("param has dtype i32; expected f32, f64, f16 or bf16"));
  }
  CHECK_THROWS_WITH(ops::sgd_step_(p, randn({3, 4}), Tensor(), {}),
                    Catch::Contains("grad is f32 [3, 4], expected the param's f32 [4, 3]"));
  CHECK_THROWS_WITH(ops::sgd_step_(p, g.to(DType::f64), Tensor(), {}),
                    Catch::Contains("grad is f64"));
  CHECK_THROWS_WITH(ops::sgd_step_(p, Tensor(), Tensor(), {}),
                    Catch::Contains("expected a defined grad"));
  CHECK_THROWS_WITH(ops::sgd_step_(Tensor(), g, Tensor(), {}),
                    Catch::Contains("expected a defined param"));
  CHECK_THROWS_WITH(ops::sgd_step_(p, g, Tensor(), mom),
                    Catch::Contains("expected a defined momentum_buffer"));
  CHECK_THROWS_WITH(ops::sgd_step_(p, g, zeros({12}), mom),
                    Catch::Contains("momentum_buffer is f32 [12]"));
  CHECK_THROWS_WITH(ops::sgd_step_(p, g, zeros({3, 4}).transpose(0, 1), mom),
                    Catch::Contains("momentum_buffer must be contiguous"));
  CHECK_THROWS_WITH(ops::sgd_step_(p, g, p, mom), Catch::Contains("the param's own memory"));
  CHECK_THROWS_WITH(ops::sgd_step_(p, g, m, {.momentum = 0.9, .dampening = 0.1, .nesterov = true}),
                    Catch::Contains("nesterov momentum requires a momentum and zero dampening"));
  CHECK_THROWS_WITH(ops::sgd_step_(p, g, m, {.momentum = -1}),
                    Catch::Contains("invalid momentum -1"));
  CHECK_THROWS_WITH(ops::sgd_step_(randn({3, 4}).transpose(0, 1), g, Tensor(), {}),
                    Catch::Contains("param must be contiguous"));
  CHECK_THROWS_WITH(ops::adam_step_(p, g, m, m, {}),
                    Catch::Contains("exp_avg and exp_avg_sq are the same memory"));
  CHECK_THROWS_WITH(ops::adam_step_(p, g, m, zeros({4, 3}, {.dtype = DType::f64}), {}),
                    Catch::Contains("exp_avg_sq is f64 [4, 3]"));
  CHECK_THROWS_WITH(ops::adam_step_(p, g, m, v, {.step = 0}),
                    Catch::Contains("expected step >= 1"));
  {
    // Outside NoGradGuard, a parameter that requires grad is not written in place.
    const Tensor leaf = randn({4, 3}).set_requires_grad(true);
    GradMode::set_enabled(true);
    CHECK_THROWS_WITH(ops::sgd_step_(leaf, g, Tensor(), {}), Catch::Contains("in-place operation"));
    GradMode::set_enabled(false);
  }
  // Momentum 0 neither needs nor touches a buffer.
  Tensor q = p.clone();
  ops::sgd_step_(q, g, Tensor(), {.lr = 1});
  // Exact: lr = 1 makes lr * grad exact, leaving the one rounding of the difference, as sub's.
  CHECK(values(q) == values(ops::sub(p, g)));
}
