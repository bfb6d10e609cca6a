// ops/elementwise.h on "cuda" tensors (emulated) against the CPU: comparisons (every dtype, bool
// results), where and its backward, pow, the unary backward maps, the min/max/div backward,
// sum_to, the in-place updates optimizers use (sqrt_, clamp_, lerp_, addcmul_, addcdiv_), at
// several shapes (sizes past the 256-thread block, broadcasting, transposed operands), NaN, the
// CPU's error messages for bad input, and autograd through the differentiable ops that use them.
#include <functional>
#include <string>

#include "ops_cuda_util.h"

using namespace stoke;
using stoke::test::kCuda;
using stoke::test::kU;
using stoke::test::max_abs;
using stoke::test::max_diff;
using stoke::test::max_rel_diff;
using stoke::test::rand_cpu;

namespace {

Tensor dev(const Tensor& t) {
  return t.to(kCuda);
}

// Max |a - b| / (1 + |b|) (b the CPU reference), both in f64 on the CPU; NaN must match NaN. At
// most max_rel_diff, and at most max_diff: the bounds below derived for either hold for it.
// bf16 results against the CPU in f32 on the same (rounded) values: the device computes in f32
// and rounds once, within u_bf16 = 2^-8 relative of its f32 value.
double rel_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  const auto x = a.to(Device::cpu()).to(DType::f64).contiguous().to_vector<double>();
  const auto y = b.to(Device::cpu()).to(DType::f64).contiguous().to_vector<double>();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) != std::isnan(y[i])) return INFINITY;
    if (std::isinf(x[i]) || std::isinf(y[i])) {
      if (x[i] != y[i]) return INFINITY;
      continue;
    }
    if (!std::isnan(x[i])) m = std::max(m, std::abs(x[i] - y[i]) / (1 + std::abs(y[i])));
  }
  return m;
}

// The message of what f throws, or "no error".
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no error";
}

// f on the CPU operands and on their cuda copies fails with one message.
void check_same_error(const std::function<void(bool on_cuda)>& f, const char* contains) {
  const std::string cpu = error_of([&] { f(false); });
  const std::string cuda = error_of([&] { f(true); });
  INFO("cpu: " << cpu << "\ncuda: " << cuda);
  CHECK(cpu.find(contains) != std::string::npos);
  CHECK(cuda == cpu);
}

// A value on the cuda side when on_cuda.
Tensor on(bool on_cuda, const Tensor& t) {
  return on_cuda ? dev(t) : t;
}

// Small integers (ties are frequent) with NaN at positions 1 and 6 for floating dtypes.
Tensor ties(const Shape& shape, DType dtype, uint64_t seed) {
  Generator g(seed);
  Tensor v = randint(-2, 3, shape, {.dtype = DType::i64}, &g).to(DType::f32);
  if (is_floating(dtype) && v.numel() > 6) {
    fill_(v.view({v.numel()}).select(0, 1), NAN);
    fill_(v.view({v.numel()}).select(0, 6), NAN);
  }
  return dtype == DType::boolean ? ops::gt(v, 0.5) : v.to(dtype);
}

using Cmp = Tensor (*)(const Tensor&, const Tensor&);
using CmpScalar = Tensor (*)(const Tensor&, double);
const std::pair<Cmp, CmpScalar> kCompares[] = {{ops::eq, ops::eq}, {ops::ne, ops::ne},
                                               {ops::lt, ops::lt}, {ops::le, ops::le},
                                               {ops::gt, ops::gt}, {ops::ge, ops::ge}};

const std::vector<std::pair<Shape, Shape>> kBroadcastShapes = {
    {{300}, {300}}, {{3, 1, 5}, {4, 5}}, {{2, 7, 1}, {1, 1, 3}}, {{}, {33}}, {{0, 3}, {3}}};

}  // namespace

TEST_CASE("cuda elementwise: comparisons of every dtype broadcast like the CPU, bool results",
          "[ops_cuda_elementwise]") {
  for (DType dtype :
       {DType::f32, DType::f16, DType::bf16, DType::i64, DType::i32, DType::u8, DType::boolean}) {
    // The CPU compares f16/bf16 values as f32 (it has no half kernels): exactly the same.
    const bool half = dtype == DType::f16 || dtype == DType::bf16;
    for (const auto& [sa, sb] : kBroadcastShapes) {
      INFO(dtype << " " << sa << " vs " << sb);
      const Tensor a = ties(sa, dtype, 1), b = ties(sb, dtype, 2);
      const Tensor ra = half ? a.to(DType::f32) : a, rb = half ? b.to(DType::f32) : b;
      for (const auto& [cmp, cmp_s] : kCompares) {
        const Tensor got = cmp(dev(a), dev(b));
        CHECK(got.device() == kCuda);
        CHECK(got.dtype() == DType::boolean);
        CHECK(max_diff(got, cmp(ra, rb)) == 0);
        CHECK(max_diff(cmp_s(dev(a), 1.0), cmp_s(ra, 1.0)) == 0);
      }
    }
    // A transposed operand against a contiguous one.
    const Tensor at = ties({9, 40}, dtype, 3).t(), b = ties({40, 9}, dtype, 4);
    const Tensor rat = half ? at.to(DType::f32) : at, rb = half ? b.to(DType::f32) : b;
    for (const auto& [cmp, cmp_s] : kCompares) {
      CHECK(max_diff(cmp(dev(at), dev(b)), cmp(rat, rb)) == 0);
      CHECK(max_diff(cmp_s(dev(at), 0.0), cmp_s(rat, 0.0)) == 0);
    }
  }
}

