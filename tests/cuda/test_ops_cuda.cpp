// ops:: on "cuda" tensors through the device dispatch (ops/backend.h) and the CUDA glue
// (ops/cuda/), run here on the emulated backend: inputs are made on the CPU, moved with
// to(Device::cuda()), and every result is compared with the CPU op on the same inputs.
#include <catch2/catch.hpp>

#include "core/allocator.h"
#include "ops/backend.h"
#include "ops_cuda_util.h"

using namespace stoke;
using namespace stoke::test;

namespace {

// sum_tol for the products of a GEMM C = A B with K = A's columns: sum_k |a_ik b_kj|, the largest
// over C, from |A| |B| in f64.
double gemm_tol(const Tensor& a, const Tensor& b) {
  const Tensor m = ops::matmul(ops::abs(a).to(DType::f64), ops::abs(b).to(DType::f64));
  return sum_tol(a.size(-1), max_abs(m));
}

Tensor abs64(const Tensor& t) {
  return ops::abs(t).to(DType::f64);
}

// sum_tol for matmul_backward's gradients of a (..., M, K) @ b (..., K, N) with output gradient
// g: each element of grad_a sums g.numel() K / a.numel() products (N, times a's broadcast
// copies), grad_b's g.numel() K / b.numel(); the sums of |products| from the same backward on
// |g|, |a|, |b| in f64.
std::pair<double, double> matmul_backward_tol(const Tensor& g, const Tensor& a, const Tensor& b) {
  const auto m = ops::matmul_backward(abs64(g), abs64(a), abs64(b), true, true);
  const int64_t k = a.size(-1);
  return {sum_tol(g.numel() * k / a.numel(), max_abs(m.grad_a)),
          sum_tol(g.numel() * k / b.numel(), max_abs(m.grad_b))};
}

}  // namespace

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
  // A correctly rounded conversion (round to nearest even) has one result on every path.
  CHECK(max_diff(d.to(DType::bf16), x.to(DType::bf16)) == 0);
  CHECK(d.select(0, 1).select(0, 2).item() == x.select(0, 1).select(0, 2).item());  // a copy
}

TEST_CASE("cuda tensors: binary ops broadcast like the CPU", "[ops_cuda]") {
  const Tensor a = rand_cpu({3, 1, 5}, 2), b = rand_cpu({4, 5}, 3);
  const Tensor da = a.to(kCuda), db = b.to(kCuda);
  // Bit for bit: each element is one IEEE operation (+, -, *, /) on the same f32 operands, which
  // every conforming path rounds correctly to the same result (CUDA's f32 division is IEEE unless
  // built with fast math; the scalars 1.5 and 3.0 are exact in f32).
  CHECK(max_diff(ops::add(da, db), ops::add(a, b)) == 0);
  CHECK(max_diff(ops::mul(da, db), ops::mul(a, b)) == 0);
  CHECK(max_diff(ops::div(da, db), ops::div(a, b)) == 0);
  CHECK(max_diff(ops::maximum(da, db), ops::maximum(a, b)) == 0);  // a selection
  CHECK(max_diff(ops::sub(1.5, da), ops::sub(1.5, a)) == 0);
  CHECK(max_diff(ops::mul(da.transpose(0, 2), 3.0), ops::mul(a.transpose(0, 2), 3.0)) == 0);
  // Mismatched devices are refused with both named.
  CHECK_THROWS_WITH(ops::add(da, b), Catch::Contains("same device") && Catch::Contains("cuda:0"));
}

