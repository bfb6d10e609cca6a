// The multi-tensor optimizer ops on the CPU (ops::fused_sgd_, fused_adam_,
// non_finite_check_and_unscale_, sum_of_squares): a list of 1,000 tensors of random sizes
// (0 and 1 among them, and some past one 65,536-element chunk) updated in one call equals each
// tensor updated alone, bit for bit; f16/bf16 parameters equal the f32 rule on their values
// rounded once per store; the unscale multiplies and flags inf/NaN; the sum of squares against a
// loop in f64; the argument checks of lists.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/grad_mode.h"
#include "ops/optimizer.h"
#include "stoke/stoke.h"

using namespace stoke;

namespace {

// Random sizes: many small (0 and 1 included), a few past a chunk.
std::vector<int64_t> random_sizes(size_t n, uint64_t seed) {
  Generator g(seed);
  const std::vector<double> u =
      uniform({static_cast<int64_t>(n)}, 0, 1, {}, &g).to_vector<double>();
  std::vector<int64_t> sizes(n);
  for (size_t i = 0; i < n; ++i) {
    if (i % 97 == 3)
      sizes[i] = 65536 + static_cast<int64_t>(u[i] * 70000);
    else if (i % 10 == 0)
      sizes[i] = 0;
    else if (i % 10 == 1)
      sizes[i] = 1;
    else
      sizes[i] = static_cast<int64_t>(u[i] * 300);
  }
  return sizes;
}

std::vector<Tensor> random_list(const std::vector<int64_t>& sizes, DType dtype, uint64_t seed) {
  Generator g(seed);
  std::vector<Tensor> r;
  for (int64_t n : sizes) r.push_back(randn({n}, {}, &g).to(dtype));
  return r;
}

std::vector<Tensor> clones(const std::vector<Tensor>& ts) {
  std::vector<Tensor> r;
  for (const Tensor& t : ts) r.push_back(t.clone());
  return r;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.numel() == b.numel() &&
         (a.numel() == 0 || std::memcmp(a.data_ptr(), b.data_ptr(),
                                        static_cast<size_t>(a.numel()) * a.element_size()) == 0);
}

void require_same_bits(const std::vector<Tensor>& a, const std::vector<Tensor>& b,
                       const std::string& what) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO(what << ": tensor " << i << " of " << a.size() << " (" << a[i].numel() << " elements)");
    REQUIRE(same_bits(a[i], b[i]));
  }
}

std::vector<Tensor> to_dtype(const std::vector<Tensor>& ts, DType d) {
  std::vector<Tensor> r;
  for (const Tensor& t : ts) r.push_back(t.to(d));
  return r;
}

}  // namespace

TEST_CASE("fused optimizer: fused_sgd_ over 1,000 tensors equals sgd_step_ per tensor",
          "[ops][optimizer][fused]") {
  NoGradGuard no_grad;
  const std::vector<int64_t> sizes = random_sizes(1000, 1);
  const std::vector<Tensor> p0 = random_list(sizes, DType::f32, 2);
  struct Case {
    double momentum, dampening, weight_decay;
    bool nesterov;
  };
  for (const Case& c :
       {Case{0, 0, 0, false}, Case{0.9, 0.1, 1e-2, false}, Case{0.9, 0, 5e-4, true}}) {
    INFO("momentum " << c.momentum << " nesterov " << c.nesterov);
    std::vector<Tensor> pf = clones(p0), pl = clones(p0);
    std::vector<Tensor> bf, bl;
    for (int64_t n : sizes) {
      bf.push_back(empty({n}));
      bl.push_back(empty({n}));
    }
    for (int step = 0; step < 3; ++step) {
      const std::vector<Tensor> g =
          random_list(sizes, DType::f32, 10 + static_cast<uint64_t>(step));
      const ops::SgdStepOptions o{.lr = 0.05,
                                  .momentum = c.momentum,
                                  .dampening = c.dampening,
                                  .weight_decay = c.weight_decay,
                                  .nesterov = c.nesterov,
                                  .first_step = step == 0};
      ops::fused_sgd_(pf, g, c.momentum != 0 ? bf : std::vector<Tensor>(), o);
      for (size_t i = 0; i < sizes.size(); ++i) ops::sgd_step_(pl[i], g[i], bl[i], o);
      require_same_bits(pf, pl, "param, step " + std::to_string(step));
      if (c.momentum != 0) require_same_bits(bf, bl, "buffer, step " + std::to_string(step));
    }
    // The update happened: a tensor past one chunk moved.
    CHECK_FALSE(same_bits(pf[3], p0[3]));
  }
}

