// The multi-tensor optimizer ops on the CPU (ops::fused_sgd_, fused_adam_,
// non_finite_check_and_unscale_, sum_of_squares). The reference of the update rules is
// tests/support/optimizer_reference.h, written independently of ops/: for f32 and f64 parameters
// torch's rule in long double with a rigorous bound on the kernel's rounding, for f16 and bf16
// torch's rule in f32 rounded on store (the rule ops/optimizer.h states), bit for bit. Lists of
// hundreds of tensors of random sizes (0 and 1 among them, some past one 65,536-element chunk),
// four steps, at 1 and at 2 threads. Then: the unscale multiplies and flags inf/NaN; the sum of
// squares against a long double loop; the argument checks of lists.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "core/grad_mode.h"
#include "core/half.h"
#include "ops/optimizer.h"
#include "stoke/stoke.h"
#include "support/optimizer_reference.h"

using namespace stoke;
using testing::Bounded;
using testing::BoundedArith;

namespace {

constexpr int kSteps = 4;

// Random sizes: many small (0 and 1 included), a few past one chunk of 65,536 elements.
std::vector<int64_t> random_sizes(size_t n, uint64_t seed) {
  Generator g(seed);
  const std::vector<double> u =
      uniform({static_cast<int64_t>(n)}, 0, 1, {}, &g).to_vector<double>();
  std::vector<int64_t> sizes(n);
  for (size_t i = 0; i < n; ++i) {
    if (i % 97 == 3)
      sizes[i] = 65536 + static_cast<int64_t>(u[i] * 5000);
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

// Tensors filled with NaN: state the first step must not read (SGD's buffer).
std::vector<Tensor> nans(const std::vector<int64_t>& sizes, DType dtype) {
  std::vector<Tensor> r;
  for (int64_t n : sizes) r.push_back(full({n}, NAN, {.dtype = dtype}));
  return r;
}

std::vector<Tensor> zeros_list(const std::vector<int64_t>& sizes, DType dtype) {
  std::vector<Tensor> r;
  for (int64_t n : sizes) r.push_back(zeros({n}, {.dtype = dtype}));
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

// The reference's state: one Bounded per element, over the whole list.
using BoundedList = std::vector<std::vector<Bounded>>;

BoundedList bounded_of(const std::vector<Tensor>& ts) {
  BoundedList r;
  for (const Tensor& t : ts) {
    std::vector<Bounded> v;
    for (double x : t.to_vector<double>()) v.push_back(BoundedArith::exact(x));
    r.push_back(std::move(v));
  }
  return r;
}

// Every element within its bound of the reference, reporting the first that is not.
void require_within(const std::vector<Tensor>& got, const BoundedList& want,
                    const std::string& what) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const std::vector<double> g = got[i].to_vector<double>();
    REQUIRE(g.size() == want[i].size());
    for (size_t j = 0; j < g.size(); ++j) {
      const Bounded& w = want[i][j];
      if (std::fabs(g[j] - w.v) <= w.e) continue;
      INFO(what << ": tensor " << i << " element " << j << ": got " << g[j] << ", reference "
                << static_cast<double>(w.v) << " +- " << static_cast<double>(w.e));
      REQUIRE(std::fabs(g[j] - w.v) <= w.e);
    }
  }
}

double unit_roundoff(DType d) {
  return d == DType::f64 ? 0x1p-53 : 0x1p-24;
}

}  // namespace

TEST_CASE("fused optimizer: fused_sgd_ follows torch's SGD rule within its rounding bound",
          "[ops][optimizer][fused]") {
  NoGradGuard no_grad;
  const std::vector<int64_t> sizes = random_sizes(200, 1);
  const int saved = num_threads();
  for (DType dt : {DType::f32, DType::f64}) {
    const std::vector<Tensor> p0 = random_list(sizes, dt, 2);
    const BoundedArith arith(unit_roundoff(dt));
    for (const testing::SgdRule& r :
         {testing::SgdRule{.lr = 0.05},
          testing::SgdRule{.lr = 0.05, .momentum = 0.9, .dampening = 0.1, .weight_decay = 1e-2},
          testing::SgdRule{.lr = 0.05, .momentum = 0.9, .weight_decay = 5e-4, .nesterov = true}}) {
      INFO(dt << " momentum " << r.momentum << " nesterov " << r.nesterov);
      const bool momentum = r.momentum != 0;
      BoundedList w = bounded_of(p0), buf = bounded_of(p0);
      // The same list at 1 and at 2 threads, and each tensor updated alone at 2 threads.
      std::vector<Tensor> p1 = clones(p0), p2 = clones(p0), pl = clones(p0);
      std::vector<Tensor> b1 = nans(sizes, dt), b2 = nans(sizes, dt), bl = nans(sizes, dt);
      for (int step = 0; step < kSteps; ++step) {
        const std::string at = " step " + std::to_string(step);
        const std::vector<Tensor> g = random_list(sizes, dt, 10 + static_cast<uint64_t>(step));
        const ops::SgdStepOptions o{.lr = r.lr,
                                    .momentum = r.momentum,
                                    .dampening = r.dampening,
                                    .weight_decay = r.weight_decay,
                                    .nesterov = r.nesterov,
                                    .first_step = step == 0};
        const std::vector<Tensor> none;
        set_num_threads(1);
        ops::fused_sgd_(p1, g, momentum ? b1 : none, o);
        set_num_threads(2);
        ops::fused_sgd_(p2, g, momentum ? b2 : none, o);
        for (size_t i = 0; i < sizes.size(); ++i) ops::sgd_step_(pl[i], g[i], bl[i], o);
        for (size_t i = 0; i < sizes.size(); ++i) {
          const std::vector<double> gv = g[i].to_vector<double>();
          for (size_t j = 0; j < gv.size(); ++j)
            testing::bounded_sgd_step(arith, r, step == 0, gv[j], w[i][j], buf[i][j]);
        }
        require_within(p1, w, "param" + at);
        if (momentum) require_within(b1, buf, "buffer" + at);
        // Elementwise, whatever the thread count and the list: the same operations on each
        // element, so the same bits.
        require_same_bits(p2, p1, "param at 2 threads" + at);
        require_same_bits(pl, p1, "param updated alone" + at);
        if (momentum) require_same_bits(b2, b1, "buffer at 2 threads" + at);
      }
      CHECK_FALSE(same_bits(p1[3], p0[3]));  // a tensor past one chunk moved
    }
  }
  set_num_threads(saved);
}

TEST_CASE("fused optimizer: fused_adam_ follows torch's Adam and AdamW within the bound",
          "[ops][optimizer][fused]") {
  NoGradGuard no_grad;
  const std::vector<int64_t> sizes = random_sizes(200, 3);
  const int saved = num_threads();
  for (DType dt : {DType::f32, DType::f64}) {
    const std::vector<Tensor> p0 = random_list(sizes, dt, 4);
    const BoundedArith arith(unit_roundoff(dt));
    for (bool decoupled : {false, true})
      for (bool amsgrad : {false, true}) {
        INFO(dt << (decoupled ? " AdamW" : " Adam") << (amsgrad ? " amsgrad" : ""));
        // beta2 = 0.5 with amsgrad: exp_avg_sq falls below its running maximum on many elements.
        const testing::AdamRule r{.lr = 1e-2,
                                  .beta2 = amsgrad ? 0.5 : 0.999,
                                  .weight_decay = 3e-2,
                                  .decoupled = decoupled,
                                  .amsgrad = amsgrad};
        BoundedList w = bounded_of(p0), m = bounded_of(zeros_list(sizes, dt)), v = m, vmax = m;
        std::vector<Tensor> p1 = clones(p0), p2 = clones(p0), pl = clones(p0);
        std::vector<Tensor> m1 = zeros_list(sizes, dt), m2 = clones(m1), ml = clones(m1);
        std::vector<Tensor> v1 = clones(m1), v2 = clones(m1), vl = clones(m1);
        std::vector<Tensor> x1, x2, xl;
        if (amsgrad) {
          x1 = clones(m1);
          x2 = clones(m1);
          xl = clones(m1);
        }
        for (int64_t t = 1; t <= kSteps; ++t) {
          const std::string at = " step " + std::to_string(t);
          const std::vector<Tensor> g = random_list(sizes, dt, 20 + static_cast<uint64_t>(t));
          const ops::AdamStepOptions o{.lr = r.lr,
                                       .beta2 = r.beta2,
                                       .weight_decay = r.weight_decay,
                                       .decoupled = r.decoupled,
                                       .amsgrad = r.amsgrad,
                                       .step = t};
          set_num_threads(1);
          ops::fused_adam_(p1, g, m1, v1, x1, o);
          set_num_threads(2);
          ops::fused_adam_(p2, g, m2, v2, x2, o);
          for (size_t i = 0; i < sizes.size(); ++i) {
            if (amsgrad)
              ops::adam_step_(pl[i], g[i], ml[i], vl[i], xl[i], o);
            else
              ops::adam_step_(pl[i], g[i], ml[i], vl[i], o);
          }
          for (size_t i = 0; i < sizes.size(); ++i) {
            const std::vector<double> gv = g[i].to_vector<double>();
            for (size_t j = 0; j < gv.size(); ++j)
              testing::bounded_adam_step(arith, r, t, gv[j], w[i][j], m[i][j], v[i][j], vmax[i][j]);
          }
          require_within(p1, w, "param" + at);
          require_within(m1, m, "exp_avg" + at);
          require_within(v1, v, "exp_avg_sq" + at);
          if (amsgrad) require_within(x1, vmax, "max_exp_avg_sq" + at);
          // The same elementwise operations at any thread count and list length: the same bits.
          for (const auto& [a, b, what] :
               {std::tuple{&p2, &p1, "param at 2 threads"}, std::tuple{&pl, &p1, "param alone"},
                std::tuple{&m2, &m1, "exp_avg at 2 threads"}, std::tuple{&vl, &v1, "v alone"}})
            require_same_bits(*a, *b, what + at);
          if (amsgrad) require_same_bits(x2, x1, "max_exp_avg_sq at 2 threads" + at);
        }
        CHECK_FALSE(same_bits(p1[3], p0[3]));
      }
  }
  set_num_threads(saved);
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
  // Exact: halves and squares of small integers are representable, so every rounding is exact.
  CHECK(x.item() == (1 - b2) * 4);
  ops::AdamStepOptions o2 = o1;
  o2.step = 2;
  // Step 2 with gradient 1: m = 1, v = b2 * 2 + (1 - b2) * 1 = 1.5 < max 2 -> divides by sqrt(2).
  const double before = p.item();
  ops::adam_step_(p, full({1}, 1.0, {.dtype = DType::f64}), m, v, x, o2);
  CHECK(v.item() == b2 * 2 + (1 - b2));
  CHECK(x.item() == 2);
  const double bias2_sqrt = std::sqrt(1 - b2 * b2);
  // f64: the update's sqrt, two divisions, a product and a difference round 5 times (5u = 5.6e-16
  // relative), the reference's sqrt, two divisions and a product 4 times: 1e-15 relative covers
  // both
  // (|before| < |update| here, so no cancellation).
  CHECK(p.item() == Approx(before - lr * 1 / (std::sqrt(2.0) / bias2_sqrt)).epsilon(1e-15));
  CHECK_THROWS_WITH(ops::fused_adam_({p}, {p.clone()}, {m}, {v}, {}, o1),
                    Catch::Contains("expected 1 max_exp_avg_sqs (amsgrad) (one per param), got 0"));
  CHECK_THROWS_WITH(ops::fused_adam_({p}, {p.clone()}, {m}, {v}, {x}, {}),
                    Catch::Contains("max_exp_avg_sqs given without amsgrad"));
  CHECK_THROWS_WITH(ops::adam_step_(p, p.clone(), m, v, v, o1),
                    Catch::Contains("exp_avg_sq and max_exp_avg_sq are the same memory"));
}

namespace {

// The stored values of a list as S (Half or BFloat16) vectors, and back.
template <class S>
std::vector<std::vector<S>> stored(const std::vector<Tensor>& ts) {
  std::vector<std::vector<S>> r;
  for (const Tensor& t : ts) {
    std::vector<S> v;
    for (float x : t.to_vector<float>()) v.push_back(S(x));  // exact: x is an S value
    r.push_back(std::move(v));
  }
  return r;
}

template <class S>
void require_equal_stored(const std::vector<Tensor>& got, const std::vector<std::vector<S>>& want,
                          const std::string& what) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const std::vector<float> g = got[i].to_vector<float>();
    for (size_t j = 0; j < g.size(); ++j) {
      const float w = float(want[i][j]);
      if (S(g[j]).bits == want[i][j].bits) continue;
      INFO(what << ": tensor " << i << " element " << j << ": got " << g[j] << ", rule " << w);
      REQUIRE(S(g[j]).bits == want[i][j].bits);
    }
  }
}

