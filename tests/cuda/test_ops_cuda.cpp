// ops:: on "cuda" tensors through the device dispatch (ops/backend.h) and the CUDA glue
// (ops/cuda/), run here on the emulated backend: inputs are made on the CPU, moved with
// to(Device::cuda()), and every result is compared with the CPU op on the same inputs.
#include <catch2/catch.hpp>

#include "core/allocator.h"
#include "ops/backend.h"
#include "ops_cuda_util.h"

using namespace stoke;
using namespace stoke::test;

TEST_CASE("cuda tensors: creation, copies, views and casts on the device", "[ops_cuda]") {
  const Tensor z = zeros({3, 5}, {.device = kCuda});
  CHECK(z.device() == kCuda);
  CHECK(max_diff(z, zeros({3, 5})) == 0);
  const Tensor f = full({4, 3}, 2.5, {.dtype = DType::f16, .device = kCuda});
  CHECK(max_diff(f, full({4, 3}, 2.5)) == 0);
  const Tensor x = rand_cpu({4, 6}, 1);
  const Tensor d = x.to(kCuda);
  CHECK(max_diff(d.t().contiguous(), x.t().contiguous()) == 0);  // strided copy kernel
  CHECK(max_diff(d.slice(1, 1, 6, 2).clone(), x.slice(1, 1, 6, 2)) == 0);
  CHECK(max_diff(d.to(DType::bf16), x.to(DType::bf16)) == 0);  // same rounding as the CPU
  CHECK(d.select(0, 1).select(0, 2).item() == Approx(x.select(0, 1).select(0, 2).item()));
}

TEST_CASE("cuda tensors: binary ops broadcast like the CPU", "[ops_cuda]") {
  const Tensor a = rand_cpu({3, 1, 5}, 2), b = rand_cpu({4, 5}, 3);
  const Tensor da = a.to(kCuda), db = b.to(kCuda);
  CHECK(max_diff(ops::add(da, db), ops::add(a, b)) < 1e-6);
  CHECK(max_diff(ops::mul(da, db), ops::mul(a, b)) < 1e-6);
  CHECK(max_diff(ops::div(da, db), ops::div(a, b)) < 1e-4);
  CHECK(max_diff(ops::maximum(da, db), ops::maximum(a, b)) == 0);
  CHECK(max_diff(ops::sub(1.5, da), ops::sub(1.5, a)) < 1e-6);
  CHECK(max_diff(ops::mul(da.transpose(0, 2), 3.0), ops::mul(a.transpose(0, 2), 3.0)) < 1e-6);
  // Mismatched devices are refused with both named.
  CHECK_THROWS_WITH(ops::add(da, b), Catch::Contains("same device") && Catch::Contains("cuda:0"));
}

TEST_CASE("cuda tensors: unary maps and relu's backward match the CPU", "[ops_cuda]") {
  const Tensor x = rand_cpu({5, 7}, 17);
  const Tensor d = x.to(kCuda);
  CHECK(max_diff(ops::relu(d), ops::relu(x)) == 0);
  CHECK(max_diff(ops::tanh(d), ops::tanh(x)) < 1e-6);
  CHECK(max_diff(ops::exp(d), ops::exp(x)) < 1e-5);
  CHECK(max_diff(ops::gelu(d, GeluApproximate::tanh), ops::gelu(x, GeluApproximate::tanh)) < 1e-5);
  CHECK(max_diff(ops::leaky_relu(d, 0.2), ops::leaky_relu(x, 0.2)) < 1e-6);
  CHECK(max_diff(ops::clamp(d, -0.5, std::nullopt), ops::clamp(x, -0.5, std::nullopt)) == 0);
  const Tensor g = rand_cpu({5, 7}, 18), y = ops::relu(x);
  CHECK(max_diff(ops::relu_backward(g.to(kCuda), y.to(kCuda)), ops::relu_backward(g, y)) == 0);
}