TEST_CASE("cuda tensors: unary maps and relu's backward match the CPU", "[ops_cuda]") {
  const Tensor x = rand_cpu({5, 7}, 17);
  const Tensor d = x.to(kCuda);
  CHECK(max_diff(ops::relu(d), ops::relu(x)) == 0);  // selections: bit for bit
  // tanhf on both (CUDA documents 2 ulp, glibc less); the CPU's exp is its own polynomial (under
  // 1.5 ulp, ops/cpu/row_kernels.h), the kernel's expf (2 ulp): under 4 ulp = 8u relative.
  CHECK(max_rel_diff(ops::tanh(d), ops::tanh(x)) <= 8 * kU);
  CHECK(max_rel_diff(ops::exp(d), ops::exp(x)) <= 8 * kU);
  // 0.5 x (1 + tanh(k (x + c x^3))): ~5 roundings of tanh's argument (|arg| <= 4.3 for |x| <= 3.5)
  // and tanhf's 2 ulp give t within ~25u on each side; 0.5 x (1 + t) adds 3u |y|: each side
  // within 0.5 * 3.5 * 25u + 3u * 3.5 = 55u of the exact value, so 110u apart.
  CHECK(max_diff(ops::gelu(d, GeluApproximate::tanh), ops::gelu(x, GeluApproximate::tanh)) <
        110 * kU);
  // x or x * 0.2f: one IEEE product, bit for bit.
  CHECK(max_diff(ops::leaky_relu(d, 0.2), ops::leaky_relu(x, 0.2)) == 0);
  CHECK(max_diff(ops::clamp(d, -0.5, std::nullopt), ops::clamp(x, -0.5, std::nullopt)) == 0);
  const Tensor g = rand_cpu({5, 7}, 18), y = ops::relu(x);
  CHECK(max_diff(ops::relu_backward(g.to(kCuda), y.to(kCuda)), ops::relu_backward(g, y)) == 0);
}

TEST_CASE("cuda tensors: reductions and softmax match the CPU", "[ops_cuda]") {
  const Tensor x = rand_cpu({3, 7, 5}, 4);
  const Tensor d = x.to(kCuda);
  const Tensor ax = ops::abs(x);
  CHECK(max_diff(ops::sum(d), ops::sum(x)) < sum_tol(105, ops::sum(ax).item()));
  CHECK(max_diff(ops::sum(d, {1}), ops::sum(x, {1})) < sum_tol(7, max_abs(ops::sum(ax, {1}))));
  // The mean: the sum's tolerance / 15, and the division's rounding on each side (2u |mean|).
  const double mean_abs = max_abs(ops::mean(ax, {0, 2}));
  CHECK(max_diff(ops::mean(d, {0, 2}, true), ops::mean(x, {0, 2}, true)) <
        sum_tol(15, mean_abs) + 2 * kU * mean_abs);
  const auto mx = ops::max_with_indices(d, 1);
  const auto mc = ops::max_with_indices(x, 1);
  CHECK(max_diff(mx.values, mc.values) == 0);  // selections: bit for bit
  CHECK(mx.indices.to(Device::cpu()).to_vector<int64_t>() == mc.indices.to_vector<int64_t>());
  for (int64_t dim : {-1, 1}) {
    // Both exponentiate the same fl(x - max) (the CPU's exp within 1.5 ulp, expf within 2), sum
    // K = 7 (or 5) positive terms in other orders (each within K u relative) and divide (u):
    // under 2 (3.5 + 7 + 1) u = 23u apart, relative.
    CHECK(max_rel_diff(ops::softmax(d, dim), ops::softmax(x, dim)) < 23 * kU);
    const Tensor ly = ops::log_softmax(d, dim), lc = ops::log_softmax(x, dim);
    // x - max - log(sum): the sum within 7u relative (7u absolute after the log), log's 1 ulp
    // (<= 2u |y|) and the subtraction's u |y| on each side: under 2 (7 + 3 max|y|) u.
    const double y_max = max_abs(lc);
    CHECK(max_diff(ly, lc) < 2 * (7 + 3 * y_max) * kU);
    const Tensor g = rand_cpu(x.shape(), 5);
    // g - exp(y) sum(g): the sums of 7 gradients to sum_tol, times exp(y) <= 1; exp(y)'s 3.5 ulp
    // (7u) times |sum g|; and two roundings of the result (|g| + |sum g|) on each side.
    const double g_sum = max_abs(ops::sum(ops::abs(g), {dim}));
    CHECK(max_diff(ops::log_softmax_backward(g.to(kCuda), ly, dim),
                   ops::log_softmax_backward(g, lc, dim)) <
          sum_tol(7, g_sum) + 2 * (7 * g_sum + 2 * (max_abs(g) + g_sum)) * kU);
  }
}