template <class S>
void check_rounded_rule(DType d) {
  const std::vector<int64_t> sizes = {0, 1, 7, 1000, 65536 + 9};
  const int saved = num_threads();
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    INFO(d << " at " << threads << " threads");
    // SGD with nesterov momentum and weight decay, and AdamW.
    const testing::SgdRule sr{.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-2, .nesterov = true};
    const testing::AdamRule ar{.lr = 1e-2, .weight_decay = 1e-2, .decoupled = true};
    std::vector<Tensor> p = random_list(sizes, d, 5), buf = nans(sizes, d);
    std::vector<Tensor> q = clones(p), qm = zeros_list(sizes, d), qv = zeros_list(sizes, d);
    auto rp = stored<S>(p), rb = stored<S>(buf), rq = rp, rm = stored<S>(qm), rv = rm;
    for (int step = 0; step < kSteps; ++step) {
      const std::string at = " step " + std::to_string(step);
      const std::vector<Tensor> g = random_list(sizes, d, 30 + static_cast<uint64_t>(step));
      const auto rg = stored<S>(g);
      ops::fused_sgd_(p, g, buf,
                      {.lr = sr.lr,
                       .momentum = sr.momentum,
                       .weight_decay = sr.weight_decay,
                       .nesterov = sr.nesterov,
                       .first_step = step == 0});
      ops::fused_adam_(q, g, qm, qv,
                       {.lr = ar.lr,
                        .weight_decay = ar.weight_decay,
                        .decoupled = ar.decoupled,
                        .step = step + 1});
      for (size_t i = 0; i < sizes.size(); ++i)
        for (size_t j = 0; j < rg[i].size(); ++j) {
          testing::rounded_sgd_step(sr, step == 0, rg[i][j], rp[i][j], rb[i][j]);
          testing::rounded_adam_step(ar, step + 1, rg[i][j], rq[i][j], rm[i][j], rv[i][j]);
        }
      require_equal_stored(p, rp, "sgd param" + at);
      require_equal_stored(buf, rb, "sgd buffer" + at);
      require_equal_stored(q, rq, "adamw param" + at);
      require_equal_stored(qm, rm, "adamw exp_avg" + at);
      require_equal_stored(qv, rv, "adamw exp_avg_sq" + at);
    }
  }
  set_num_threads(saved);
}

}  // namespace

