// Elementwise ops on cuda tensors against the CPU: binary ops (tensor-tensor with broadcasting,
// transposed and 0-dim operands; tensor-scalar both ways), integer arithmetic, the unary maps and
// their backward maps, comparisons and where, pow and the ternary backward kernels, and the
// in-place updates optimizers use (contiguous and strided targets).
#include "apps/selftest/ops_checks.h"

namespace stoke::selftest {

using namespace ops_checks;

namespace elementwise_checks {

// Two operands of a binary case, f32 on the CPU; b is kept away from 0 (it divides).
struct BinaryCase {
  std::string label;
  Tensor a, b;
};

std::vector<BinaryCase> binary_cases(bool quick) {
  std::vector<BinaryCase> c;
  c.push_back({"5x7", randn_cpu({5, 7}, 1), uniform_cpu({5, 7}, 0.5, 2, 2)});
  c.push_back({"3x129", randn_cpu({3, 129}, 3), uniform_cpu({3, 129}, -2, -0.5, 4)});
  c.push_back({"3x1x5 (+) 4x5", randn_cpu({3, 1, 5}, 5), uniform_cpu({4, 5}, 0.5, 2, 6)});
  c.push_back({"(7x5)^T (+) 5x7", randn_cpu({7, 5}, 7).t(), uniform_cpu({5, 7}, 0.5, 2, 8)});
  c.push_back({"6x3 (+) scalar", randn_cpu({6, 3}, 9), uniform_cpu({}, 0.5, 2, 10)});
  if (!quick) {
    c.push_back({"1000x1001", randn_cpu({1000, 1001}, 11), uniform_cpu({1000, 1001}, 0.5, 2, 12)});
    c.push_back(
        {"64x1x256 (+) 33x256", randn_cpu({64, 1, 256}, 13), uniform_cpu({33, 256}, 0.5, 2, 14)});
  }
  return c;
}

// Uploads keeping the operand's layout: a transposed CPU view becomes a transposed device view.
Tensor upload_like(const Tensor& x, DType dt) {
  if (x.dim() == 2 && !x.is_contiguous()) return upload(x.t().contiguous(), dt).t();
  return upload(x, dt);
}

}  // namespace elementwise_checks

void check_binary(Suite& s, bool quick) {
  using namespace elementwise_checks;
  using Fn = Tensor (*)(const Tensor&, const Tensor&);
  const std::pair<const char*, Fn> ops_[] = {
      {"add", ops::add}, {"sub", ops::sub},         {"mul", ops::mul},
      {"div", ops::div}, {"maximum", ops::maximum}, {"minimum", ops::minimum},
  };
  for (const BinaryCase& c : binary_cases(quick)) {
    for (DType dt : float_types()) {
      const Tensor ra = rounded(c.a, dt), rb = rounded(c.b, dt);
      const Tensor da = upload_like(c.a, dt), db = upload_like(c.b, dt);
      for (const auto& [name, fn] : ops_)
        compare_on(s, name, c.label, dt, fn(da, db), fn(ra, rb), tolerance(dt));
    }
  }
  // Tensor-scalar, both orders, on a contiguous and a transposed operand.
  const Tensor x = uniform_cpu({3, 129}, 0.5, 3, 15), xt = uniform_cpu({11, 7}, -3, -0.5, 16).t();
  for (DType dt : float_types()) {
    for (const auto& [label, cpu] :
         {std::pair<std::string, Tensor>{"3x129", x}, {"(11x7)^T", xt}}) {
      const Tensor r = rounded(cpu, dt), d = upload_like(cpu, dt);
      const double tol = tolerance(dt);
      compare_on(s, "add(a, 2.5)", label, dt, ops::add(d, 2.5), ops::add(r, 2.5), tol);
      compare_on(s, "sub(a, 1.5)", label, dt, ops::sub(d, 1.5), ops::sub(r, 1.5), tol);
      compare_on(s, "sub(1.5, a)", label, dt, ops::sub(1.5, d), ops::sub(1.5, r), tol);
      compare_on(s, "mul(a, -3)", label, dt, ops::mul(d, -3.0), ops::mul(r, -3.0), tol);
      compare_on(s, "div(a, 4)", label, dt, ops::div(d, 4.0), ops::div(r, 4.0), tol);
      compare_on(s, "div(2, a)", label, dt, ops::div(2.0, d), ops::div(2.0, r), tol);
    }
  }
}

void check_integer(Suite& s, bool quick) {
  using Fn = Tensor (*)(const Tensor&, const Tensor&);
  const std::pair<const char*, Fn> ops_[] = {
      {"add", ops::add},         {"sub", ops::sub},         {"mul", ops::mul},
      {"maximum", ops::maximum}, {"minimum", ops::minimum},
  };
  struct Case {
    std::string label;
    Shape a, b;
  };
  std::vector<Case> cases = {{"3x129", {3, 129}, {3, 129}}, {"3x1x5 (+) 4x5", {3, 1, 5}, {4, 5}}};
  if (!quick) cases.push_back({"1000x1001", {1000, 1001}, {1000, 1001}});
  for (DType dt : {DType::i32, DType::i64, DType::u8}) {
    // u8 stays small so that products wrap rarely (wrapping is checked on i64 below).
    const int64_t lo = dt == DType::u8 ? 0 : -1000, hi = dt == DType::u8 ? 16 : 1000;
    for (const Case& c : cases) {
      const Tensor a = randint_cpu(lo, hi, c.a, dt, 20), b = randint_cpu(lo, hi, c.b, dt, 21);
      const Tensor da = a.to(dev()), db = b.to(dev());
      for (const auto& [name, fn] : ops_) compare_on(s, name, c.label, dt, fn(da, db), fn(a, b), 0);
      // A transposed operand.
      if (c.a == c.b && c.a.size() == 2) {
        const Tensor bt = randint_cpu(lo, hi, {c.a[1], c.a[0]}, dt, 22);
        compare_on(s, "add (b transposed)", c.label, dt, ops::add(da, bt.to(dev()).t()),
                   ops::add(a, bt.t()), 0);
      }
    }
    const Tensor a = randint_cpu(lo, hi, {3, 129}, dt, 23);
    const Tensor da = a.to(dev());
    compare_on(s, "add(a, 7)", "3x129", dt, ops::add(da, 7.0), ops::add(a, 7.0), 0);
    compare_on(s, "sub(a, 3)", "3x129", dt, ops::sub(da, 3.0), ops::sub(a, 3.0), 0);
    compare_on(s, "sub(9, a)", "3x129", dt, ops::sub(9.0, da), ops::sub(9.0, a), 0);
    compare_on(s, "mul(a, 5)", "3x129", dt, ops::mul(da, 5.0), ops::mul(a, 5.0), 0);
    // In place: t += 2 * other (broadcast row), t -= other, t *= other, t += 4, t *= 3; on a
    // contiguous and a transposed target.
    const Tensor row = randint_cpu(lo, hi, {129}, dt, 24);
    for (bool strided : {false, true}) {
      Tensor t = strided ? randint_cpu(lo, hi, {129, 3}, dt, 25).t() : a.clone();
      Tensor td = strided ? t.t().contiguous().to(dev()).t() : t.to(dev());
      const Tensor other = strided ? randint_cpu(lo, hi, {3, 129}, dt, 26) : row;
      const std::string label = strided ? "(129x3)^T" : "3x129";
      ops::add_(t, other, 2);
      ops::add_(td, other.to(dev()), 2);
      compare_on(s, "add_(t, other, alpha 2)", label, dt, td, t, 0);
      ops::sub_(t, other);
      ops::sub_(td, other.to(dev()));
      ops::mul_(t, other);
      ops::mul_(td, other.to(dev()));
      compare_on(s, "sub_ then mul_", label, dt, td, t, 0);
      ops::add_(t, 4.0);
      ops::add_(td, 4.0);
      ops::mul_(t, 3.0);
      ops::mul_(td, 3.0);
      compare_on(s, "add_(t, 4) then mul_(t, 3)", label, dt, td, t, 0);
    }
  }
  // Large i64 values, and products that wrap around (64-bit results, compared exactly), as the
  // CPU computes them.
  const Tensor big = randint_cpu(int64_t{1} << 40, int64_t{1} << 41, {5, 7}, DType::i64, 27);
  const Tensor big2 = randint_cpu(int64_t{1} << 40, int64_t{1} << 41, {5, 7}, DType::i64, 28);
  compare_on(s, "add (i64 > 2^40)", "5x7", DType::i64, ops::add(big.to(dev()), big2.to(dev())),
             ops::add(big, big2), 0);
  compare_on(s, "mul (i64 wrapping)", "5x7", DType::i64, ops::mul(big.to(dev()), big2.to(dev())),
             ops::mul(big, big2), 0);
  const Tensor u = randint_cpu(0, 256, {3, 129}, DType::u8, 29);
  compare_on(s, "mul (u8 wrapping)", "3x129", DType::u8, ops::mul(u.to(dev()), u.to(dev())),
             ops::mul(u, u), 0);
}

void check_unary(Suite& s, bool quick) {
  using Fn = Tensor (*)(const Tensor&);
  struct Op {
    const char* name;
    Fn fn;
    bool positive;  // defined on positive inputs only
  };
  const Op ops_[] = {
      {"neg", ops::neg, false},    {"exp", ops::exp, false},
      {"log", ops::log, true},     {"sqrt", ops::sqrt, true},
      {"rsqrt", ops::rsqrt, true}, {"abs", ops::abs, false},
      {"relu", ops::relu, false},  {"sigmoid", ops::sigmoid, false},
      {"tanh", ops::tanh, false},  {"sign", ops::sign, false},
      {"silu", ops::silu, false},  {"hardswish", ops::hardswish, false},
  };
  struct Case {
    std::string label;
    Shape shape;
    bool transposed;
  };
  std::vector<Case> cases = {{"3x129", {3, 129}, false}, {"(9x5)^T", {9, 5}, true}};
  if (!quick) cases.push_back({"1000x1001", {1000, 1001}, false});
  for (const Case& c : cases) {
    // Named copies, not a structured binding: a lambda below captures them (clang 14 cannot).
    const std::string& label = c.label;
    const Shape& shape = c.shape;
    const bool transposed = c.transposed;
    const Tensor xn = randn_cpu(shape, 30), xp = uniform_cpu(shape, 0.05, 4, 31);
    for (DType dt : float_types()) {
      auto input = [&](const Tensor& cpu) {
        return transposed ? std::pair{rounded(cpu, dt).t(), upload(cpu, dt).t()}
                          : std::pair{rounded(cpu, dt), upload(cpu, dt)};
      };
      const auto [rn, dn_] = input(xn);
      const auto [rp, dp] = input(xp);
      const double tol = tolerance(dt);
      for (const Op& op : ops_)
        compare_on(s, op.name, label, dt, op.fn(op.positive ? dp : dn_),
                   op.fn(op.positive ? rp : rn), tol);
      compare_on(s, "gelu (erf)", label, dt, ops::gelu(dn_), ops::gelu(rn), tol);
      compare_on(s, "gelu (tanh)", label, dt, ops::gelu(dn_, GeluApproximate::tanh),
                 ops::gelu(rn, GeluApproximate::tanh), tol);
      compare_on(s, "leaky_relu(0.2)", label, dt, ops::leaky_relu(dn_, 0.2),
                 ops::leaky_relu(rn, 0.2), tol);
      compare_on(s, "clamp(-0.5, 0.7)", label, dt, ops::clamp(dn_, -0.5, 0.7),
                 ops::clamp(rn, -0.5, 0.7), tol);
      compare_on(s, "clamp(min 0.1)", label, dt, ops::clamp(dn_, 0.1, std::nullopt),
                 ops::clamp(rn, 0.1, std::nullopt), tol);
      compare_on(s, "clamp(max -0.2)", label, dt, ops::clamp(dn_, std::nullopt, -0.2),
                 ops::clamp(rn, std::nullopt, -0.2), tol);
      const Tensor g = randn_cpu(rn.shape(), 32);
      compare_on(s, "relu_backward", label, dt, ops::relu_backward(upload(g, dt), ops::relu(dn_)),
                 ops::relu_backward(rounded(g, dt), ops::relu(rn)), tol);
    }
  }
}

void check_unary_backward(Suite& s, bool quick) {
  struct Case {
    std::string label;
    Shape grad, saved;
  };
  std::vector<Case> cases = {{"3x129", {3, 129}, {3, 129}}, {"4x5 (+) 1x5", {4, 5}, {1, 5}}};
  if (!quick) cases.push_back({"1000x1001", {1000, 1001}, {1000, 1001}});
  for (const Case& c : cases) {
    const Tensor g = randn_cpu(c.grad, 40), xn = randn_cpu(c.saved, 41);
    const Tensor xp = uniform_cpu(c.saved, 0.1, 4, 42);
    for (DType dt : float_types()) {
      const Tensor rg = rounded(g, dt), rn = rounded(xn, dt), rp = rounded(xp, dt);
      const Tensor dg = upload(g, dt), dn_ = upload(xn, dt), dp = upload(xp, dt);
      // Saved outputs are computed on each device from the same rounded input, then rounded.
      const Tensor sig = ops::sigmoid(rn).to(dt).to(DType::f32);
      const Tensor th = ops::tanh(rn).to(dt).to(DType::f32);
      const Tensor sq = ops::sqrt(rp).to(dt).to(DType::f32);
      const Tensor rs = ops::rsqrt(rp).to(dt).to(DType::f32);
      const double tol = 2 * tolerance(dt);
      const std::string l = c.label;
      compare_on(s, "leaky_relu_backward(0.2)", l, dt, ops::leaky_relu_backward(dg, dn_, 0.2),
                 ops::leaky_relu_backward(rg, rn, 0.2), tol);
      compare_on(s, "sigmoid_backward", l, dt, ops::sigmoid_backward(dg, sig.to(dt).to(dev())),
                 ops::sigmoid_backward(rg, sig), tol);
      compare_on(s, "tanh_backward", l, dt, ops::tanh_backward(dg, th.to(dt).to(dev())),
                 ops::tanh_backward(rg, th), tol);
      compare_on(s, "gelu_backward (erf)", l, dt, ops::gelu_backward(dg, dn_),
                 ops::gelu_backward(rg, rn), tol);
      compare_on(s, "gelu_backward (tanh)", l, dt,
                 ops::gelu_backward(dg, dn_, GeluApproximate::tanh),
                 ops::gelu_backward(rg, rn, GeluApproximate::tanh), tol);
      compare_on(s, "clamp_backward(-0.5, 0.7)", l, dt, ops::clamp_backward(dg, dn_, -0.5, 0.7),
                 ops::clamp_backward(rg, rn, -0.5, 0.7), tol);
      compare_on(s, "silu_backward", l, dt, ops::silu_backward(dg, dn_), ops::silu_backward(rg, rn),
                 tol);
      compare_on(s, "hardswish_backward", l, dt, ops::hardswish_backward(dg, dn_),
                 ops::hardswish_backward(rg, rn), tol);
      compare_on(s, "abs_backward", l, dt, ops::abs_backward(dg, dn_), ops::abs_backward(rg, rn),
                 tol);
      compare_on(s, "sqrt_backward", l, dt, ops::sqrt_backward(dg, sq.to(dt).to(dev())),
                 ops::sqrt_backward(rg, sq), tol);
      compare_on(s, "rsqrt_backward", l, dt, ops::rsqrt_backward(dg, rs.to(dt).to(dev())),
                 ops::rsqrt_backward(rg, rs), tol);
    }
  }
}

void check_compare_where(Suite& s, bool quick) {
  using Fn = Tensor (*)(const Tensor&, const Tensor&);
  using FnS = Tensor (*)(const Tensor&, double);
  const std::pair<const char*, Fn> cmp[] = {{"eq", ops::eq}, {"ne", ops::ne}, {"lt", ops::lt},
                                            {"le", ops::le}, {"gt", ops::gt}, {"ge", ops::ge}};
  const std::pair<const char*, FnS> cmp_s[] = {{"eq(a, 3)", ops::eq}, {"ne(a, 3)", ops::ne},
                                               {"lt(a, 3)", ops::lt}, {"le(a, 3)", ops::le},
                                               {"gt(a, 3)", ops::gt}, {"ge(a, 3)", ops::ge}};
  const Shape sa = quick ? Shape{3, 1, 129} : Shape{30, 1, 1001};
  const Shape sb = quick ? Shape{4, 129} : Shape{40, 1001};
  const std::string label = shape_str(sa) + " (+) " + shape_str(sb);
  for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8}) {
    // Small integers (in every dtype) so that equal values occur.
    const Tensor a = randint_cpu(0, 6, sa, DType::i64, 50).to(dt);
    const Tensor b = randint_cpu(0, 6, sb, DType::i64, 51).to(dt);
    const Tensor da = a.to(dev()), db = b.to(dev());
    // The CPU compares floating operands in f32 (f16/bf16 are storage types there).
    const Tensor ca = is_floating(dt) ? a.to(DType::f32) : a;
    const Tensor cb = is_floating(dt) ? b.to(DType::f32) : b;
    for (const auto& [name, fn] : cmp) {
      const Tensor got = fn(da, db);
      s.compare(name, label, dn(dt), got, fn(ca, cb), 0);
    }
    for (const auto& [name, fn] : cmp_s)
      s.compare(name, shape_str(sa), dn(dt), fn(da, 3), fn(ca, 3), 0);
    compare_on(s, "lt (a transposed)",
               detail::str_cat("(", shape_str({sb[1], sb[0]}), ")^T (+) ", shape_str(sb)),
               DType::boolean, ops::lt(db.t().contiguous().t(), db), ops::lt(cb, cb), 0);
  }
  // A scalar that rounds in the operand's dtype: 0.1 in bf16 is 0.10009765625.
  const Tensor x = full({5}, 0.1, {.dtype = DType::bf16});
  const double x_value = scalar_tensor(0.1, {.dtype = DType::bf16}).item();
  compare_on(s, "eq(bf16 0.1, 0.1)", "5", DType::boolean, ops::eq(x.to(dev()), 0.1),
             ops::eq(x.to(DType::f32), x_value), 0);
  compare_on(s, "eq(bf16 0.1, 0.1)", "5", DType::boolean, ops::eq(x.to(dev()), 0.1),
             ones({5}, {.dtype = DType::boolean}), 0);
  // where, with a broadcast condition and operands of every dtype, and its backward.
  const Tensor cond = ops::gt(randn_cpu({4, 1, 7}, 52), 0.0);
  for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8}) {
    const Tensor a = randint_cpu(0, 100, {3, 7}, DType::i64, 53).to(dt);
    const Tensor b = randint_cpu(0, 100, {4, 3, 1}, DType::i64, 54).to(dt);
    compare_on(s, "where", "4x1x7 ? 3x7 : 4x3x1", dt,
               ops::where(cond.to(dev()), a.to(dev()), b.to(dev())), ops::where(cond, a, b), 0);
  }
  for (DType dt : float_types()) {
    const Tensor g = randn_cpu({4, 3, 7}, 55);
    for (bool for_a : {true, false})
      compare_on(s, for_a ? "where_backward (a)" : "where_backward (b)", "4x3x7 / 4x1x7", dt,
                 ops::where_backward(upload(g, dt), cond.to(dev()), for_a),
                 ops::where_backward(rounded(g, dt), cond, for_a), 0);
  }
}

