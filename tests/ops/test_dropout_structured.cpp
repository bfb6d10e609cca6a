// drop_path (per sample) and dropout2d (per channel), ops:: and autograd: the fraction kept, the
// scale 1 / (1 - p), one factor per sample / channel, identity in evaluation, p = 1, the
// gradient multiplied by the forward's noise, and the argument errors.
#include <catch2/catch.hpp>

#include <cmath>

#include "autograd/dropout.h"
#include "ops/dropout.h"
#include "stoke/stoke.h"
#include "support/fixture_tensor.h"

using namespace stoke;
using stoke::testing::max_abs_diff;

namespace {

// The factor y / x of each unit (a run of `unit` consecutive elements) of y = x * noise, checking
// that it is constant over the unit and either 0 or 1 / (1 - p). Returns the number kept.
int64_t check_units(const Tensor& x, const Tensor& y, int64_t unit, double p) {
  const auto xv = x.to_vector<double>(), yv = y.to_vector<double>();
  REQUIRE(xv.size() == yv.size());
  int64_t kept = 0;
  for (size_t u = 0; u * unit < xv.size(); ++u) {
    // y = x * s in the dtype (s = 1 / (1 - p) rounded once, the product once), read back as
    // y / x in f64: f is within 2 u s (+ u64) of 1 / (1 - p), 6e-7 for f32 at p = 0.8 (s = 5).
    const double f = yv[u * unit] / xv[u * unit];
    REQUIRE((f == 0 || std::abs(f - 1 / (1 - p)) < 1e-6));
    // One factor per unit: every y / x of the unit within 2 u (f32's) of the first one's.
    for (int64_t i = 0; i < unit; ++i)
      REQUIRE(yv[u * unit + i] == Approx(xv[u * unit + i] * f).epsilon(4 * 0x1p-24));
    kept += f != 0;
  }
  return kept;
}

}  // namespace

TEST_CASE("drop_path: whole samples kept with probability 1 - p, scaled by 1 / (1 - p)",
          "[ops][dropout]") {
  Generator gen(7);
  const Tensor x = ops::add(rand({4000, 3, 2, 2}), 0.5);  // nonzero
  for (double p : {0.1, 0.5, 0.8}) {
    INFO("p " << p);
    const Tensor y = ops::drop_path(x, p, true, &gen);
    const int64_t kept = check_units(x, y, 12, p);
    // 4000 Bernoulli draws: the fraction's standard deviation is at most 0.008; 0.04 is 5 of
    // them.
    CHECK(double(kept) / 4000 == Approx(1 - p).margin(0.04));
  }
  // Any rank from 1 (one value per sample).
  const Tensor v = ops::add(rand({1000}), 1.0);
  CHECK(check_units(v, ops::drop_path(v, 0.3, true, &gen), 1, 0.3) > 500);
}

TEST_CASE("dropout2d: whole channels kept with probability 1 - p, scaled by 1 / (1 - p)",
          "[ops][dropout]") {
  Generator gen(8);
  const Tensor x = ops::add(rand({50, 40, 3, 5}), 0.5);
  for (double p : {0.2, 0.5}) {
    INFO("p " << p);
    const int64_t kept = check_units(x, ops::dropout2d(x, p, true, &gen), 15, p);
    // 2000 channels: the fraction's standard deviation is at most 0.0112; 0.06 is 5.4 of them.
    CHECK(double(kept) / 2000 == Approx(1 - p).margin(0.06));
  }
  // Unbatched (C, H, W): one factor per channel.
  const Tensor u = ops::add(rand({300, 2, 2}), 0.5);
  const int64_t kept = check_units(u, ops::dropout2d(u, 0.5, true, &gen), 4, 0.5);
  // 300 channels at p = 0.5: mean 150, standard deviation 8.7; 100 and 200 are 5.8 of them.
  CHECK(kept > 100);
  CHECK(kept < 200);
}