TEST_CASE("cuda elementwise: comparisons are exact for i64, round scalars like the CPU, and NaN",
          "[ops_cuda_elementwise]") {
  // 2^53 + 1 and 2^53 differ as i64 but not as f64 or f32: the device compares integers exactly.
  const int64_t big = (int64_t{1} << 53) + 1;
  const Tensor a = from_vector<int64_t>({big, -big, 5, 0}, {4}, {.dtype = DType::i64});
  const Tensor b = from_vector<int64_t>({big - 1, -big, 5, -1}, {4}, {.dtype = DType::i64});
  for (const auto& [cmp, cmp_s] : kCompares) CHECK(max_diff(cmp(dev(a), dev(b)), cmp(a, b)) == 0);
  CHECK(ops::ne(dev(a), dev(b)).to(Device::cpu()).to_vector<bool>() ==
        std::vector<bool>{true, false, false, true});
  // Integer tensors against a fractional scalar compare in f64 (lt(i, 0.5) means i < 0.5).
  for (const auto& [cmp, cmp_s] : kCompares) {
    CHECK(max_diff(cmp_s(dev(a), 0.5), cmp_s(a, 0.5)) == 0);
    CHECK(max_diff(cmp_s(dev(a), 5.0), cmp_s(a, 5.0)) == 0);
  }
  // f32 tensors compare with the scalar rounded to f32: 0.1f == 0.1 is true on both devices.
  const Tensor x = full({3}, 0.1);
  CHECK(ops::eq(dev(x), 0.1).to(Device::cpu()).to_vector<bool>() ==
        std::vector<bool>{true, true, true});
  CHECK(max_diff(ops::eq(dev(x), 0.1), ops::eq(x, 0.1)) == 0);
  // NaN compares false except for ne; a NaN scalar too.
  const Tensor n = from_vector<float>({NAN, 1.f, -INFINITY, INFINITY}, {4});
  const Tensor m = from_vector<float>({NAN, NAN, -INFINITY, 2.f}, {4});
  for (const auto& [cmp, cmp_s] : kCompares) {
    CHECK(max_diff(cmp(dev(n), dev(m)), cmp(n, m)) == 0);
    CHECK(max_diff(cmp_s(dev(n), NAN), cmp_s(n, NAN)) == 0);
    CHECK(max_diff(cmp_s(dev(n), INFINITY), cmp_s(n, INFINITY)) == 0);
  }
  // Accuracy as stoke-train counts it: argmax of the logits against i64 labels, summed.
  const Tensor logits = rand_cpu({37, 10}, 5);
  Generator g(6);
  const Tensor labels = randint(0, 10, {37}, {.dtype = DType::i64}, &g);
  const Tensor hits = ops::eq(ops::argmax(dev(logits), 1), dev(labels));
  CHECK(max_diff(hits, ops::eq(ops::argmax(logits, 1), labels)) == 0);
  CHECK(ops::sum(hits).item() == ops::sum(ops::eq(ops::argmax(logits, 1), labels)).item());
}

TEST_CASE("cuda elementwise: comparisons and where fail with the CPU's messages",
          "[ops_cuda_elementwise]") {
  const Tensor f = rand_cpu({3, 4}, 7), f5 = rand_cpu({5}, 8);
  const Tensor i = f.to(DType::i64), c = ops::gt(f, 0.0);
  check_same_error([&](bool d) { ops::lt(on(d, f), on(d, i)); }, "of the same dtype");
  check_same_error([&](bool d) { ops::eq(on(d, f), on(d, f5)); }, "broadcast");
  check_same_error([&](bool d) { ops::where(on(d, f), on(d, f), on(d, f)); },
                   "expected cond of dtype bool");
  check_same_error([&](bool d) { ops::where(on(d, c), on(d, f), on(d, i)); }, "of the same dtype");
  check_same_error([&](bool d) { ops::where(on(d, c), on(d, f), on(d, f5)); }, "broadcast");
  check_same_error([&](bool d) { ops::where_backward(on(d, f), on(d, f), true); },
                   "expected cond of dtype bool");
  check_same_error([&](bool d) { ops::where_backward(on(d, f5), on(d, c), true); }, "broadcast");
  // Mixed devices name both.
  CHECK_THROWS_WITH(ops::ge(dev(f), f), Catch::Contains("ge") && Catch::Contains("same device"));
  CHECK_THROWS_WITH(ops::where(c, dev(f), dev(f)), Catch::Contains("same device"));
}

