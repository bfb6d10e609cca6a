// autocast (autograd/autocast.h): every op of the policy table gives the dtype the table says and
// f32 leaves receive f32 gradients; weights are cast once per region; regions nest, restore and are
// per thread; an autocast CNN's loss and gradients match the f32 run within the dtype's precision.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <map>
#include <thread>

#include "autograd/autocast.h"
#include "stoke/stoke.h"
#include "support/autocast_util.h"

using namespace stoke;
using namespace stoke::test;

TEST_CASE("autocast: every op of the policy table runs in the table's precision", "[autocast]") {
  const auto& samples = autocast_samples();
  for (const DType low : {DType::f16, DType::bf16}) {
    for (const AutocastEntry& e : kAutocastPolicy) {
      INFO("op " << e.op << ", autocast " << low);
      auto it = samples.find(std::string(e.op));
      // A new table entry needs a sample here (tests/autograd/autocast_util.h).
      REQUIRE(it != samples.end());
      // The operands the policy acts on: f32 for `lower`, the low dtype for `f32` and
      // `mixed_norm` (f32 on the CPU), one of each for `promote` (the wider, f32, wins).
      const DType main = e.policy == AutocastPolicy::lower ? DType::f32 : low;
      std::vector<Tensor> leaves;
      Tensor out;
      {
        autocast region(Device::Type::cpu, {.dtype = low});
        out = it->second({.main = main, .other = DType::f32, .device = Device::cpu()}, leaves);
      }
      const DType want = e.policy == AutocastPolicy::lower ? low : DType::f32;
      CHECK(out.dtype() == want);
      // Outside a region a product keeps its operands' dtype and a binary op still promotes (the
      // f32 ops' mixed operands, an f16 input with f32 statistics, are a region's business).
      if (e.policy == AutocastPolicy::lower || e.policy == AutocastPolicy::promote) {
        std::vector<Tensor> plain_leaves;
        const Tensor plain =
            it->second({.main = main, .other = DType::f32, .device = Device::cpu()}, plain_leaves);
        CHECK(plain.dtype() == DType::f32);
      }
      // Gradients reach every leaf in the leaf's own dtype (f32 weights get f32).
      sum(out.to(DType::f32)).backward();
      for (const Tensor& leaf : leaves) {
        REQUIRE(leaf.grad().defined());
        CHECK(leaf.grad().dtype() == leaf.dtype());
        CHECK(all_finite(leaf.grad()));
      }
    }
  }
}

TEST_CASE("autocast: ops outside the table follow their inputs", "[autocast]") {
  for (const char* op : {"relu", "max_pool2d", "adaptive_avg_pool2d", "dropout"}) {
    bool listed = false;
    for (const AutocastEntry& e : kAutocastPolicy) listed = listed || e.op == op;
    CHECK_FALSE(listed);
  }
  autocast region(Device::Type::cpu, {.dtype = DType::f16});
  const Tensor x = randn({2, 3, 4, 4}).to(DType::f16);
  CHECK(relu(x).dtype() == DType::f16);
  CHECK(max_pool2d(x, {.kernel_size = {2, 2}}).dtype() == DType::f16);
  CHECK(adaptive_avg_pool2d(x, {1, 1}).dtype() == DType::f16);
  CHECK(relu(randn({3})).dtype() == DType::f32);
}

TEST_CASE("autocast: binary ops promote mixed floating dtypes as torch", "[autocast]") {
  const Tensor h = randn({2, 3}).to(DType::f16).set_requires_grad(true);
  const Tensor b = randn({2, 3}).to(DType::bf16).set_requires_grad(true);
  const Tensor f = randn({3}).set_requires_grad(true);
  const Tensor d = randn({3}, {.dtype = DType::f64});
  CHECK(add(h, f).dtype() == DType::f32);
  CHECK(mul(f, h).dtype() == DType::f32);
  CHECK(sub(h, b).dtype() == DType::f32);  // neither holds the other
  CHECK(div(f, d).dtype() == DType::f64);
  CHECK(add(h, h).dtype() == DType::f16);
  // The values: the narrow operand widened exactly, then the wide op (exact: the same f32 add on
  // the same values).
  const Tensor ref = add(h.detach().to(DType::f32), f.detach());
  CHECK(max_abs_diff(add(h, f), ref) == 0.0);
  sum(add(h, f)).backward();
  CHECK(h.grad().dtype() == DType::f16);
  CHECK(f.grad().dtype() == DType::f32);
  CHECK(max_abs_diff(f.grad(), full({3}, 2.0)) == 0.0);  // exact: 1 + 1, broadcast over 2 rows
  // Integers with floats are still refused (no silent int->float promotion here).
  CHECK_THROWS(add(ones({2}, {.dtype = DType::i64}), ones({2})));
}