TEST_CASE("drop_path / dropout2d: identity in evaluation and at p = 0, zeros at p = 1, errors",
          "[ops][dropout]") {
  const Tensor x = rand({3, 4, 2, 2});
  for (bool training : {false, true}) {
    const double p = training ? 0.0 : 0.5;
    CHECK(ops::drop_path(x, p, training).data_ptr() == x.data_ptr());
    CHECK(ops::dropout2d(x, p, training).data_ptr() == x.data_ptr());
    CHECK(stoke::drop_path(x, p, training).data_ptr() == x.data_ptr());
    CHECK(stoke::dropout2d(x, p, training).data_ptr() == x.data_ptr());
  }
  CHECK(max_abs_diff(ops::drop_path(x, 1.0, true), zeros(x.shape())) == 0);  // exact: zeros
  CHECK(max_abs_diff(ops::dropout2d(x, 1.0, true), zeros(x.shape())) == 0);
  CHECK_THROWS_WITH(ops::drop_path(x, 1.5, true),
                    Catch::Contains("drop_path") && Catch::Contains("probability p in [0, 1]"));
  CHECK_THROWS_WITH(ops::drop_path(full({}, 1.0), 0.5, true),
                    Catch::Contains("drop_path") && Catch::Contains("0-dim"));
  CHECK_THROWS_WITH(ops::dropout2d(rand({4, 5}), 0.5, false), Catch::Contains("dropout2d") &&
                                                                  Catch::Contains("(N, C, H, W)") &&
                                                                  Catch::Contains("[4, 5]"));
  CHECK_THROWS_WITH(ops::drop_path(zeros({4, 2}, {.dtype = DType::i64}), 0.5, true),
                    Catch::Contains("dropout_noise"));
}

TEST_CASE("drop_path / dropout2d: one generator state gives one noise, f32 and f64 alike",
          "[ops][dropout]") {
  const Tensor x = ops::add(rand({64, 3, 4, 4}), 0.5);
  Generator a(99), b(99);
  const Tensor y32 = ops::dropout2d(x, 0.4, true, &a);
  const Tensor y64 = ops::dropout2d(x.to(DType::f64), 0.4, true, &b);
  // The same noise: y32 = x * s rounded twice in f32 (s and the product), y64 exact to u64:
  // 2 u * |x| s < 2 * 6e-8 * 1.5 / 0.6 = 3e-7.
  CHECK(max_abs_diff(y32, y64) <= 2 * 0x1p-24 * 1.5 / 0.6);
  CHECK(a.state().offset == b.state().offset);
}

TEST_CASE("drop_path / dropout2d: the gradient is multiplied by the forward's noise",
          "[autograd][dropout]") {
  Generator gen(5);
  for (bool path : {true, false}) {
    INFO((path ? "drop_path" : "dropout2d"));
    Tensor x = ops::add(rand({40, 6, 3, 3}, {.dtype = DType::f64}), 0.5).set_requires_grad(true);
    const Tensor y =
        path ? stoke::drop_path(x, 0.5, true, &gen) : stoke::dropout2d(x, 0.5, true, &gen);
    const Tensor gy = rand(x.shape(), {.dtype = DType::f64});
    y.backward(gy);
    // noise = y / x elementwise; the gradient must be gy * noise, element for element.
    // f64: the gradient gy * s (s rounded once, the product once) against gy * (y / x) (y = x s
    // rounded, the quotient, the product): 5 roundings of values < 2 (gy < 1, s = 2): 5 u * 2
    // = 1.1e-15.
    const Tensor noise = ops::div(y.detach(), x.detach());
    CHECK(max_abs_diff(x.grad(), ops::mul(gy, noise)) < 1.2e-15);
    const auto nv = noise.to_vector<double>();
    int64_t zero = 0;
    for (double v : nv) zero += v == 0;
    CHECK(zero > 0);                   // some units dropped ...
    CHECK(zero < int64_t(nv.size()));  // ... and some kept
  }
}

TEST_CASE("nn::DropPath and nn::Dropout2d: training draws, evaluation is the identity",
          "[nn][dropout]") {
  Generator gen(3);
  nn::DropPath dp(0.5, &gen);
  nn::Dropout2d d2(0.5, &gen);
  const Tensor x = ops::add(rand({64, 4, 2, 2}), 0.5);
  CHECK(check_units(x, dp.forward(x), 16, 0.5) < 64);
  CHECK(check_units(x, d2.forward(x), 4, 0.5) < 256);
  dp.eval();
  d2.eval();
  CHECK(dp.forward(x).data_ptr() == x.data_ptr());
  CHECK(d2.forward(x).data_ptr() == x.data_ptr());
  CHECK(dp.named_parameters().empty());
}