TEST_CASE("cuda elementwise: where and where_backward broadcast like the CPU, every dtype",
          "[ops_cuda_elementwise]") {
  const Tensor cond = ops::gt(rand_cpu({4, 1, 6}, 9), 0.0);
  const Tensor cond_t = ops::gt(rand_cpu({6, 5, 4}, 10), 0.0).permute({2, 1, 0});  // strided
  for (DType dtype : {DType::f32, DType::f16, DType::i64, DType::u8, DType::boolean}) {
    INFO(dtype);
    const Tensor a = ties({1, 5, 6}, dtype, 11), b = ties({6}, dtype, 12);  // NaN in a and b
    CHECK(max_diff(ops::where(dev(cond), dev(a), dev(b)), ops::where(cond, a, b)) == 0);
    CHECK(max_diff(ops::where(dev(cond_t), dev(a), dev(b)), ops::where(cond_t, a, b)) == 0);
    CHECK(ops::where(dev(cond), dev(a), dev(b)).dtype() == dtype);
  }
  CHECK(ops::where(dev(cond), dev(rand_cpu({0, 6}, 1)), dev(rand_cpu({6}, 2))).shape() ==
        Shape{4, 0, 6});
  for (bool for_a : {true, false}) {
    // NaN in the dropped gradient gives 0, as on the CPU.
    const Tensor g = ties({4, 5, 6}, DType::f32, 13);
    CHECK(max_diff(ops::where_backward(dev(g), dev(cond), for_a),
                   ops::where_backward(g, cond, for_a)) == 0);
    const Tensor g2 = rand_cpu({5, 1}, 14);  // grad broadcast against cond
    CHECK(max_diff(ops::where_backward(dev(g2), dev(cond), for_a),
                   ops::where_backward(g2, cond, for_a)) == 0);
    const Tensor h = g.to(DType::bf16);
    CHECK(max_diff(ops::where_backward(dev(h), dev(cond), for_a),
                   ops::where_backward(h.to(DType::f32), cond, for_a)) == 0);
  }
  CHECK_THROWS_WITH(ops::where_backward(dev(rand_cpu({3}, 1)).to(DType::f64),
                                        dev(ops::gt(rand_cpu({3}, 2), 0.0)), true),
                    Catch::Contains("where_backward") && Catch::Contains("f64"));
}

TEST_CASE("cuda elementwise: pow and pow_backward match the CPU", "[ops_cuda_elementwise]") {
  for (const Shape& shape : {Shape{7}, Shape{300}, Shape{33, 17}}) {
    const Tensor x = rand_cpu(shape, 20), g = rand_cpu(shape, 21);
    const Tensor xp = ops::add(ops::abs(x), 0.05);  // positive bases for fractional exponents
    for (double e : {2.0, 1.0, 0.5, 0.0, 3.0, -1.0, -2.0, 1.5, -0.5, 2.5}) {
      INFO(shape << " exponent " << e);
      const Tensor base = e == std::floor(e) ? x : xp;
      // x x, sqrt or powf on both (powf within 1 ulp in glibc, 4 in CUDA: 10u relative apart);
      // g e x^(e - 1) rounds twice more on each side (14u).
      CHECK(rel_diff(ops::pow(dev(base), e), ops::pow(base, e)) <= 10 * kU);
      CHECK(rel_diff(ops::pow_backward(dev(g), dev(base), e), ops::pow_backward(g, base, e)) <=
            14 * kU);
      // bf16: the f32 value above rounded once more.
      const Tensor bb = base.to(DType::bf16), gb = g.to(DType::bf16);
      CHECK(rel_diff(ops::pow(dev(bb), e), ops::pow(bb.to(DType::f32), e)) <= 0x1p-8 + 10 * kU);
      CHECK(rel_diff(ops::pow_backward(dev(gb), dev(bb), e),
                     ops::pow_backward(gb.to(DType::f32), bb.to(DType::f32), e)) <=
            0x1p-8 + 14 * kU);
    }
  }
  // NaN, zero, negative bases with a fractional exponent (NaN), transposed input.
  const Tensor s = from_vector<float>({NAN, 0.f, -2.f, 4.f, INFINITY}, {5});
  for (double e : {2.0, 0.5, 0.0, -1.0, 1.5, 3.0})
    CHECK(rel_diff(ops::pow(dev(s), e), ops::pow(s, e)) <= 10 * kU);  // as above
  const Tensor t = ops::abs(rand_cpu({40, 9}, 22)).t();
  CHECK(rel_diff(ops::pow(dev(t), 1.5), ops::pow(t, 1.5)) <= 10 * kU);
  check_same_error([&](bool d) { ops::pow_backward(on(d, s), on(d, s.to(DType::i64)), 2.0); },
                   "of the same dtype");
  check_same_error([&](bool d) { ops::pow_backward(on(d, s), on(d, rand_cpu({4}, 1)), 2.0); },
                   "broadcast");
  CHECK_THROWS_WITH(ops::pow(dev(s.to(DType::i64)), 2.0),
                    Catch::Contains("stoke::pow") && Catch::Contains("i64"));
  CHECK_THROWS_WITH(ops::pow(dev(s).to(DType::f64), 2.0),
                    Catch::Contains("stoke::pow") && Catch::Contains("f64"));
}