TEST_CASE("cuda tensors: fused cross entropy forward and backward match the CPU", "[ops_cuda]") {
  const Tensor logits = rand_cpu({9, 11}, 6);
  Tensor target = randint(0, 11, {9}, {.dtype = DType::i64});
  const CrossEntropyOptions opts{.label_smoothing = 0.1};
  const auto cpu = ops::cross_entropy_forward(logits, target, opts);
  const auto dev = ops::cross_entropy_forward(logits.to(kCuda), target.to(kCuda), opts);
  // Per row: lse (a sum of 11 exps to sqrt(11) u typically, each exp within 3.5 ulp = 7u, the log
  // 2u) and the smoothed target terms (a sum of 11 logits, 2 roundings): ~20 roundings of values
  // up to |loss| + |lse| <= 10 on each side; the mean of 9 rows adds its own sum_tol.
  const double row_max = max_abs(cpu.lse) + 5;
  CHECK(max_diff(dev.loss, cpu.loss) < 2 * 20 * kU * row_max + sum_tol(9, row_max));
  const Tensor g = full({}, 0.5);
  // 0.5 / 9 (softmax - smoothed one-hot): softmax within 23u relative (see softmax above) of
  // values <= 1, the smoothing and the scale 2 roundings more: under 0.5 / 9 * 25u.
  CHECK(max_diff(ops::cross_entropy_backward(g.to(kCuda), logits.to(kCuda), target.to(kCuda),
                                             dev.lse, opts),
                 ops::cross_entropy_backward(g, logits, target, cpu.lse, opts)) <
        0.5 / 9 * 25 * kU);
  target.data<int64_t>()[3] = 11;
  // Reported at the next synchronization (cuda/runtime/deferred_checks.h): the read-back here.
  CHECK_THROWS_WITH(
      ops::cross_entropy_forward(logits.to(kCuda), target.to(kCuda), opts).loss.to(Device::cpu()),
      Catch::Contains("target 11 of row 3"));
}

TEST_CASE("cuda tensors: matmul and linear through the device GEMM", "[ops_cuda]") {
  const Tensor a = rand_cpu({13, 9}, 7), b = rand_cpu({9, 6}, 8);
  CHECK(max_diff(ops::matmul(a.to(kCuda), b.to(kCuda)), ops::matmul(a, b)) < gemm_tol(a, b));
  const Tensor x = rand_cpu({2, 5, 9}, 9), w = rand_cpu({7, 9}, 10), bias = rand_cpu({7}, 11);
  const Tensor x2 = x.reshape({10, 9});
  const double lin_tol = gemm_tol(x2, w.t());
  // The bias: one more addition, rounded on each side (2u of the result).
  const double with_bias = lin_tol + 2 * kU * max_abs(ops::linear(x, w, bias));
  CHECK(max_diff(ops::linear(x.to(kCuda), w.to(kCuda), bias.to(kCuda)), ops::linear(x, w, bias)) <
        with_bias);
  CHECK(max_diff(ops::linear(x.to(kCuda), w.to(kCuda)), ops::linear(x, w)) < lin_tol);
  const Tensor go = rand_cpu({2, 5, 7}, 16);
  const Tensor go2 = go.reshape({10, 7});
  const auto gc = ops::linear_backward(go, x, w, true, true, true);
  const auto gd = ops::linear_backward(go.to(kCuda), x.to(kCuda), w.to(kCuda), true, true, true);
  CHECK(max_diff(gd.grad_input, gc.grad_input) < gemm_tol(go2, w));
  CHECK(max_diff(gd.grad_weight, gc.grad_weight) < gemm_tol(go2.t(), x2));
  CHECK(max_diff(gd.grad_bias, gc.grad_bias) < sum_tol(10, max_abs(ops::sum(ops::abs(go2), {0}))));
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
    CHECK(max_diff(got, want) <
          sum_tol(a.shape().back(), max_abs(ops::matmul(abs64(a), abs64(b)))));
    if (a.dim() < 2 || b.dim() < 2) continue;  // matmul_backward takes the unsqueezed operands
    const Tensor g = rand_cpu(want.shape(), seed++);
    const auto gc = ops::matmul_backward(g, a, b, true, true);
    const auto gd = ops::matmul_backward(g.to(kCuda), a.to(kCuda), b.to(kCuda), true, true);
    REQUIRE(gd.grad_a.shape() == a.shape());
    REQUIRE(gd.grad_b.shape() == b.shape());
    const auto [tol_a, tol_b] = matmul_backward_tol(g, a, b);
    CHECK(max_diff(gd.grad_a, gc.grad_a) < tol_a);
    CHECK(max_diff(gd.grad_b, gc.grad_b) < tol_b);
  }
  // Autograd through a batched matmul on the device.
  Tensor a = rand_cpu({2, 3, 4}, 60).to(kCuda).set_requires_grad(true);
  Tensor b = rand_cpu({4, 2}, 61).to(kCuda).set_requires_grad(true);
  stoke::sum(stoke::matmul(a, b)).backward();
  const Tensor ac = a.to(Device::cpu()).detach().set_requires_grad(true);
  const Tensor bc = b.to(Device::cpu()).detach().set_requires_grad(true);
  stoke::sum(stoke::matmul(ac, bc)).backward();
  const auto [tol_a, tol_b] = matmul_backward_tol(ones({2, 3, 2}), ac.detach(), bc.detach());
  CHECK(max_diff(a.grad(), ac.grad()) < tol_a);
  CHECK(max_diff(b.grad(), bc.grad()) < tol_b);
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
  CHECK(max_rel_diff(ops::exp(d), ops::exp(d.to(Device::cpu()))) <= 8 * kU);  // restored (above)
  // The CPU backend is built in.
  CHECK_THROWS_WITH(ops::register_backend(Device::Type::cpu, cuda),
                    Catch::Contains("cannot be replaced"));
}