void check_pow_ternary_backward(Suite& s, bool quick) {
  const Shape shape = quick ? Shape{3, 129} : Shape{1000, 1001};
  const std::string l = shape_str(shape);
  const Tensor x = uniform_cpu(shape, 0.2, 3, 60), xn = randn_cpu(shape, 61);
  const Tensor g = randn_cpu(shape, 62);
  for (DType dt : float_types()) {
    const Tensor rx = rounded(x, dt), rn = rounded(xn, dt), rg = rounded(g, dt);
    const Tensor dx = upload(x, dt), dn_ = upload(xn, dt), dg = upload(g, dt);
    const double tol = 2 * tolerance(dt);
    for (double e : {2.0, 3.0, 0.5, -1.5}) {
      const bool positive = e != 2.0 && e != 3.0;
      const std::string name = detail::str_cat("pow(x, ", e, ")");
      compare_on(s, name, l, dt, ops::pow(positive ? dx : dn_, e), ops::pow(positive ? rx : rn, e),
                 tol);
      compare_on(s, detail::str_cat("pow_backward(x, ", e, ")"), l, dt,
                 ops::pow_backward(dg, positive ? dx : dn_, e),
                 ops::pow_backward(rg, positive ? rx : rn, e), tol);
    }
    // Broadcast operands: grad (4, 5), a (4, 1), b (5).
    const Tensor g2 = randn_cpu({4, 5}, 63), a2 = randn_cpu({4, 1}, 64);
    const Tensor b2 = uniform_cpu({5}, 0.5, 2, 65), bn = randn_cpu({5}, 66);
    const Tensor rg2 = rounded(g2, dt), ra2 = rounded(a2, dt), rb2 = rounded(b2, dt);
    const Tensor rbn = rounded(bn, dt);
    const Tensor dg2 = upload(g2, dt), da2 = upload(a2, dt), db2 = upload(b2, dt);
    const Tensor dbn = upload(bn, dt);
    compare_on(s, "div_backward_other", "4x5 / 4x1 / 5", dt, ops::div_backward_other(dg2, da2, db2),
               ops::div_backward_other(rg2, ra2, rb2), tol);
    compare_on(s, "div_backward_other", l, dt, ops::div_backward_other(dg, dn_, dx),
               ops::div_backward_other(rg, rn, rx), tol);
    compare_on(s, "maximum_backward", "4x5 / 4x1 / 5", dt, ops::maximum_backward(dg2, da2, dbn),
               ops::maximum_backward(rg2, ra2, rbn), tol);
    compare_on(s, "minimum_backward", "4x5 / 4x1 / 5", dt, ops::minimum_backward(dg2, da2, dbn),
               ops::minimum_backward(rg2, ra2, rbn), tol);
    // Ties split the gradient: equal operands.
    compare_on(s, "maximum_backward (ties)", l, dt, ops::maximum_backward(dg, dn_, dn_),
               ops::maximum_backward(rg, rn, rn), tol);
  }
}