TEST_CASE("cuda elementwise: unary backward maps match the CPU, with broadcasting and bf16",
          "[ops_cuda_elementwise]") {
  struct Case {
    const char* name;
    bool positive;                   // the forward needs x > 0
    Tensor (*saved)(const Tensor&);  // the saved tensor from x
    std::function<Tensor(const Tensor&, const Tensor&)> backward;
    // |device - CPU| <= grad_coef |g|. 0: the same f32 formula in the same order on both (cuda/
    // kernels/elementwise.cu's BackwardF, ops/cpu/elementwise_unary.cpp; FMA contraction off in
    // the host compiler), or a selection: bit for bit.
    double grad_coef = 0;
  };
  const auto same = [](const Tensor& x) { return x; };
  const std::vector<Case> cases = {
      {"relu", false, [](const Tensor& x) { return ops::relu(x); }, ops::relu_backward},
      {"leaky_relu", false, same,
       [](const Tensor& g, const Tensor& x) { return ops::leaky_relu_backward(g, x, 0.1); }},
      {"sigmoid", false, [](const Tensor& x) { return ops::sigmoid(x); }, ops::sigmoid_backward},
      {"tanh", false, [](const Tensor& x) { return ops::tanh(x); }, ops::tanh_backward},
      // Phi through erfc (the CPU's Numerical Recipes fit, 1.2e-7; CUDA's erfcf 4 ulp, 4.8e-7),
      // v phi(v) <= 0.25 through two exps (~10u), the sum and the product 2u each side.
      {"gelu", false, same,
       [](const Tensor& g, const Tensor& x) { return ops::gelu_backward(g, x); }, 1.3e-6},
      // The same formula but for 3c in dinner (1 ulp apart): 0.5 v (1 - t^2) dinner <= 1.2 within
      // 4u.
      {"gelu_tanh", false, same,
       [](const Tensor& g, const Tensor& x) {
         return ops::gelu_backward(g, x, GeluApproximate::tanh);
       },
       1.2 * 4 * kU},
      {"clamp", false, same,
       [](const Tensor& g, const Tensor& x) { return ops::clamp_backward(g, x, -0.5, 0.7); }},
      {"clamp_min", false, same,
       [](const Tensor& g, const Tensor& x) {
         return ops::clamp_backward(g, x, -0.5, std::nullopt);
       }},
      {"abs", false, same, ops::abs_backward},
      {"sqrt", true, [](const Tensor& x) { return ops::sqrt(x); }, ops::sqrt_backward},
      {"rsqrt", true, [](const Tensor& x) { return ops::rsqrt(x); }, ops::rsqrt_backward},
      // s = 1 / (1 + e^-v) through the CPU's exp (1.5 ulp) or expf (2): s within 11u on each
      // side; g s (1 + v (1 - s)) with |v| <= 4 carries it into ~65u |g|.
      {"silu", false, same, ops::silu_backward, 65 * kU},
      // g (v fl(1/3) + 0.5) on the CPU, g (v / 3 + 0.5) on the device: within u |v| <= 3u for
      // |v| < 3, and the sum and product 2u each side of |result| <= 1.5 |g|: 9u |g|.
      {"hardswish", false, same, ops::hardswish_backward, 9 * kU},
  };
  for (const Case& c : cases)
    for (const Shape& shape : {Shape{7}, Shape{300}, Shape{33, 17}}) {
      INFO(c.name << " " << shape);
      Tensor x = rand_cpu(shape, 30);
      if (c.positive) x = ops::add(ops::abs(x), 0.1);
      const Tensor y = c.saved(x), g = rand_cpu(shape, 31);
      const double tol = c.grad_coef * max_abs(g);
      if (tol == 0)
        CHECK(max_diff(c.backward(dev(g), dev(y)), c.backward(g, y)) == 0);
      else
        CHECK(max_diff(c.backward(dev(g), dev(y)), c.backward(g, y)) <= tol);
      // bf16 grad and saved tensor, against the CPU in f32 on the rounded values.
      const Tensor gb = g.to(DType::bf16), yb = y.to(DType::bf16);
      const Tensor got = c.backward(dev(gb), dev(yb));
      CHECK(got.dtype() == DType::bf16);
      CHECK(rel_diff(got, c.backward(gb.to(DType::f32), yb.to(DType::f32))) <= 0x1p-8 + 2 * tol);
    }
  // Broadcast and transposed operands; NaN passes through; messages name the op.
  const Tensor x = rand_cpu({5, 33}, 32), g = rand_cpu({33}, 33), gt = rand_cpu({33, 5}, 34).t();
  const Tensor xn = from_vector<float>({NAN, 1.f, -1.f}, {3});
  for (const Case& c : cases) {
    if (c.positive || std::string(c.name) == "relu") continue;
    INFO(c.name);
    const double tol = c.grad_coef * std::max(max_abs(g), max_abs(gt));
    CHECK(max_diff(c.backward(dev(g), dev(x)), c.backward(g, x)) <= tol);
    CHECK(max_diff(c.backward(dev(gt), dev(x)), c.backward(gt, x)) <= tol);
    CHECK(max_diff(c.backward(dev(xn), dev(xn)), c.backward(xn, xn)) <= c.grad_coef);  // |g| <= 1
    check_same_error([&](bool d) { c.backward(on(d, g), on(d, x.to(DType::i64))); },
                     "expected grad and saved tensor of the same dtype");
    check_same_error([&](bool d) { c.backward(on(d, rand_cpu({4}, 1)), on(d, x)); }, "broadcast");
    CHECK_THROWS_WITH(c.backward(dev(x).to(DType::f64), dev(x).to(DType::f64)),
                      Catch::Contains("_backward") && Catch::Contains("f64"));
  }
  CHECK_THROWS_WITH(ops::sigmoid_backward(dev(x).to(DType::f64), dev(x).to(DType::f64)),
                    Catch::StartsWith("stoke::sigmoid_backward:"));
}

