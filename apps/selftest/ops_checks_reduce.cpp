// Reductions (float sums and means over any dims, exact integer and bool sums, max/min with their
// indices, the backward of mean, var and max/min), softmax and log_softmax with their backward, the
// fused cross entropy through autograd (every reduction, label smoothing, ignored rows), nll and
// mse with their backward, and matmul/linear with their gradients.
#include "apps/selftest/ops_checks.h"

namespace stoke::selftest {

using namespace ops_checks;

void check_reductions(Suite& s, bool quick) {
  // The reduction kernels run a block per output row or column: in the emulator each block costs
  // milliseconds, so the quick shapes keep the number of outputs of every reduction small.
  struct Case {
    Shape shape;
    std::vector<std::pair<std::vector<int64_t>, bool>> sums;  // dims, keepdim
    std::vector<int64_t> extremum_dims;
  };
  std::vector<Case> cases = {
      {{3, 7, 129}, {{{}, false}, {{1}, false}, {{0, 2}, true}}, {0, 1, 2}},
      {{2, 1100}, {{{}, false}, {{1}, true}}, {1}},
  };
  if (!quick) {
    cases.push_back({{30, 70, 1001}, {{{}, false}, {{1}, false}, {{0, 2}, true}}, {0, 1, 2}});
    cases.push_back({{4, 100000}, {{{}, false}, {{1}, false}, {{0}, true}}, {0, 1}});
  }
  auto sum_name = [](const std::vector<int64_t>& dims, bool keepdim) {
    std::string n = dims.empty() ? "sum (all)" : dims.size() == 1 ? "sum dim " : "sum dims ";
    for (size_t i = 0; i < dims.size(); ++i) {
      if (i > 0) n += ",";
      n += std::to_string(dims[i]);
    }
    return n + (keepdim ? " keepdim" : "");
  };
  for (const Case& c : cases) {
    const std::string l = shape_str(c.shape);
    const Tensor x = randn_cpu(c.shape, 100);
    const int64_t last = static_cast<int64_t>(c.shape.size()) - 1;
    for (DType dt : float_types()) {
      const Tensor r = rounded(x, dt), d = upload(x, dt);
      const double tol = tolerance(dt);
      for (const auto& [dims_, keepdim] : c.sums) {
        compare_on(s, sum_name(dims_, keepdim), l, dt, ops::sum(d, dims_, keepdim),
                   ops::sum(r, dims_, keepdim), tol);
        compare_on(s, detail::str_cat("mean", sum_name(dims_, keepdim).substr(3)), l, dt,
                   ops::mean(d, dims_, keepdim), ops::mean(r, dims_, keepdim), tol);
      }
      compare_on(s, "sum dim 0 of transpose(0, last)", l, dt, ops::sum(d.transpose(0, last), {0}),
                 ops::sum(r.transpose(0, last), {0}), tol);
      compare_on(s, "var dim -1", l, dt, ops::var(d, {-1}), ops::var(r, {-1}), 2 * tol);
      // Values of variance 100: past ~650 elements the f16 sum of squares passes 65504 while
      // the variance is far from it, so an f16 accumulation shows as inf at the quick shapes too.
      const Tensor x10 = ops::mul(x, 10.0), d10 = upload(x10, dt), r10 = rounded(x10, dt);
      compare_on(s, "var dim -1 (variance 100)", l, dt, ops::var(d10, {-1}), ops::var(r10, {-1}),
                 2 * tol);
      for (int64_t dim : c.extremum_dims) {
        const auto got = ops::max_with_indices(d, dim, dim == 1);
        const auto ref = ops::max_with_indices(r, dim, dim == 1);
        const std::string name = detail::str_cat("max dim ", dim, dim == 1 ? " keepdim" : "");
        compare_on(s, name, l, dt, got.values, ref.values, 0);
        compare_on(s, name + " indices", l, DType::i64, got.indices, ref.indices, 0);
        const auto gmin = ops::min_with_indices(d, dim);
        const auto rmin = ops::min_with_indices(r, dim);
        compare_on(s, detail::str_cat("min dim ", dim), l, dt, gmin.values, rmin.values, 0);
        compare_on(s, detail::str_cat("min dim ", dim, " indices"), l, DType::i64, gmin.indices,
                   rmin.indices, 0);
      }
      compare_on(s, "argmax (all)", l, DType::i64, ops::argmax(d), ops::argmax(r), 0);
      compare_on(s, "min (all)", l, dt, ops::min(d), ops::min(r), 0);
    }
  }
  // The backward of mean, var and max/min along a dim as ops:: computes them (autograd may
  // compose them otherwise); the max positions come from the CPU, for both.
  {
    const Shape shape{3, 7, 33};
    const std::string l = shape_str(shape) + " dim 1";
    const Tensor x = randn_cpu(shape, 104), gk = randn_cpu({3, 1, 33}, 105);
    const Tensor g = randn_cpu({3, 33}, 106);
    const Tensor at = ops::max_with_indices(x, 1).indices;
    for (DType dt : float_types()) {
      const Tensor r = rounded(x, dt), d = upload(x, dt);
      const double tol = tolerance(dt);
      compare_on(s, "mean_backward keepdim", l, dt,
                 ops::mean_backward(upload(gk, dt), shape, {1}, true),
                 ops::mean_backward(rounded(gk, dt), shape, {1}, true), tol);
      compare_on(s, "var_backward keepdim", l, dt,
                 ops::var_backward(upload(gk, dt), d, {1}, 1, true),
                 ops::var_backward(rounded(gk, dt), r, {1}, 1, true), 2 * tol);
      compare_on(s, "index_reduce_backward", l, dt,
                 ops::index_reduce_backward(upload(g, dt), at.to(dev()), shape, 1, false),
                 ops::index_reduce_backward(rounded(g, dt), at, shape, 1, false), 0);
    }
  }
  // Exact sums of integer and bool tensors into i64 (one block per output).
  struct IntCase {
    Shape shape;
    std::vector<int64_t> dims;
    bool keepdim;
  };
  std::vector<IntCase> ints = {{{2, 3, 300}, {}, false},
                               {{2, 3, 300}, {0, 2}, true},
                               {{2, 3, 300}, {-1}, false},
                               {{4, 301, 2}, {1}, false}};
  if (!quick) {
    ints.push_back({{64, 1000, 33}, {1}, false});
    ints.push_back({{1000, 1001}, {}, false});
  }
  for (const IntCase& c : ints) {
    for (DType dt : {DType::i32, DType::i64, DType::u8, DType::boolean}) {
      const int64_t hi = dt == DType::boolean ? 2 : dt == DType::u8 ? 256 : 1000000;
      const Tensor xi = randint_cpu(0, hi, c.shape, DType::i64, 101).to(dt);
      compare_on(s, sum_name(c.dims, c.keepdim), shape_str(c.shape), DType::i64,
                 ops::sum(xi.to(dev()), c.dims, c.keepdim), ops::sum(xi, c.dims, c.keepdim), 0);
    }
  }
  // Accuracy counting as a training loop does it: sum(eq(argmax(logits), target)).
  const Tensor logits = randn_cpu({37, 10}, 102);
  const Tensor target = randint_cpu(0, 10, {37}, DType::i64, 103);
  compare_on(s, "sum(eq(argmax, target))", "37x10", DType::i64,
             ops::sum(ops::eq(ops::argmax(logits.to(dev()), 1), target.to(dev()))),
             ops::sum(ops::eq(ops::argmax(logits, 1), target)), 0);
}

void check_softmax_cross_entropy(Suite& s, bool quick) {
  struct SoftmaxCase {
    Shape shape;
    int64_t dim;
  };
  std::vector<SoftmaxCase> cases = {{{4, 129}, -1}, {{3, 7, 5}, 1}, {{2, 300}, 1}};
  if (!quick) {
    cases.push_back({{64, 10000}, 1});
    cases.push_back({{8, 1000, 33}, 1});
  }
  for (const SoftmaxCase& c : cases) {
    const std::string l = shape_str(c.shape) + " dim " + std::to_string(c.dim);
    const Tensor x = ops::mul(randn_cpu(c.shape, 110), 3.0), g = randn_cpu(c.shape, 111);
    for (DType dt : float_types()) {
      const Tensor r = rounded(x, dt), d = upload(x, dt);
      const double tol = tolerance(dt);
      const Tensor ys = ops::softmax(d, c.dim), yl = ops::log_softmax(d, c.dim);
      const Tensor rs = ops::softmax(r, c.dim), rl = ops::log_softmax(r, c.dim);
      compare_on(s, "softmax", l, dt, ys, rs, tol);
      compare_on(s, "log_softmax", l, dt, yl, rl, tol);
      // Backward from the device's own (rounded) outputs, on both devices.
      const Tensor ysc = ys.to(Device::cpu()).to(DType::f32);
      const Tensor ylc = yl.to(Device::cpu()).to(DType::f32);
      compare_on(s, "softmax_backward", l, dt, ops::softmax_backward(upload(g, dt), ys, c.dim),
                 ops::softmax_backward(rounded(g, dt), ysc, c.dim), 2 * tol);
      compare_on(s, "log_softmax_backward", l, dt,
                 ops::log_softmax_backward(upload(g, dt), yl, c.dim),
                 ops::log_softmax_backward(rounded(g, dt), ylc, c.dim), 2 * tol);
    }
  }
  // Cross entropy, forward and backward through autograd.
  struct CeCase {
    int64_t n, c;
    CrossEntropyOptions o;
    const char* label;
  };
  std::vector<CeCase> ce = {
      {9, 11, {}, "mean"},
      {20, 300, {.reduction = Reduction::sum}, "sum"},
      {17, 10, {.reduction = Reduction::none}, "none"},
      {16, 37, {.label_smoothing = 0.1}, "mean, label smoothing 0.1"},
      {12, 7, {.ignore_index = 3}, "mean, ignore_index 3"},
  };
  if (!quick) {
    ce.push_back({33, 1000, {.reduction = Reduction::sum}, "sum"});
    ce.push_back({256, 10000, {.label_smoothing = 0.05}, "mean, label smoothing 0.05"});
  }
  for (const CeCase& c : ce) {
    const std::string l = dims({c.n, c.c}) + " " + c.label;
    const Tensor logits = ops::mul(randn_cpu({c.n, c.c}, 120), 2.0);
    const Tensor target = randint_cpu(0, c.c, {c.n}, DType::i64, 121);
    const Tensor gout = randn_cpu({c.n}, 122);
    for (DType dt : float_types()) {
      const double tol = 2 * tolerance(dt);
      Leaf x = leaf(logits, dt);
      const Tensor got = stoke::cross_entropy(x.dev, target.to(dev()), c.o);
      const Tensor ref = stoke::cross_entropy(x.cpu, target, c.o);
      compare_on(s, "cross_entropy", l, dt, got, ref, tol);
      if (c.o.reduction == Reduction::none) {
        backward_both(got, ref, gout, dt);
      } else {
        got.backward();
        ref.backward();
      }
      compare_on(s, "cross_entropy backward", l, dt, x.dev.grad(), x.cpu.grad(), tol);
    }
  }
  // nll_loss on log_softmax and mse_loss, composed of the kernels above.
  const Tensor logits = randn_cpu({13, 6}, 123), target = randint_cpu(0, 6, {13}, DType::i64, 124);
  compare_on(s, "nll_loss(log_softmax)", "13x6", DType::f32,
             stoke::nll_loss(stoke::log_softmax(logits.to(dev()), 1), target.to(dev())),
             stoke::nll_loss(stoke::log_softmax(logits, 1), target), tolerance(DType::f32));
  const Tensor y = randn_cpu({13, 6}, 125);
  compare_on(s, "mse_loss", "13x6", DType::f32, stoke::mse_loss(logits.to(dev()), y.to(dev())),
             stoke::mse_loss(logits, y), tolerance(DType::f32));
  // Their backward as ops:: computes them, every reduction, rows of class 2 ignored; the targets
  // with the ignored rows set to class 0.
  const std::pair<Reduction, const char*> reductions[] = {
      {Reduction::mean, "mean"}, {Reduction::sum, "sum"}, {Reduction::none, "none"}};
  for (const auto& [reduction, name] : reductions) {
    const NllLossOptions o{.reduction = reduction, .ignore_index = 2};
    const Tensor g = randn_cpu(reduction == Reduction::none ? Shape{13} : Shape{}, 126);
    compare_on(s, detail::str_cat("nll_loss_backward ", name, ", ignore_index 2"), "13x6",
               DType::f32, ops::nll_loss_backward(g.to(dev()), {13, 6}, target.to(dev()), o),
               ops::nll_loss_backward(g, {13, 6}, target, o), tolerance(DType::f32));
    const Tensor gm = reduction == Reduction::none ? randn_cpu({13, 6}, 127) : g;
    compare_on(s, detail::str_cat("mse_loss_backward ", name), "13x6", DType::f32,
               ops::mse_loss_backward(gm.to(dev()), logits.to(dev()), y.to(dev()), reduction),
               ops::mse_loss_backward(gm, logits, y, reduction), tolerance(DType::f32));
  }
  compare_on(s, "class_targets ignore_index 2", "13", DType::i64,
             ops::class_targets("class_targets", target.to(dev()), 6, 2),
             ops::class_targets("class_targets", target, 6, 2), 0);
}

void check_linear_algebra(Suite& s, bool quick) {
  struct MmCase {
    int64_t m, k, n;
    bool a_transposed;
  };
  std::vector<MmCase> mm = {{13, 9, 6, false}, {127, 33, 65, false}, {20, 17, 3, true}};
  if (!quick) {
    mm.push_back({256, 512, 128, false});
    mm.push_back({1000, 1000, 1000, true});
  }
  for (const MmCase& c : mm) {
    const std::string l = dims({c.m, c.k, c.n}) + (c.a_transposed ? " A^T" : "");
    const Tensor a0 = randn_cpu(c.a_transposed ? Shape{c.k, c.m} : Shape{c.m, c.k}, 130);
    const Tensor b0 = randn_cpu({c.k, c.n}, 131), g = randn_cpu({c.m, c.n}, 132);
    for (DType dt : float_types()) {
      const double tol = tolerance(dt);
      Leaf a = leaf(a0, dt), b = leaf(b0, dt);
      const Tensor ad = c.a_transposed ? a.dev.t() : a.dev;
      const Tensor ac = c.a_transposed ? a.cpu.t() : a.cpu;
      const Tensor got = stoke::matmul(ad, b.dev), ref = stoke::matmul(ac, b.cpu);
      compare_on(s, "matmul", l, dt, got, ref, tol);
      // Both gradients through autograd (ops::matmul_backward on the device).
      backward_both(got, ref, g, dt);
      compare_on(s, "matmul backward dA", l, dt, a.dev.grad(), a.cpu.grad(), tol);
      compare_on(s, "matmul backward dB", l, dt, b.dev.grad(), b.cpu.grad(), tol);
    }
  }
  // Batched with broadcasting: (3, 1, 7, 5) x (4, 5, 6); the gradients sum over broadcast dims.
  {
    const Tensor a0 = randn_cpu({3, 1, 7, 5}, 133), b0 = randn_cpu({4, 5, 6}, 134);
    const Tensor g = randn_cpu({3, 4, 7, 6}, 135);
    for (DType dt : float_types()) {
      const double tol = tolerance(dt);
      Leaf a = leaf(a0, dt), b = leaf(b0, dt);
      const Tensor got = stoke::matmul(a.dev, b.dev), ref = stoke::matmul(a.cpu, b.cpu);
      compare_on(s, "matmul batched", "3x1x7x5 @ 4x5x6", dt, got, ref, tol);
      backward_both(got, ref, g, dt);
      compare_on(s, "matmul batched backward dA", "3x1x7x5 @ 4x5x6", dt, a.dev.grad(), a.cpu.grad(),
                 tol);
      compare_on(s, "matmul batched backward dB", "3x1x7x5 @ 4x5x6", dt, b.dev.grad(), b.cpu.grad(),
                 tol);
    }
  }
  struct LinCase {
    Shape x;
    int64_t out;
    bool bias;
  };
  std::vector<LinCase> lin = {{{2, 5, 9}, 7, true}, {{33, 130}, 10, false}};
  if (!quick) lin.push_back({{64, 49, 512}, 1000, true});
  for (const LinCase& c : lin) {
    const int64_t in = c.x.back();
    const std::string l =
        shape_str(c.x) + " -> " + std::to_string(c.out) + (c.bias ? " +bias" : "");
    Shape ys = c.x;
    ys.back() = c.out;
    const Tensor x0 = randn_cpu(c.x, 140), w0 = randn_cpu({c.out, in}, 141);
    const Tensor b0 = randn_cpu({c.out}, 142), g = randn_cpu(ys, 143);
    for (DType dt : float_types()) {
      const double tol = tolerance(dt);
      Leaf x = leaf(x0, dt), w = leaf(w0, dt), b = leaf(b0, dt);
      const Tensor got = stoke::linear(x.dev, w.dev, c.bias ? b.dev : Tensor());
      const Tensor ref = stoke::linear(x.cpu, w.cpu, c.bias ? b.cpu : Tensor());
      compare_on(s, "linear", l, dt, got, ref, tol);
      backward_both(got, ref, g, dt);
      compare_on(s, "linear backward dx", l, dt, x.dev.grad(), x.cpu.grad(), tol);
      compare_on(s, "linear backward dW", l, dt, w.dev.grad(), w.cpu.grad(), tol);
      if (c.bias) compare_on(s, "linear backward db", l, dt, b.dev.grad(), b.cpu.grad(), tol);
    }
  }
}

}  // namespace stoke::selftest