void check_in_place(Suite& s, bool quick) {
  const Shape shape = quick ? Shape{3, 129} : Shape{1000, 1001};
  const std::string l = shape_str(shape);
  for (DType dt : float_types()) {
    const double tol = 2 * tolerance(dt);
    for (bool strided : {false, true}) {
      // The target: contiguous, or a transposed view of a contiguous device tensor.
      const Tensor base = uniform_cpu(strided ? Shape{shape[1], shape[0]} : shape, 0.2, 3, 70);
      Tensor c = rounded(base, dt);
      Tensor d = upload(base, dt);
      if (strided) {
        c = c.t();
        d = d.t();
      }
      const std::string label = strided ? detail::str_cat("(", shape_str(base.shape()), ")^T") : l;
      const Tensor other = uniform_cpu(shape, 0.5, 2, 71), row = randn_cpu({shape[1]}, 72);
      const Tensor ro = rounded(other, dt), rrow = rounded(row, dt);
      const Tensor dother = upload(other, dt), drow = upload(row, dt);
      // The reference is re-rounded after each step, as the device stores each step in dt.
      auto step = [&](const char* name, auto&& on_cpu, auto&& on_dev) {
        on_cpu(c);
        on_dev(d);
        c.copy_(rounded(c, dt));
        compare_on(s, name, label, dt, d, c, tol);
      };
      step(
          "add_(t, row, alpha -0.5)", [&](Tensor& t) { ops::add_(t, rrow, -0.5); },
          [&](Tensor& t) { ops::add_(t, drow, -0.5); });
      step(
          "mul_(t, other)", [&](Tensor& t) { ops::mul_(t, ro); },
          [&](Tensor& t) { ops::mul_(t, dother); });
      step(
          "div_(t, other)", [&](Tensor& t) { ops::div_(t, ro); },
          [&](Tensor& t) { ops::div_(t, dother); });
      step(
          "sub_(t, other)", [&](Tensor& t) { ops::sub_(t, ro); },
          [&](Tensor& t) { ops::sub_(t, dother); });
      step(
          "add_(t, 1.25)", [&](Tensor& t) { ops::add_(t, 1.25); },
          [&](Tensor& t) { ops::add_(t, 1.25); });
      step(
          "mul_(t, 0.9)", [&](Tensor& t) { ops::mul_(t, 0.9); },
          [&](Tensor& t) { ops::mul_(t, 0.9); });
      step(
          "div_(t, 3)", [&](Tensor& t) { ops::div_(t, 3.0); },
          [&](Tensor& t) { ops::div_(t, 3.0); });
      step(
          "addcmul_(t, a, b, 0.5)", [&](Tensor& t) { ops::addcmul_(t, ro, rrow, 0.5); },
          [&](Tensor& t) { ops::addcmul_(t, dother, drow, 0.5); });
      step(
          "addcdiv_(t, a, b, -0.1)", [&](Tensor& t) { ops::addcdiv_(t, rrow, ro, -0.1); },
          [&](Tensor& t) { ops::addcdiv_(t, drow, dother, -0.1); });
      step(
          "clamp_(t, 0.1, 2)", [&](Tensor& t) { ops::clamp_(t, 0.1, 2.0); },
          [&](Tensor& t) { ops::clamp_(t, 0.1, 2.0); });
      step(
          "sqrt_(t)", [&](Tensor& t) { ops::sqrt_(t); }, [&](Tensor& t) { ops::sqrt_(t); });
      step(
          "clamp_(t, max 1.2)", [&](Tensor& t) { ops::clamp_(t, std::nullopt, 1.2); },
          [&](Tensor& t) { ops::clamp_(t, std::nullopt, 1.2); });
      step(
          "lerp_(t, end, 0.3)", [&](Tensor& t) { ops::lerp_(t, ro, 0.3); },
          [&](Tensor& t) { ops::lerp_(t, dother, 0.3); });
      step(
          "lerp_(t, row, 0.7)", [&](Tensor& t) { ops::lerp_(t, rrow, 0.7); },
          [&](Tensor& t) { ops::lerp_(t, drow, 0.7); });
      step(
          "zero_(t)", [&](Tensor& t) { ops::zero_(t); }, [&](Tensor& t) { ops::zero_(t); });
    }
  }
}

}  // namespace stoke::selftest