TEST_CASE("cuda elementwise: div, maximum and minimum backward match the CPU",
          "[ops_cuda_elementwise]") {
  const std::vector<std::array<Shape, 3>> shapes = {
      {Shape{300}, Shape{300}, Shape{300}},
      {Shape{4, 5, 6}, Shape{4, 1, 6}, Shape{6}},
      {Shape{3, 7}, Shape{1, 7}, Shape{3, 1}},
  };
  for (const auto& [sg, sa, sb] : shapes) {
    INFO(sg << " " << sa << " " << sb);
    const Tensor g = rand_cpu(sg, 40), a = rand_cpu(sa, 41);
    const Tensor b = ops::add(ops::abs(rand_cpu(sb, 42)), 0.5);
    // Bit for bit: -g a / (b b), the same f32 formula in the same order on both.
    CHECK(max_diff(ops::div_backward_other(dev(g), dev(a), dev(b)),
                   ops::div_backward_other(g, a, b)) == 0);
    const Tensor ta = ties(sa, DType::f32, 43), tb = ties(sb, DType::f32, 44);  // ties and NaN
    CHECK(max_diff(ops::maximum_backward(dev(g), dev(ta), dev(tb)),
                   ops::maximum_backward(g, ta, tb)) == 0);
    CHECK(max_diff(ops::minimum_backward(dev(g), dev(ta), dev(tb)),
                   ops::minimum_backward(g, ta, tb)) == 0);
    CHECK(max_diff(ops::maximum_backward(dev(g), dev(tb), dev(ta)),
                   ops::maximum_backward(g, tb, ta)) == 0);
    const Tensor gh = g.to(DType::f16), ah = ta.to(DType::f16), bh = tb.to(DType::f16);
    CHECK(max_diff(ops::minimum_backward(dev(gh), dev(ah), dev(bh)),
                   ops::minimum_backward(gh.to(DType::f32), ta, tb).to(DType::f16)) == 0);
  }
  const Tensor g = rand_cpu({3, 4}, 45), i = g.to(DType::i64), g5 = rand_cpu({5}, 46);
  check_same_error([&](bool d) { ops::div_backward_other(on(d, g), on(d, i), on(d, g)); },
                   "stoke::div_backward: expected grad and a of the same dtype");
  check_same_error([&](bool d) { ops::div_backward_other(on(d, g), on(d, g), on(d, g5)); },
                   "broadcast");
  check_same_error([&](bool d) { ops::maximum_backward(on(d, g), on(d, g), on(d, i)); },
                   "stoke::maximum_backward: expected grad and b of the same dtype");
  check_same_error([&](bool d) { ops::minimum_backward(on(d, g5), on(d, g), on(d, g)); },
                   "broadcast");
}