TEST_CASE("cuda tensors: var, min, argmin and argmax match the CPU", "[ops_cuda]") {
  const Tensor x = rand_cpu({4, 5, 6}, 19);
  const Tensor d = x.to(kCuda);
  // var = sum (x - mean)^2 / (K - 1): the mean's rounding moves it to second order only (the
  // deviations sum to zero), so sum_tol of the K squares, plus the squaring's and the division's
  // roundings (2u |var| each side).
  const auto var_tol = [&](int64_t k, const Tensor& v) {
    return sum_tol(k, max_abs(v) * static_cast<double>(k - 1)) / static_cast<double>(k - 1) +
           4 * kU * max_abs(v);
  };
  CHECK(max_diff(ops::var(d), ops::var(x)) < var_tol(120, ops::var(x)));
  CHECK(max_diff(ops::var(d, {0, 2}, 0, true), ops::var(x, {0, 2}, 0, true)) <
        var_tol(24, ops::var(x, {0, 2}, 0, true)));
  CHECK(max_diff(ops::min(d, 1), ops::min(x, 1)) == 0);  // selections: bit for bit
  CHECK(max_diff(ops::argmin(d, 2, true), ops::argmin(x, 2, true)) == 0);
  CHECK(max_diff(ops::argmax(d, 0), ops::argmax(x, 0)) == 0);
  CHECK(max_diff(ops::argmax(d), ops::argmax(x)) == 0);
  CHECK(max_diff(ops::min(d), ops::min(x)) == 0);
  const Tensor g = rand_cpu({4, 6}, 20);
  // 2 g (x - mean) / (K - 1), K = 5: the mean to sum_tol(5, sum |x|) / 5 (times 2|g| / 4), and
  // ~4 roundings of the result on each side.
  const Tensor var_grad = ops::var_backward(g, x, {1});
  CHECK(max_diff(ops::var_backward(g.to(kCuda), d, {1}), var_grad) <
        sum_tol(5, max_abs(ops::sum(ops::abs(x), {1}))) / 5 * 2 * max_abs(g) / 4 +
            8 * kU * max_abs(var_grad));
  // g / 5, or g times the rounded 1 / 5: within u and 2u of the exact quotient, 3u apart.
  CHECK(max_rel_diff(ops::mean_backward(g.to(kCuda), x.shape(), {1}),
                     ops::mean_backward(g, x.shape(), {1})) <= 3 * kU);
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
  // Bit for bit: add_ with alpha is x + fl(a y) on both (ops/cpu/elementwise_binary.cpp,
  // cuda/kernels/elementwise.cu's AddF; FMA contraction off in the host compiler), mul_ and sub_
  // are single IEEE operations, and addcmul_'s (0.5 p) q on the CPU and 0.5 (p q) on the device
  // differ only by the exact scaling by 0.5.
  CHECK(max_diff(pd, pc) == 0);
  ops::zero_(pd);
  CHECK(max_diff(pd, zeros({4, 5})) == 0);
  Tensor strided = p.to(kCuda);
  ops::add_(strided.t(), 1.0);                      // non-contiguous in place
  CHECK(max_diff(strided, ops::add(p, 1.0)) == 0);  // one IEEE addition
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
  // Per step: logits are 6-term dot products (sum_tol: ~5u of |logit| <= 4 x 6), the loss a mean
  // of 16 rows of ~20 roundings (see cross entropy above), the gradient sums of 16 terms
  // |dlogit x| <= 4 / 16 (sum_tol(16, 4) = 1.9e-6); the weights move by 0.5 x that per step, so
  // three steps stay under 3 x 0.5 x 1.9e-6 + 2u |w| x 3 < 1e-5, the losses under 1e-5 relative.
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
  // Bit for bit: -g a / (b b), the same f32 formula in the same order on both (cuda/kernels/
  // elementwise.cu's DivOtherBackwardF, ops/cpu/elementwise_binary.cpp).
  CHECK(max_diff(ops::div_backward_other(gr.to(kCuda), da, db),
                 ops::div_backward_other(gr, a, b)) == 0);
  // Sums of 3 x 5 gradients each.
  CHECK(max_diff(ops::sum_to(gr.to(kCuda), {4, 1}), ops::sum_to(gr, {4, 1})) <
        sum_tol(15, max_abs(ops::sum_to(ops::abs(gr), {4, 1}))));
  CHECK_THROWS_WITH(ops::where(da, da, db), Catch::Contains("expected cond of dtype bool"));
}