TEST_CASE("fused optimizer: fused_adam_ over 1,000 tensors equals adam_step_ per tensor",
          "[ops][optimizer][fused]") {
  NoGradGuard no_grad;
  const std::vector<int64_t> sizes = random_sizes(1000, 3);
  const std::vector<Tensor> p0 = random_list(sizes, DType::f32, 4);
  for (bool decoupled : {false, true})
    for (bool amsgrad : {false, true}) {
      INFO((decoupled ? "AdamW" : "Adam") << (amsgrad ? " amsgrad" : ""));
      std::vector<Tensor> pf = clones(p0), pl = clones(p0), mf, vf, xf, ml, vl, xl;
      for (int64_t n : sizes) {
        for (auto* l : {&mf, &vf, &ml, &vl}) l->push_back(zeros({n}));
        if (amsgrad)
          for (auto* l : {&xf, &xl}) l->push_back(zeros({n}));
      }
      for (int64_t t = 1; t <= 3; ++t) {
        const std::vector<Tensor> g = random_list(sizes, DType::f32, 20 + static_cast<uint64_t>(t));
        const ops::AdamStepOptions o{.lr = 1e-2,
                                     .beta2 = amsgrad ? 0.5 : 0.999,
                                     .weight_decay = 3e-2,
                                     .decoupled = decoupled,
                                     .amsgrad = amsgrad,
                                     .step = t};
        ops::fused_adam_(pf, g, mf, vf, xf, o);
        for (size_t i = 0; i < sizes.size(); ++i) {
          if (amsgrad)
            ops::adam_step_(pl[i], g[i], ml[i], vl[i], xl[i], o);
          else
            ops::adam_step_(pl[i], g[i], ml[i], vl[i], o);
        }
        require_same_bits(pf, pl, "param, step " + std::to_string(t));
        require_same_bits(mf, ml, "exp_avg, step " + std::to_string(t));
        require_same_bits(vf, vl, "exp_avg_sq, step " + std::to_string(t));
        if (amsgrad) require_same_bits(xf, xl, "max_exp_avg_sq, step " + std::to_string(t));
      }
      CHECK_FALSE(same_bits(pf[3], p0[3]));
    }
}

TEST_CASE("fused optimizer: amsgrad divides by the largest exp_avg_sq so far",
          "[ops][optimizer][fused]") {
  NoGradGuard no_grad;
  // f64, beta1 = 0 (m is the gradient) and beta2 = 0.5: a gradient of 2, then of 1, makes v fall
  // from 2 to 1.5 while its maximum stays 2, and step 2 divides by sqrt(2).
  const double b2 = 0.5, lr = 0.1, eps = 0;
  Tensor p = zeros({1}, {.dtype = DType::f64}), m = zeros_like(p), v = zeros_like(p),
         x = zeros_like(p);
  const ops::AdamStepOptions o1{.lr = lr, .beta1 = 0, .beta2 = b2, .eps = eps, .amsgrad = true};
  ops::adam_step_(p, full({1}, 2.0, {.dtype = DType::f64}), m, v, x, o1);
  CHECK(x.item() == (1 - b2) * 4);
  ops::AdamStepOptions o2 = o1;
  o2.step = 2;
  // Step 2 with gradient 1: m = 1, v = b2 * 2 + (1 - b2) * 1 = 1.5 < max 2 -> divides by sqrt(2).
  const double before = p.item();
  ops::adam_step_(p, full({1}, 1.0, {.dtype = DType::f64}), m, v, x, o2);
  CHECK(v.item() == b2 * 2 + (1 - b2));
  CHECK(x.item() == 2);
  const double bias2_sqrt = std::sqrt(1 - b2 * b2);
  CHECK(p.item() == Approx(before - lr * 1 / (std::sqrt(2.0) / bias2_sqrt)).epsilon(1e-15));
  CHECK_THROWS_WITH(ops::fused_adam_({p}, {p.clone()}, {m}, {v}, {}, o1),
                    Catch::Contains("expected 1 max_exp_avg_sqs (amsgrad) (one per param), got 0"));
  CHECK_THROWS_WITH(ops::fused_adam_({p}, {p.clone()}, {m}, {v}, {x}, {}),
                    Catch::Contains("max_exp_avg_sqs given without amsgrad"));
  CHECK_THROWS_WITH(ops::adam_step_(p, p.clone(), m, v, v, o1),
                    Catch::Contains("exp_avg_sq and max_exp_avg_sq are the same memory"));
}