TEST_CASE("cuda tensors: reductions and softmax match the CPU", "[ops_cuda]") {
  const Tensor x = rand_cpu({3, 7, 5}, 4);
  const Tensor d = x.to(kCuda);
  CHECK(max_diff(ops::sum(d), ops::sum(x)) < 1e-4);
  CHECK(max_diff(ops::sum(d, {1}), ops::sum(x, {1})) < 1e-5);
  CHECK(max_diff(ops::mean(d, {0, 2}, true), ops::mean(x, {0, 2}, true)) < 1e-6);
  const auto mx = ops::max_with_indices(d, 1);
  const auto mc = ops::max_with_indices(x, 1);
  CHECK(max_diff(mx.values, mc.values) == 0);
  CHECK(mx.indices.to(Device::cpu()).to_vector<int64_t>() == mc.indices.to_vector<int64_t>());
  for (int64_t dim : {-1, 1}) {
    CHECK(max_diff(ops::softmax(d, dim), ops::softmax(x, dim)) < 1e-6);
    const Tensor ly = ops::log_softmax(d, dim), lc = ops::log_softmax(x, dim);
    CHECK(max_diff(ly, lc) < 1e-5);
    const Tensor g = rand_cpu(x.shape(), 5);
    CHECK(max_diff(ops::log_softmax_backward(g.to(kCuda), ly, dim),
                   ops::log_softmax_backward(g, lc, dim)) < 1e-5);
  }
}

TEST_CASE("cuda tensors: fused cross entropy forward and backward match the CPU", "[ops_cuda]") {
  const Tensor logits = rand_cpu({9, 11}, 6);
  Tensor target = randint(0, 11, {9}, {.dtype = DType::i64});
  const CrossEntropyOptions opts{.label_smoothing = 0.1};
  const auto cpu = ops::cross_entropy_forward(logits, target, opts);
  const auto dev = ops::cross_entropy_forward(logits.to(kCuda), target.to(kCuda), opts);
  CHECK(max_diff(dev.loss, cpu.loss) < 1e-5);
  const Tensor g = full({}, 0.5);
  CHECK(max_diff(ops::cross_entropy_backward(g.to(kCuda), logits.to(kCuda), target.to(kCuda),
                                             dev.lse, opts),
                 ops::cross_entropy_backward(g, logits, target, cpu.lse, opts)) < 1e-6);
  target.data<int64_t>()[3] = 11;
  // Reported at the next synchronization (cuda/runtime/deferred_checks.h): the read-back here.
  CHECK_THROWS_WITH(
      ops::cross_entropy_forward(logits.to(kCuda), target.to(kCuda), opts).loss.to(Device::cpu()),
      Catch::Contains("target 11 of row 3"));
}

TEST_CASE("cuda tensors: matmul and linear through the device GEMM", "[ops_cuda]") {
  const Tensor a = rand_cpu({13, 9}, 7), b = rand_cpu({9, 6}, 8);
  CHECK(max_diff(ops::matmul(a.to(kCuda), b.to(kCuda)), ops::matmul(a, b)) < 1e-5);
  const Tensor x = rand_cpu({2, 5, 9}, 9), w = rand_cpu({7, 9}, 10), bias = rand_cpu({7}, 11);
  CHECK(max_diff(ops::linear(x.to(kCuda), w.to(kCuda), bias.to(kCuda)), ops::linear(x, w, bias)) <
        1e-5);
  CHECK(max_diff(ops::linear(x.to(kCuda), w.to(kCuda)), ops::linear(x, w)) < 1e-5);
  const Tensor go = rand_cpu({2, 5, 7}, 16);
  const auto gc = ops::linear_backward(go, x, w, true, true, true);
  const auto gd = ops::linear_backward(go.to(kCuda), x.to(kCuda), w.to(kCuda), true, true, true);
  CHECK(max_diff(gd.grad_input, gc.grad_input) < 1e-5);
  CHECK(max_diff(gd.grad_weight, gc.grad_weight) < 1e-5);
  CHECK(max_diff(gd.grad_bias, gc.grad_bias) < 1e-5);
}