TEST_CASE("cuda tensors: unary backward maps, pow and in-place sqrt/clamp/lerp match the CPU",
          "[ops_cuda]") {
  const Tensor x = rand_cpu({6, 7}, 40), g = rand_cpu({6, 7}, 41);
  const Tensor dx = x.to(kCuda), dg = g.to(kCuda);
  const Tensor y = ops::sigmoid(x), t = ops::tanh(x), sq = ops::sqrt(ops::abs(x));
  // Bit for bit where both evaluate the same f32 formula in the same order (cuda/kernels/
  // elementwise.cu's BackwardF against ops/cpu/elementwise_unary.cpp, FMA contraction off in the
  // host compiler): sigmoid g y (1 - y), tanh g (1 - y y), sqrt g / (y + y), rsqrt -0.5 g y y y;
  // and the selections (leaky_relu, clamp, abs).
  CHECK(max_diff(ops::sigmoid_backward(dg, y.to(kCuda)), ops::sigmoid_backward(g, y)) == 0);
  CHECK(max_diff(ops::tanh_backward(dg, t.to(kCuda)), ops::tanh_backward(g, t)) == 0);
  CHECK(max_diff(ops::leaky_relu_backward(dg, dx, 0.1), ops::leaky_relu_backward(g, x, 0.1)) == 0);
  // g (Phi(v) + v phi(v)): Phi through erfc (the CPU's Numerical Recipes fit, 1.2e-7 relative;
  // CUDA's erfcf 4 ulp = 4.8e-7), v phi(v) <= 0.25 through exp (~10u), the sum and the product by
  // g 2u each side: under 1.3e-6 |g|.
  CHECK(max_diff(ops::gelu_backward(dg, dx, GeluApproximate::none),
                 ops::gelu_backward(g, x, GeluApproximate::none)) < 1.3e-6 * max_abs(g));
  // The same formula but for 3c (rounded from double on the CPU, 3.f * c on the device: 1 ulp
  // apart) in dinner: 0.5 v (1 - t^2) dinner <= 1.2 for |v| <= 4, within 4u, times |g|.
  CHECK(max_diff(ops::gelu_backward(dg, dx, GeluApproximate::tanh),
                 ops::gelu_backward(g, x, GeluApproximate::tanh)) < 1.2 * 4 * kU * max_abs(g));
  CHECK(max_diff(ops::clamp_backward(dg, dx, -0.5, 0.5), ops::clamp_backward(g, x, -0.5, 0.5)) ==
        0);
  CHECK(max_diff(ops::abs_backward(dg, dx), ops::abs_backward(g, x)) == 0);
  CHECK(max_diff(ops::sqrt_backward(dg, sq.to(kCuda)), ops::sqrt_backward(g, sq)) == 0);
  CHECK(max_diff(ops::rsqrt_backward(dg, sq.to(kCuda)), ops::rsqrt_backward(g, sq)) == 0);
  for (double e : {2.0, 3.0, -1.0, 0.5, 1.5, 0.0}) {
    INFO("exponent " << e);
    const Tensor base = e == 0.5 || e == 1.5 ? ops::abs(x) : x;
    // x x, sqrt or powf on both (cuda/kernels/elementwise.cu's PowF): powf within 1 ulp in glibc,
    // 4 in CUDA, so under 5 ulp = 10u relative; g e x^(e - 1) rounds twice more on each side.
    CHECK(max_rel_diff(ops::pow(base.to(kCuda), e), ops::pow(base, e)) <= 10 * kU);
    CHECK(max_rel_diff(ops::pow_backward(dg, base.to(kCuda), e), ops::pow_backward(g, base, e)) <=
          14 * kU);
  }
  Tensor c1 = ops::abs(x), c2 = ops::abs(x).to(kCuda);
  ops::sqrt_(c1);
  ops::sqrt_(c2);
  CHECK(max_diff(c2, c1) == 0);  // sqrt is correctly rounded (IEEE): one result
  ops::clamp_(c1, 0.2, 0.9);
  ops::clamp_(c2, 0.2, 0.9);
  CHECK(max_diff(c2, c1) == 0);
  ops::lerp_(c1, x, 0.3);
  ops::lerp_(c2, dx, 0.3);
  CHECK(max_diff(c2, c1) == 0);  // x + w (e - x) on both, in that order
}