TEST_CASE("fused optimizer: f16 and bf16 parameters follow torch's rule in f32, rounded on store",
          "[ops][optimizer][fused]") {
  NoGradGuard no_grad;
  // The rule written in f32 in torch's order (tests/support/optimizer_reference.h): the same
  // operations in the same order as the kernel's, each rounding to nearest once, so bit for bit.
  check_rounded_rule<Half>(DType::f16);
  check_rounded_rule<BFloat16>(DType::bf16);
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
    // A power of two: x * 2^-3 is exact in f32 and f64, and the reference (the product in f64)
    // and the kernel (in f32, f64 for f64) round that same exact value once to the storage type
    // (only f16 subnormals round at all): bit for bit.
    const Tensor inv = full({1}, 0.125);
    ops::non_finite_check_and_unscale_(g, found, inv);
    CHECK(found.item() == 0);
    for (size_t i = 0; i < g.size(); ++i) {
      INFO("tensor " << i);
      std::vector<double> want = g0[i].to_vector<double>();
      for (double& e : want) e *= 0.125;
      REQUIRE(same_bits(g[i], from_vector(want, g0[i].shape(), {.dtype = DType::f64}).to(d)));
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
    long double exact = 0;  // the reference, in long double (u = 2^-64)
    int64_t n = 0, chunks = 0;
    for (const Tensor& t : ts) {
      for (double x : t.to_vector<double>()) exact += static_cast<long double>(x) * x;
      n += t.numel();
      chunks += (t.numel() + 65535) / 65536;
    }
    const Tensor got = ops::sum_of_squares(ts);
    CHECK(got.dtype() == DType::f64);
    CHECK(got.dim() == 0);
    // Positive terms, each square rounded once in f64 (exact for f32 and bf16 values), summed in
    // f64 within 65,536-element chunks, then the chunks' partials in order: at most 65,536 + chunks
    // + 1 roundings on any term's path, so |error| <= (65,538 + chunks) u sum (Higham eq. 3.5, the
    // sum being its own abs-sum): 7e-12 relative; the reference's n * 2^-64 is 3e-14.
    const double bound =
        (double(65538 + chunks) * 0x1p-53 + double(n) * 0x1p-64) * static_cast<double>(exact);
    CHECK(std::abs(got.item() - static_cast<double>(exact)) <= bound);
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