TEST_CASE("cuda tensors: batched, broadcast and 1-D matmul and its backward match the CPU",
          "[ops_cuda]") {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{3, 1, 7, 5}, {4, 5, 6}}, {{2, 7, 5}, {5, 6}}, {{5}, {2, 5, 3}}, {{4, 5}, {5}}, {{5}, {5}}};
  uint64_t seed = 40;
  for (const auto& [sa, sb] : cases) {
    INFO(sa << " @ " << sb);
    const Tensor a = rand_cpu(sa, seed++), b = rand_cpu(sb, seed++);
    const Tensor want = ops::matmul(a, b);
    const Tensor got = ops::matmul(a.to(kCuda), b.to(kCuda));
    REQUIRE(got.shape() == want.shape());
    CHECK(max_diff(got, want) < 1e-5);
    if (a.dim() < 2 || b.dim() < 2) continue;  // matmul_backward takes the unsqueezed operands
    const Tensor g = rand_cpu(want.shape(), seed++);
    const auto gc = ops::matmul_backward(g, a, b, true, true);
    const auto gd = ops::matmul_backward(g.to(kCuda), a.to(kCuda), b.to(kCuda), true, true);
    REQUIRE(gd.grad_a.shape() == a.shape());
    REQUIRE(gd.grad_b.shape() == b.shape());
    CHECK(max_diff(gd.grad_a, gc.grad_a) < 1e-4);
    CHECK(max_diff(gd.grad_b, gc.grad_b) < 1e-4);
  }
  // Autograd through a batched matmul on the device.
  Tensor a = rand_cpu({2, 3, 4}, 60).to(kCuda).set_requires_grad(true);
  Tensor b = rand_cpu({4, 2}, 61).to(kCuda).set_requires_grad(true);
  stoke::sum(stoke::matmul(a, b)).backward();
  const Tensor ac = a.to(Device::cpu()).detach().set_requires_grad(true);
  const Tensor bc = b.to(Device::cpu()).detach().set_requires_grad(true);
  stoke::sum(stoke::matmul(ac, bc)).backward();
  CHECK(max_diff(a.grad(), ac.grad()) < 1e-5);
  CHECK(max_diff(b.grad(), bc.grad()) < 1e-5);
  // Mismatched inner dims: the CPU's message on both devices.
  const Tensor x = rand_cpu({2, 3, 4}, 62), y = rand_cpu({5, 2}, 63);
  std::string cpu_msg, cuda_msg;
  try {
    ops::matmul(x, y);
  } catch (const std::exception& e) {
    cpu_msg = e.what();
  }
  try {
    ops::matmul(x.to(kCuda), y.to(kCuda));
  } catch (const std::exception& e) {
    cuda_msg = e.what();
  }
  CHECK_THAT(cpu_msg, Catch::Contains("expected a's last dim to equal b's second-to-last dim"));
  CHECK(cuda_msg == cpu_msg);
}

TEST_CASE("cuda tensors: a device with no backend registered says so, naming the op",
          "[ops_cuda]") {
  // Every Backend method is pure virtual (ops/backend_methods.h), so a backend cannot lack an op;
  // what remains is a build or process without the device's backend.
  const Tensor d = rand_cpu({2, 3}, 12).to(kCuda);
  ops::Backend* cuda = &ops::backend_for("test", kCuda);
  ops::register_backend(Device::Type::cuda, nullptr);
  std::string msg;
  try {
    ops::exp(d);
  } catch (const std::exception& e) {
    msg = e.what();
  }
  ops::register_backend(Device::Type::cuda, cuda);
  CHECK_THAT(msg, Catch::Contains("stoke::exp") && Catch::Contains("no kernels for that device"));
  CHECK(max_diff(ops::exp(d), ops::exp(d.to(Device::cpu()))) < 1e-6);  // restored
  // The CPU backend is built in.
  CHECK_THROWS_WITH(ops::register_backend(Device::Type::cpu, cuda),
                    Catch::Contains("cannot be replaced"));
}

TEST_CASE("cuda tensors: var, min, argmin and argmax match the CPU", "[ops_cuda]") {
  const Tensor x = rand_cpu({4, 5, 6}, 19);
  const Tensor d = x.to(kCuda);
  CHECK(max_diff(ops::var(d), ops::var(x)) < 1e-5);
  CHECK(max_diff(ops::var(d, {0, 2}, 0, true), ops::var(x, {0, 2}, 0, true)) < 1e-5);
  CHECK(max_diff(ops::min(d, 1), ops::min(x, 1)) == 0);
  CHECK(max_diff(ops::argmin(d, 2, true), ops::argmin(x, 2, true)) == 0);
  CHECK(max_diff(ops::argmax(d, 0), ops::argmax(x, 0)) == 0);
  CHECK(max_diff(ops::argmax(d), ops::argmax(x)) == 0);
  CHECK(max_diff(ops::min(d), ops::min(x)) == 0);
  const Tensor g = rand_cpu({4, 6}, 20);
  CHECK(max_diff(ops::var_backward(g.to(kCuda), d, {1}), ops::var_backward(g, x, {1})) < 1e-5);
  CHECK(max_diff(ops::mean_backward(g.to(kCuda), x.shape(), {1}),
                 ops::mean_backward(g, x.shape(), {1})) < 1e-7);
  CHECK_THROWS_WITH(ops::min(rand_cpu({0, 3}, 1).to(kCuda), 0),
                    Catch::Contains("stoke::min") && Catch::Contains("size 0"));
}