TEST_CASE("cuda tensors: arange and random creation on cuda give the CPU's values", "[ops_cuda]") {
  CHECK(max_diff(arange(0, 10, 3, {.device = kCuda}), arange(0, 10, 3)) == 0);
  Generator g1(5), g2(5);
  const Tensor a = randn({3, 7}, {.device = kCuda}, &g1), b = randn({3, 7}, {}, &g2);
  CHECK(a.device() == kCuda);
  CHECK(max_diff(a, b) == 0);  // drawn on the host from the same state, then copied
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
    // The device accumulates in f32 and rounds to the dtype, once (or twice: the bias added after
    // the GEMM): within 2 u_dtype |y| (u = 2^-11 for f16, 2^-8 for bf16) of its f32 sums, which
    // are within sum_tol of the CPU's (at most 9 products of values |x| <= 4: sum <= 144).
    const double u_low = dtype == DType::f16 ? 0x1p-11 : 0x1p-8;
    const auto tol_of = [&](const Tensor& want) {
      return 2 * u_low * max_abs(want) + sum_tol(9, 144);
    };
    // Operands representable in the dtype: the two sides multiply the same numbers.
    const Tensor a = rand_cpu({5, 9}, 50).to(dtype).to(DType::f32);
    const Tensor b = rand_cpu({9, 4}, 51).to(dtype).to(DType::f32);
    const Tensor h = [&](const Tensor& t) { return t.to(kCuda).to(dtype); }(a);
    const Tensor got = ops::matmul(h, b.to(kCuda).to(dtype));
    CHECK(got.dtype() == dtype);
    CHECK(max_diff(got, ops::matmul(a, b)) < tol_of(ops::matmul(a, b)));
    const Tensor w = rand_cpu({4, 9}, 52).to(dtype).to(DType::f32);
    const Tensor bias = rand_cpu({4}, 53).to(dtype).to(DType::f32);
    const auto dev = [&](const Tensor& t) { return t.to(kCuda).to(dtype); };
    CHECK(max_diff(ops::linear(dev(a), dev(w), dev(bias)), ops::linear(a, w, bias)) <
          tol_of(ops::linear(a, w, bias)));
    const Tensor go = rand_cpu({5, 4}, 54).to(dtype).to(DType::f32);
    const auto gw = ops::linear_backward(go, a, w, true, true, true);
    const auto gd = ops::linear_backward(dev(go), dev(a), dev(w), true, true, true);
    CHECK(gd.grad_weight.dtype() == dtype);
    CHECK(max_diff(gd.grad_input, gw.grad_input) < tol_of(gw.grad_input));
    CHECK(max_diff(gd.grad_weight, gw.grad_weight) < tol_of(gw.grad_weight));
    CHECK(max_diff(gd.grad_bias, gw.grad_bias) < tol_of(gw.grad_bias));
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