TEST_CASE("cuda elementwise: sum_to reduces broadcast gradients like the CPU",
          "[ops_cuda_elementwise]") {
  const Tensor g = rand_cpu({3, 4, 5}, 50);
  for (const Shape& s :
       {Shape{4, 1}, Shape{5}, Shape{1, 1, 1}, Shape{3, 1, 5}, Shape{}, Shape{1}, Shape{4, 5}}) {
    INFO(s);
    const Tensor got = ops::sum_to(dev(g), s);
    CHECK(got.device() == kCuda);
    // Sums of 60 / numel(s) gradients in other orders (sum_tol, tests/cuda/test_ops_cuda.cpp):
    // twice sqrt(K) u sum |g|, over 4 standard deviations of random rounding errors.
    const Tensor abs_sums = ops::sum_to(ops::abs(g), s);
    const int64_t k = g.numel() / std::max<int64_t>(abs_sums.numel(), 1);
    const double tol = 2 * std::sqrt(static_cast<double>(k)) * kU * max_abs(abs_sums);
    CHECK(max_diff(got, ops::sum_to(g, s)) < tol);
    const Tensor gb = g.to(DType::bf16);
    CHECK(ops::sum_to(dev(gb), s).dtype() == DType::bf16);
    // bf16: summed in f32, rounded once.
    CHECK(rel_diff(ops::sum_to(dev(gb), s), ops::sum_to(gb.to(DType::f32), s)) <= 0x1p-8 + 2 * tol);
  }
  const Tensor gt = rand_cpu({300, 7}, 51).t();  // transposed, more rows than a block
  const auto sum_tol = [&](const Shape& s) {
    const Tensor abs_sums = ops::sum_to(ops::abs(gt), s);
    const int64_t k = gt.numel() / abs_sums.numel();
    return 2 * std::sqrt(static_cast<double>(k)) * kU * max_abs(abs_sums);
  };
  CHECK(max_diff(ops::sum_to(dev(gt), {7, 1}), ops::sum_to(gt, {7, 1})) < sum_tol({7, 1}));
  CHECK(max_diff(ops::sum_to(dev(gt), {300}), ops::sum_to(gt, {300})) < sum_tol({300}));
  const Tensor d = dev(g);
  CHECK(ops::sum_to(d, g.shape()).data_ptr() == d.data_ptr());  // equal shapes: grad itself
  check_same_error([&](bool dv) { ops::sum_to(on(dv, g), {2, 5}); }, "cannot sum a tensor");
}

TEST_CASE("cuda elementwise: sqrt_, clamp_, lerp_, addcmul_ and addcdiv_ match the CPU in place",
          "[ops_cuda_elementwise]") {
  for (const Shape& shape : {Shape{7}, Shape{300}, Shape{33, 17}}) {
    INFO(shape);
    const Tensor x = rand_cpu(shape, 60);
    Tensor c = ops::abs(x), d = dev(c);
    const void* p = d.data_ptr();
    ops::sqrt_(c);
    ops::sqrt_(d);
    CHECK(d.data_ptr() == p);
    // Bit for bit below: sqrt is correctly rounded (IEEE); lerp_ is x + w (e - x) on both, in that
    // order (FMA contraction off in the host compiler); addcmul_ and addcdiv_ scale by -0.25 and
    // 0.5 (exact) before (CPU) or after (device) the product or quotient.
    CHECK(max_diff(d, c) == 0);
    for (auto [lo, hi] : std::vector<std::pair<std::optional<double>, std::optional<double>>>{
             {0.2, 0.9}, {0.5, std::nullopt}, {std::nullopt, 0.7}}) {
      ops::clamp_(c, lo, hi);
      ops::clamp_(d, lo, hi);
      CHECK(max_diff(d, c) == 0);
    }
    const Tensor end = rand_cpu(shape, 61);
    ops::lerp_(c, end, 0.3);
    ops::lerp_(d, dev(end), 0.3);
    CHECK(max_diff(d, c) == 0);
    const Tensor a = rand_cpu(shape, 62), b = ops::add(ops::abs(rand_cpu(shape, 63)), 0.5);
    ops::addcmul_(c, a, b, -0.25);
    ops::addcmul_(d, dev(a), dev(b), -0.25);
    CHECK(max_diff(d, c) == 0);
    ops::addcdiv_(c, a, b, 0.5);
    ops::addcdiv_(d, dev(a), dev(b), 0.5);
    CHECK(max_diff(d, c) == 0);
    CHECK(d.data_ptr() == p);
  }
  // Transposed targets, broadcast operands, NaN through clamp_ (as torch.clamp), bf16.
  Tensor c = rand_cpu({40, 9}, 64).t(), d = dev(rand_cpu({40, 9}, 64)).t();
  const Tensor row = rand_cpu({40}, 65), col = ops::add(ops::abs(rand_cpu({9, 1}, 66)), 0.5);
  ops::lerp_(c, row, 0.7);
  ops::lerp_(d, dev(row), 0.7);
  CHECK(max_diff(d, c) == 0);  // as above
  ops::addcdiv_(c, row, col, 0.5);
  ops::addcdiv_(d, dev(row), dev(col), 0.5);
  CHECK(max_diff(d, c) == 0);
  ops::sqrt_(c);
  ops::sqrt_(d);
  CHECK(max_diff(d, c) == 0);  // NaN for negative values on both (max_diff matches NaN to NaN)
  ops::clamp_(c, -0.5, 0.5);
  ops::clamp_(d, -0.5, 0.5);
  CHECK(max_diff(d, c) == 0);
  Tensor hb = dev(ops::abs(rand_cpu({300}, 67))).to(DType::bf16);
  const Tensor hc = hb.to(Device::cpu()).to(DType::f32);
  ops::sqrt_(hb);
  CHECK(hb.dtype() == DType::bf16);
  CHECK(rel_diff(hb, ops::sqrt(hc)) <= 0x1p-8);  // the f32 sqrt rounded once to bf16
  const Tensor end = rand_cpu({300}, 68);
  ops::lerp_(hb, dev(end).to(DType::bf16), 0.5);
  const Tensor end_b = end.to(DType::bf16).to(DType::f32);
  // hb is the sqrt s <= 2 rounded to bf16 (2^-8 |s|), halved in the lerp, and the lerp's f32
  // result rounded to bf16 again (2^-8 |result|): under 2^-8 (0.5 * 2 + |result|), so at most
  // 2^-8 in rel_diff's units, plus the f32 arithmetic's few u.
  CHECK(rel_diff(hb, ops::mul(ops::add(ops::sqrt(hc), end_b), 0.5)) <= 0x1p-8 + 8 * kU);
}