TEST_CASE("autocast: a weight is cast once per region, the cache cleared at the outermost exit",
          "[autocast]") {
  const Tensor w = randn({4, 5}).set_requires_grad(true);
  const Tensor x = randn({3, 5});
  const size_t before = autocast_weight_casts();
  Tensor y;
  {
    autocast outer(Device::Type::cpu, {.dtype = DType::bf16});
    y = add(add(linear(x, w), linear(x, w)), linear(relu(x), w));
    {
      autocast inner(Device::Type::cpu, {.dtype = DType::bf16});
      y = add(y, linear(x, w));  // nested: the outer region's cache still holds w
    }
    CHECK(y.dtype() == DType::bf16);
  }
  CHECK(autocast_weight_casts() - before == 1);
  {
    autocast again(Device::Type::cpu, {.dtype = DType::bf16});
    (void)linear(x, w);
    (void)linear(x, w);
  }
  CHECK(autocast_weight_casts() - before == 2);  // a new region casts again
  {
    autocast other(Device::Type::cpu, {.dtype = DType::f16});
    (void)linear(x, w);
    autocast nested(Device::Type::cpu, {.dtype = DType::bf16});
    CHECK(linear(x, w).dtype() == DType::bf16);  // another dtype: another cast, not the f16 one
  }
  CHECK(autocast_weight_casts() - before == 4);
  {
    autocast no_cache(Device::Type::cpu, {.dtype = DType::f16, .cache_enabled = false});
    CHECK(linear(x, w).dtype() == DType::f16);
    const NoGradGuard no_grad;  // and never under no_grad (the cast would carry no graph)
    autocast cached(Device::Type::cpu, {.dtype = DType::f16});
    CHECK(linear(x, w).dtype() == DType::f16);
  }
  CHECK(autocast_weight_casts() - before == 4);
  // The gradient of the four uses arrives in f32 and equals the f32 computation's within bf16:
  // x rounded to bf16 (u = 2^-8 = 3.9e-3 per element; over 3 rows the sum of |x| is ~1.4 times
  // |sum x| in norm) and each use's gradient rounded to bf16 once more (u): ~2.4 u = 9.4e-3 of
  // the norm; 2e-2 is ~5 u.
  sum(y.to(DType::f32)).backward();
  REQUIRE(w.grad().dtype() == DType::f32);
  const Tensor g_ref = add(mul(sum(x, {0}), 3.0), sum(relu(x), {0})).unsqueeze(0).expand({4, 5});
  CHECK(max_rel_err(w.grad(), g_ref) < 2e-2);
}

TEST_CASE("autocast: regions nest, restore, can disable, and are per thread", "[autocast]") {
  const Tensor w = randn({2, 3});
  const Tensor x = randn({1, 3});
  CHECK_FALSE(is_autocast_enabled(Device::Type::cpu));
  {
    autocast a(Device::Type::cpu);  // torch's default for the CPU: bf16
    CHECK(linear(x, w).dtype() == DType::bf16);
    {
      autocast b(Device::Type::cpu, {.dtype = DType::f16});
      CHECK(linear(x, w).dtype() == DType::f16);
      {
        autocast off(Device::Type::cpu, {.enabled = false});
        CHECK(linear(x, w).dtype() == DType::f32);
        CHECK_FALSE(is_autocast_enabled(Device::Type::cpu));
      }
      CHECK(linear(x, w).dtype() == DType::f16);
    }
    CHECK(autocast_dtype(Device::Type::cpu) == DType::bf16);
    CHECK(linear(x, w).dtype() == DType::bf16);
    // A region for cuda leaves CPU tensors alone, and another thread has no region at all.
    CHECK_FALSE(is_autocast_enabled(Device::Type::cuda));
    DType seen = DType::f64;
    std::thread([&] { seen = linear(x, w).dtype(); }).join();
    CHECK(seen == DType::f32);
  }
  {
    autocast cuda_only(Device::Type::cuda);
    CHECK(autocast_dtype(Device::Type::cuda) == DType::f16);
    CHECK(linear(x, w).dtype() == DType::f32);
  }
  CHECK_FALSE(is_autocast_enabled(Device::Type::cpu));
  CHECK(linear(x, w).dtype() == DType::f32);
  CHECK_THROWS_WITH(autocast(Device::Type::cpu, {.dtype = DType::f32}),
                    Catch::Contains("expected dtype f16 or bf16"));
  CHECK_THROWS_WITH(autocast_policy("relu"), Catch::Contains("'relu' is not in the autocast"));
}

TEST_CASE("autocast: a CNN's loss and gradients match the f32 run within the dtype's precision",
          "[autocast]") {
  for (const char* model : {"lenet5", "resnet8"}) {
    double bf16_err = 0;
    for (const DType low : {DType::bf16, DType::f16}) {
      INFO(model << " under autocast " << low);
      const AmpComparison c = compare_with_f32(model, low, Device::cpu());
      const AmpTolerance tol = amp_tolerance(c);  // relative to its calibration run
      INFO("loss " << c.loss_rel_err << " (bound " << tol.loss << "), logits " << c.logits_rel_err
                   << " (calibration " << c.cal_logits_rel_err << "), gradient " << c.grad_rel_err
                   << " (" << c.cal_grad_rel_err << "), classifier's " << c.last_grad_rel_err
                   << " (" << c.cal_last_grad_rel_err << ")");
      CHECK(c.logits_rel_err < tol.logits);
      CHECK(c.loss_rel_err < tol.loss);
      CHECK(c.last_grad_rel_err < tol.last_grad);
      CHECK(c.grad_rel_err < tol.grad);
      CHECK(c.grads_f32);
      // Rounding, not a wrong formula: f16's three more bits of mantissa give the smaller error.
      if (low == DType::bf16) bf16_err = c.grad_rel_err;
      if (low == DType::f16) CHECK(c.grad_rel_err < bf16_err);
    }
  }
}