TEST_CASE("cuda tensors: in-place updates, as optimizers use them", "[ops_cuda]") {
  const Tensor p = rand_cpu({4, 5}, 13), g = rand_cpu({4, 5}, 14), row = rand_cpu({5}, 15);
  Tensor pc = p.clone(), pd = p.to(kCuda);
  const Tensor gd = g.to(kCuda);
  ops::add_(pc, g, -0.1);
  ops::add_(pd, gd, -0.1);
  ops::mul_(pc, 0.9);
  ops::mul_(pd, 0.9);
  ops::sub_(pc, row);  // broadcast
  ops::sub_(pd, row.to(kCuda));
  ops::addcmul_(pc, g, g, 0.5);
  ops::addcmul_(pd, gd, gd, 0.5);
  CHECK(max_diff(pd, pc) < 1e-6);
  ops::zero_(pd);
  CHECK(max_diff(pd, zeros({4, 5})) == 0);
  Tensor strided = p.to(kCuda);
  ops::add_(strided.t(), 1.0);  // non-contiguous in place
  CHECK(max_diff(strided, ops::add(p, 1.0)) < 1e-6);
}

TEST_CASE("cuda tensors: an MLP trains on the device like on the CPU", "[ops_cuda]") {
  // Same initial weights and data on both devices; a few SGD steps of linear -> cross entropy;
  // losses and weights must agree step by step.
  Generator gen(21);
  const Tensor x = randn({16, 6}, {}, &gen);
  const Tensor y = randint(0, 3, {16}, {.dtype = DType::i64}, &gen);
  const Tensor w0 = randn({3, 6}, {}, &gen), b0 = randn({3}, {}, &gen);
  auto train = [&](Device dev) {
    Tensor w = w0.clone().to(dev).detach(), b = b0.clone().to(dev).detach();
    w.set_requires_grad(true);
    b.set_requires_grad(true);
    const Tensor xd = x.to(dev), yd = y.to(dev);
    std::vector<double> losses;
    for (int step = 0; step < 3; ++step) {
      Tensor loss = cross_entropy(linear(xd, w, b), yd);
      losses.push_back(loss.item());
      loss.backward();
      NoGradGuard no_grad;
      ops::add_(w, w.grad(), -0.5);
      ops::add_(b, b.grad(), -0.5);
      w.set_grad(Tensor());
      b.set_grad(Tensor());
    }
    return std::make_pair(losses, w.to(Device::cpu()));
  };
  const auto [cpu_losses, cpu_w] = train(Device::cpu());
  const auto [dev_losses, dev_w] = train(kCuda);
  for (size_t i = 0; i < cpu_losses.size(); ++i)
    CHECK(dev_losses[i] == Approx(cpu_losses[i]).epsilon(1e-5));
  CHECK(cpu_losses.back() < cpu_losses.front());
  CHECK(max_diff(dev_w, cpu_w) < 1e-5);
}

TEST_CASE("cuda tensors: comparisons, where and their backward match the CPU", "[ops_cuda]") {
  const Tensor a = rand_cpu({3, 1, 5}, 30), b = rand_cpu({4, 5}, 31);
  const Tensor da = a.to(kCuda), db = b.to(kCuda);
  CHECK(ops::lt(da, db).dtype() == DType::boolean);
  CHECK(max_diff(ops::lt(da, db), ops::lt(a, b)) == 0);
  CHECK(max_diff(ops::ge(da, 0.25), ops::ge(a, 0.25)) == 0);
  CHECK(max_diff(ops::ne(da.to(DType::f16), 0.1),
                 ops::ne(a.to(DType::f16).to(DType::f32),
                         double(Tensor(scalar_tensor(0.1, {.dtype = DType::f16})).item()))) == 0);
  // Accuracy as stoke-train counts it: argmax against i64 labels.
  const Tensor logits = rand_cpu({8, 10}, 32);
  Generator g(3);
  const Tensor labels = randint(0, 10, {8}, {.dtype = DType::i64}, &g);
  CHECK(max_diff(ops::eq(ops::argmax(logits.to(kCuda), 1), labels.to(kCuda)),
                 ops::eq(ops::argmax(logits, 1), labels)) == 0);
  const Tensor cond = ops::gt(a, 0.0);
  CHECK(max_diff(ops::where(cond.to(kCuda), da, db), ops::where(cond, a, b)) == 0);
  const Tensor gr = rand_cpu({3, 4, 5}, 33);
  CHECK(max_diff(ops::where_backward(gr.to(kCuda), cond.to(kCuda), true),
                 ops::where_backward(gr, cond, true)) == 0);
  CHECK(max_diff(ops::maximum_backward(gr.to(kCuda), da, db), ops::maximum_backward(gr, a, b)) ==
        0);
  CHECK(max_diff(ops::div_backward_other(gr.to(kCuda), da, db), ops::div_backward_other(gr, a, b)) <
        1e-3);
  CHECK(max_diff(ops::sum_to(gr.to(kCuda), {4, 1}), ops::sum_to(gr, {4, 1})) < 1e-5);
  CHECK_THROWS_WITH(ops::where(da, da, db), Catch::Contains("expected cond of dtype bool"));
}