TEST_CASE("cuda elementwise: in-place ops refuse bad targets with the CPU's messages",
          "[ops_cuda_elementwise]") {
  const Tensor x = rand_cpu({3, 4}, 70), big = rand_cpu({2, 3, 4}, 71), i = x.to(DType::i64);
  // A leaf that requires grad, under grad mode.
  const auto leaf = [&](bool d) {
    Tensor t = on(d, x.clone());
    t.set_requires_grad(true);
    return t;
  };
  const auto expanded = [&](bool d) { return on(d, rand_cpu({1, 4}, 72)).expand({3, 4}); };
  const char* grad_msg = "a tensor that requires grad is being used in an in-place operation";
  const char* expand_msg = "cannot write in place to an expanded tensor";
  check_same_error([&](bool d) { ops::sqrt_(leaf(d)); }, grad_msg);
  check_same_error([&](bool d) { ops::clamp_(leaf(d), 0.0, 1.0); }, grad_msg);
  check_same_error([&](bool d) { ops::lerp_(leaf(d), on(d, x), 0.5); }, grad_msg);
  check_same_error([&](bool d) { ops::add_(leaf(d), on(d, x)); }, grad_msg);
  check_same_error([&](bool d) { ops::mul_(leaf(d), 2.0); }, grad_msg);
  check_same_error([&](bool d) { ops::addcmul_(leaf(d), on(d, x), on(d, x)); }, grad_msg);
  check_same_error([&](bool d) { ops::zero_(leaf(d)); }, grad_msg);
  check_same_error([&](bool d) { ops::sqrt_(expanded(d)); }, expand_msg);
  check_same_error([&](bool d) { ops::clamp_(expanded(d), 0.0, 1.0); }, expand_msg);
  check_same_error([&](bool d) { ops::lerp_(expanded(d), on(d, x), 0.5); }, expand_msg);
  check_same_error([&](bool d) { ops::sub_(expanded(d), 1.0); }, expand_msg);
  check_same_error([&](bool d) { ops::addcdiv_(expanded(d), on(d, x), on(d, x)); }, expand_msg);
  check_same_error([&](bool d) { ops::lerp_(on(d, x), on(d, big), 0.5); },
                   "cannot be broadcast to the in-place target's shape");
  check_same_error([&](bool d) { ops::addcmul_(on(d, x), on(d, x), on(d, big)); },
                   "cannot be broadcast to the in-place target's shape");
  check_same_error([&](bool d) { ops::div_(on(d, x), on(d, big)); },
                   "cannot be broadcast to the in-place target's shape");
  check_same_error([&](bool d) { ops::lerp_(on(d, x), on(d, i), 0.5); },
                   "expected self and other of the same dtype");
  check_same_error([&](bool d) { ops::addcdiv_(on(d, x), on(d, x), on(d, i)); },
                   "expected self and other of the same dtype");
  check_same_error([&](bool d) { ops::clamp_(on(d, x), std::nullopt, std::nullopt); },
                   "expected at least one of min and max, got neither");
  check_same_error([&](bool d) { ops::clamp(on(d, x), std::nullopt, std::nullopt); },
                   "expected at least one of min and max, got neither");
  // Under NoGradGuard the leaf is updated (optimizer steps), on both devices alike.
  NoGradGuard guard;
  Tensor lc = leaf(false), ld = leaf(true);
  ops::lerp_(lc, big.select(0, 1), 0.25);
  ops::lerp_(ld, dev(big.select(0, 1)), 0.25);
  CHECK(max_diff(ld, lc) == 0);  // x + w (e - x) on both
  // Integer tensors: the device's float kernels refuse them, naming the op.
  CHECK_THROWS_WITH(ops::sqrt_(dev(i)), Catch::Contains("sqrt_") && Catch::Contains("i64"));
  CHECK_THROWS_WITH(ops::lerp_(dev(i), dev(i), 0.5),
                    Catch::Contains("lerp_") && Catch::Contains("i64"));
}