TEST_CASE("fused optimizer: f16 and bf16 parameters follow the f32 rule, rounded on store",
          "[ops][optimizer][fused]") {
  NoGradGuard no_grad;
  const std::vector<int64_t> sizes = {0, 1, 7, 1000, 65536 + 9};
  for (DType d : {DType::f16, DType::bf16}) {
    INFO(d);
    // SGD with nesterov momentum and weight decay, and AdamW, three steps each.
    std::vector<Tensor> p = random_list(sizes, d, 5), buf, m, v;
    for (int64_t n : sizes) {
      buf.push_back(empty({n}, {.dtype = d}));
      m.push_back(zeros({n}, {.dtype = d}));
      v.push_back(zeros({n}, {.dtype = d}));
    }
    std::vector<Tensor> q = clones(p), qm = clones(m), qv = clones(v);
    for (int step = 0; step < 3; ++step) {
      const std::vector<Tensor> g = random_list(sizes, d, 30 + static_cast<uint64_t>(step));
      const ops::SgdStepOptions so{.lr = 0.1,
                                   .momentum = 0.9,
                                   .weight_decay = 1e-2,
                                   .nesterov = true,
                                   .first_step = step == 0};
      // The reference: the f32 rule on the stored (rounded) values, its results rounded once.
      std::vector<Tensor> p32 = to_dtype(p, DType::f32), b32 = to_dtype(buf, DType::f32);
      ops::fused_sgd_(p32, to_dtype(g, DType::f32), b32, so);
      ops::fused_sgd_(p, g, buf, so);
      require_same_bits(p, to_dtype(p32, d), "sgd param, step " + std::to_string(step));
      require_same_bits(buf, to_dtype(b32, d), "sgd buffer, step " + std::to_string(step));

      const ops::AdamStepOptions ao{
          .lr = 1e-2, .weight_decay = 1e-2, .decoupled = true, .step = step + 1};
      std::vector<Tensor> q32 = to_dtype(q, DType::f32), m32 = to_dtype(qm, DType::f32),
                          v32 = to_dtype(qv, DType::f32);
      ops::fused_adam_(q32, to_dtype(g, DType::f32), m32, v32, ao);
      ops::fused_adam_(q, g, qm, qv, ao);
      require_same_bits(q, to_dtype(q32, d), "adamw param, step " + std::to_string(step));
      require_same_bits(qm, to_dtype(m32, d), "adamw exp_avg, step " + std::to_string(step));
      require_same_bits(qv, to_dtype(v32, d), "adamw exp_avg_sq, step " + std::to_string(step));
    }
  }
}

TEST_CASE("fused optimizer: non_finite_check_and_unscale_ unscales and flags inf and NaN",
          "[ops][optimizer][fused][amp]") {
  NoGradGuard no_grad;
  const std::vector<int64_t> sizes = random_sizes(300, 6);
  for (DType d : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    INFO(d);
    const std::vector<Tensor> g0 = random_list(sizes, d, 7);
    std::vector<Tensor> g = clones(g0);
    Tensor found = zeros({1});
    const Tensor inv = full({1}, 0.125);  // a power of two: the unscaled values are exact
    ops::non_finite_check_and_unscale_(g, found, inv);
    CHECK(found.item() == 0);
    for (size_t i = 0; i < g.size(); ++i) {
      INFO("tensor " << i);
      REQUIRE(same_bits(g[i], ops::mul(g0[i].to(DType::f64), 0.125).to(d)));
    }
    // One inf (or NaN) anywhere, here deep in a tensor past one chunk, sets the flag; the other
    // tensors are unscaled all the same, and a set flag stays set.
    for (double bad : {INFINITY, -INFINITY, NAN}) {
      std::vector<Tensor> h = clones(g0);
      Tensor big = h[3].to(DType::f64);
      big.data<double>()[65536 + 2] = bad;
      h[3] = big.to(d);
      Tensor f = zeros({1});
      ops::non_finite_check_and_unscale_(h, f, inv);
      CHECK(f.item() == 1);
      CHECK(same_bits(h[4], g[4]));
      ops::non_finite_check_and_unscale_({h[4]}, f, inv);
      CHECK(f.item() == 1);
    }
  }
  // Empty lists and empty tensors leave the flag alone.
  Tensor f = zeros({1});
  ops::non_finite_check_and_unscale_({}, f, full({1}, 2.0));
  ops::non_finite_check_and_unscale_({zeros({0})}, f, full({1}, 2.0));
  CHECK(f.item() == 0);
}