TEST_CASE("cuda tensors: unary backward maps, pow and in-place sqrt/clamp/lerp match the CPU",
          "[ops_cuda]") {
  const Tensor x = rand_cpu({6, 7}, 40), g = rand_cpu({6, 7}, 41);
  const Tensor dx = x.to(kCuda), dg = g.to(kCuda);
  const Tensor y = ops::sigmoid(x), t = ops::tanh(x), sq = ops::sqrt(ops::abs(x));
  CHECK(max_diff(ops::sigmoid_backward(dg, y.to(kCuda)), ops::sigmoid_backward(g, y)) < 1e-6);
  CHECK(max_diff(ops::tanh_backward(dg, t.to(kCuda)), ops::tanh_backward(g, t)) < 1e-6);
  CHECK(max_diff(ops::leaky_relu_backward(dg, dx, 0.1), ops::leaky_relu_backward(g, x, 0.1)) == 0);
  CHECK(max_diff(ops::gelu_backward(dg, dx, GeluApproximate::none),
                 ops::gelu_backward(g, x, GeluApproximate::none)) < 1e-5);
  CHECK(max_diff(ops::gelu_backward(dg, dx, GeluApproximate::tanh),
                 ops::gelu_backward(g, x, GeluApproximate::tanh)) < 1e-5);
  CHECK(max_diff(ops::clamp_backward(dg, dx, -0.5, 0.5), ops::clamp_backward(g, x, -0.5, 0.5)) ==
        0);
  CHECK(max_diff(ops::abs_backward(dg, dx), ops::abs_backward(g, x)) == 0);
  CHECK(max_diff(ops::sqrt_backward(dg, sq.to(kCuda)), ops::sqrt_backward(g, sq)) < 1e-4);
  CHECK(max_diff(ops::rsqrt_backward(dg, sq.to(kCuda)), ops::rsqrt_backward(g, sq)) < 1e-3);
  for (double e : {2.0, 3.0, -1.0, 0.5, 1.5, 0.0}) {
    INFO("exponent " << e);
    const Tensor base = e == 0.5 || e == 1.5 ? ops::abs(x) : x;
    CHECK(max_diff(ops::pow(base.to(kCuda), e), ops::pow(base, e)) < 1e-4);
    CHECK(max_diff(ops::pow_backward(dg, base.to(kCuda), e), ops::pow_backward(g, base, e)) < 1e-3);
  }
  Tensor c1 = ops::abs(x), c2 = ops::abs(x).to(kCuda);
  ops::sqrt_(c1);
  ops::sqrt_(c2);
  CHECK(max_diff(c2, c1) < 1e-6);
  ops::clamp_(c1, 0.2, 0.9);
  ops::clamp_(c2, 0.2, 0.9);
  CHECK(max_diff(c2, c1) == 0);
  ops::lerp_(c1, x, 0.3);
  ops::lerp_(c2, dx, 0.3);
  CHECK(max_diff(c2, c1) < 1e-6);
}