TEST_CASE("cuda elementwise: autograd through sigmoid, tanh, gelu, pow, where, maximum and more",
          "[ops_cuda_elementwise]") {
  using Fn = std::function<Tensor(const Tensor&, const Tensor&)>;
  // Each f(x, y) uses x (3, 1, 5) and y (4, 5); the loss is sum(f * w) with a fixed w.
  const std::vector<std::pair<const char*, Fn>> fns = {
      {"sigmoid", [](const Tensor& x, const Tensor& y) { return stoke::sigmoid(add(x, y)); }},
      {"tanh", [](const Tensor& x, const Tensor& y) { return stoke::tanh(mul(x, y)); }},
      {"gelu", [](const Tensor& x, const Tensor& y) { return stoke::gelu(sub(x, y)); }},
      {"silu", [](const Tensor& x, const Tensor& y) { return stoke::silu(mul(x, y)); }},
      {"hardswish",
       [](const Tensor& x, const Tensor& y) { return stoke::hardswish(mul(add(x, y), 3.0)); }},
      {"gelu_tanh", [](const Tensor& x,
                       const Tensor& y) { return stoke::gelu(add(x, y), GeluApproximate::tanh); }},
      {"leaky_relu",
       [](const Tensor& x, const Tensor& y) { return stoke::leaky_relu(add(x, y), 0.1); }},
      {"pow",
       [](const Tensor& x, const Tensor& y) {
         return add(stoke::pow(x, 3.0), stoke::pow(add(stoke::abs(y), 0.5), 1.5));
       }},
      {"sqrt_rsqrt",
       [](const Tensor& x, const Tensor& y) {
         return mul(stoke::sqrt(add(stoke::abs(x), 0.5)), stoke::rsqrt(add(stoke::abs(y), 0.5)));
       }},
      {"clamp",
       [](const Tensor& x, const Tensor& y) { return stoke::clamp(mul(x, y), -0.3, 0.4); }},
      {"where",
       [](const Tensor& x, const Tensor& y) { return stoke::where(ops::gt(x, y), mul(x, y), y); }},
      {"maximum", [](const Tensor& x, const Tensor& y) { return stoke::maximum(x, y); }},
      {"minimum",
       [](const Tensor& x, const Tensor& y) {
         return stoke::minimum(stoke::relu(x), stoke::relu(y));  // ties at 0
       }},
      {"div", [](const Tensor& x, const Tensor& y) { return div(x, add(stoke::abs(y), 0.5)); }},
  };
  const Tensor x0 = rand_cpu({3, 1, 5}, 80), y0 = rand_cpu({4, 5}, 81);
  const Tensor w = rand_cpu({3, 4, 5}, 82);
  for (const auto& [name, fn] : fns) {
    INFO(name);
    const auto& f = fn;  // clang 14 cannot capture a structured binding
    auto grads = [&](Device device) {
      Tensor x = x0.to(device).detach(), y = y0.to(device).detach();
      x.set_requires_grad(true);
      y.set_requires_grad(true);
      const Tensor loss = stoke::sum(mul(f(x, y), w.to(device)));
      loss.backward();
      return std::pair{x.grad(), y.grad()};
    };
    const auto [gx, gy] = grads(Device::cpu());
    const auto [dx, dy] = grads(kCuda);
    REQUIRE(dx.defined());
    REQUIRE(dy.defined());
    CHECK(dx.device() == kCuda);
    // The maps' own bounds above (the largest, gelu's 1.3e-6 |upstream gradient|, silu's 65u)
    // through the chain rule's factors (|w|, |x|, |y| <= 4) and sums over 3 or 4 broadcast
    // copies: within 1e-5 (1 + |gradient|).
    CHECK(rel_diff(dx, gx) < 1e-5);
    CHECK(rel_diff(dy, gy) < 1e-5);
  }
}