TEST_CASE("fused optimizer: sum_of_squares over a list", "[ops][optimizer][fused]") {
  const std::vector<int64_t> sizes = random_sizes(500, 8);
  for (DType d : {DType::f32, DType::f64, DType::bf16}) {
    INFO(d);
    const std::vector<Tensor> ts = random_list(sizes, d, 9);
    double want = 0;
    for (const Tensor& t : ts)
      for (double x : t.to_vector<double>()) want += x * x;
    const Tensor got = ops::sum_of_squares(ts);
    CHECK(got.dtype() == DType::f64);
    CHECK(got.dim() == 0);
    CHECK(std::abs(got.item() - want) <= 1e-12 * want);
  }
  CHECK(ops::sum_of_squares({}).item() == 0);
  CHECK(ops::sum_of_squares({zeros({0}), full({3}, 2.0)}).item() == 12);
}

TEST_CASE("fused optimizer: the list ops check their arguments", "[ops][optimizer][fused]") {
  NoGradGuard no_grad;
  const std::vector<Tensor> p = {randn({3}), randn({4})}, g = {randn({3}), randn({4})};
  CHECK_THROWS_WITH(ops::fused_sgd_(p, {g[0]}, {}, {}),
                    Catch::Contains("stoke::fused_sgd_") &&
                        Catch::Contains("expected 2 grads (one per param), got 1"));
  CHECK_THROWS_WITH(ops::fused_sgd_(p, g, {}, {.momentum = 0.9}),
                    Catch::Contains("expected 2 momentum_buffers (one per param), got 0"));
  CHECK_THROWS_WITH(ops::fused_sgd_(p, {g[0], randn({5})}, {}, {}),
                    Catch::Contains("grad 1 is f32 [5], expected the param's f32 [4]"));
  CHECK_THROWS_WITH(
      ops::fused_sgd_({p[0], p[1].to(DType::f64)}, {g[0], g[1].to(DType::f64)}, {}, {}),
      Catch::Contains("param 1 is f64, param 0 is f32: one dtype per call"));
  CHECK_THROWS_WITH(
      ops::fused_adam_(p, g, {zeros({3}), zeros({4})}, {zeros({3})}, {}),
      Catch::Contains("stoke::fused_adam_") && Catch::Contains("expected 2 exp_avg_sqs"));
  const Tensor i32 = zeros({3}, {.dtype = DType::i32});
  CHECK_THROWS_WITH(ops::sgd_step_(i32, i32, Tensor(), {}),
                    Catch::Contains("param has dtype i32; expected f32, f64, f16 or bf16"));
  // Empty lists are a no-op.
  ops::fused_sgd_({}, {}, {}, {});
  ops::fused_adam_({}, {}, {}, {}, {});
  const Tensor f = zeros({1});
  CHECK_THROWS_WITH(
      ops::non_finite_check_and_unscale_({g[0]}, zeros({1}, {.dtype = DType::f64}), full({1}, 1.0)),
      Catch::Contains("expected found_inf to be a one-element f32 tensor, got f64"));
  CHECK_THROWS_WITH(ops::non_finite_check_and_unscale_({g[0]}, f, Tensor()),
                    Catch::Contains("expected inv_scale to be a one-element f32 tensor, got none"));
  CHECK_THROWS_WITH(ops::non_finite_check_and_unscale_({randn({3, 4}).t()}, f, full({1}, 1.0)),
                    Catch::Contains("grad 0 must be contiguous"));
  CHECK_THROWS_WITH(ops::non_finite_check_and_unscale_({i32}, f, full({1}, 1.0)),
                    Catch::Contains("grad 0 has dtype i32"));
  CHECK_THROWS_WITH(ops::sum_of_squares({g[0], i32}),
                    Catch::Contains("tensor 1 is not a defined floating tensor"));
}