TEST_CASE("cuda tensors: arange and random creation on cuda give the CPU's values", "[ops_cuda]") {
  CHECK(max_diff(arange(0, 10, 3, {.device = kCuda}), arange(0, 10, 3)) == 0);
  Generator g1(5), g2(5);
  const Tensor a = randn({3, 7}, {.device = kCuda}, &g1), b = randn({3, 7}, {}, &g2);
  CHECK(a.device() == kCuda);
  CHECK(max_diff(a, b) == 0);
  CHECK(max_diff(randint(0, 9, {11}, {.dtype = DType::i64, .device = kCuda}, &g1),
                 randint(0, 9, {11}, {.dtype = DType::i64}, &g2)) == 0);
  const Tensor r = rand({4}, {.device = kCuda, .requires_grad = true});
  CHECK(r.requires_grad());
  CHECK(r.is_leaf());
  CHECK_THROWS_WITH(rand({2}, {.device = Device::cuda(3)}),
                    Catch::Contains("stoke::rand") && Catch::Contains("cuda:3"));
}

TEST_CASE("cuda tensors: f16 and bf16 matmul and linear (+ backward) match the CPU in f32",
          "[ops_cuda]") {
  for (DType dtype : {DType::f16, DType::bf16}) {
    INFO(dtype);
    const double tol = dtype == DType::f16 ? 2e-2 : 1.5e-1;
    // Operands representable in the dtype: the two sides multiply the same numbers.
    const Tensor a = rand_cpu({5, 9}, 50).to(dtype).to(DType::f32);
    const Tensor b = rand_cpu({9, 4}, 51).to(dtype).to(DType::f32);
    const Tensor h = [&](const Tensor& t) { return t.to(kCuda).to(dtype); }(a);
    const Tensor got = ops::matmul(h, b.to(kCuda).to(dtype));
    CHECK(got.dtype() == dtype);
    CHECK(max_diff(got, ops::matmul(a, b)) < tol);
    const Tensor w = rand_cpu({4, 9}, 52).to(dtype).to(DType::f32);
    const Tensor bias = rand_cpu({4}, 53).to(dtype).to(DType::f32);
    const auto dev = [&](const Tensor& t) { return t.to(kCuda).to(dtype); };
    CHECK(max_diff(ops::linear(dev(a), dev(w), dev(bias)), ops::linear(a, w, bias)) < tol);
    const Tensor go = rand_cpu({5, 4}, 54).to(dtype).to(DType::f32);
    const auto gw = ops::linear_backward(go, a, w, true, true, true);
    const auto gd = ops::linear_backward(dev(go), dev(a), dev(w), true, true, true);
    CHECK(gd.grad_weight.dtype() == dtype);
    CHECK(max_diff(gd.grad_input, gw.grad_input) < tol);
    CHECK(max_diff(gd.grad_weight, gw.grad_weight) < tol);
    CHECK(max_diff(gd.grad_bias, gw.grad_bias) < tol);
  }
  CHECK_THROWS_WITH(
      ops::matmul(rand_cpu({2, 2}, 1).to(kCuda), rand_cpu({2, 2}, 2).to(kCuda).to(DType::f16)),
      Catch::Contains("same dtype"));
}

TEST_CASE("cuda tensors: integer arithmetic and integer/bool sums match the CPU", "[ops_cuda]") {
  Generator g(8);
  const Tensor a = randint(-50, 50, {4, 6}, {.dtype = DType::i64}, &g);
  const Tensor b = randint(-50, 50, {6}, {.dtype = DType::i64}, &g);
  const Tensor da = a.to(kCuda), db = b.to(kCuda);
  CHECK(max_diff(ops::add(da, db), ops::add(a, b)) == 0);
  CHECK(max_diff(ops::mul(da, 3.0), ops::mul(a, 3.0)) == 0);
  CHECK(max_diff(ops::sub(7.0, da), ops::sub(7.0, a)) == 0);
  CHECK(max_diff(ops::sum(da), ops::sum(a)) == 0);
  CHECK(ops::sum(da).dtype() == DType::i64);
  CHECK(max_diff(ops::sum(da, {0}, true), ops::sum(a, {0}, true)) == 0);
  // Counting correct predictions: a bool sum on the device.
  CHECK(max_diff(ops::sum(ops::gt(da, 0.0)), ops::sum(ops::gt(a, 0.0))) == 0);
  Tensor c = a.clone(), dc = da.clone();
  ops::add_(c, b, 2);
  ops::add_(dc, db, 2);
  ops::add_(c, 1.0);
  ops::add_(dc, 1.0);
  CHECK(max_diff(dc, c) == 0);
  CHECK_THROWS_WITH(ops::add(da, 0.5), Catch::Contains("expected an integral scalar"));
}
