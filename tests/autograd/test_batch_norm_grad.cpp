#include <catch2/catch.hpp>

#include "autograd/batch_norm.h"
#include "autograd/dropout.h"
#include "stoke/stoke.h"

using namespace stoke;

namespace {

Tensor leaf(const Shape& shape) {
  return randn(shape, {.dtype = DType::f64}).set_requires_grad(true);
}

void require_gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                       const std::vector<Tensor>& inputs) {
  const auto r = autograd::gradcheck(f, inputs);
  INFO(r.worst);
  REQUIRE(r.ok);
  REQUIRE(r.checked > 0);
}

}  // namespace

TEST_CASE("norm grad: batch_norm training gradcheck, 2-D to 5-D, with and without affine",
          "[autograd][batch_norm]") {
  for (const Shape& shape :
       {Shape{6, 3}, Shape{3, 2, 5}, Shape{2, 3, 3, 4}, Shape{2, 2, 2, 3, 2}}) {
    INFO("shape " << shape);
    const int64_t C = shape[1];
    const Tensor rm = zeros({C}, {.dtype = DType::f64}), rv = ones({C}, {.dtype = DType::f64});
    require_gradcheck(
        [&](const std::vector<Tensor>& in) { return batch_norm(in[0], rm, rv, in[1], in[2]); },
        {leaf(shape), leaf({C}), leaf({C})});
    require_gradcheck(
        [&](const std::vector<Tensor>& in) {
          return batch_norm(in[0], Tensor(), Tensor(), Tensor(), Tensor(), {.eps = 1e-3});
        },
        {leaf(shape)});
  }
  // Weight only, and a non-contiguous input.
  require_gradcheck(
      [](const std::vector<Tensor>& in) {
        return batch_norm(in[0].transpose(0, 2), Tensor(), Tensor(), in[1], Tensor());
      },
      {leaf({4, 3, 5}), leaf({3})});
}

TEST_CASE("norm grad: batch_norm eval gradcheck (statistics are constants)",
          "[autograd][batch_norm]") {
  const Tensor rm = randn({3}, {.dtype = DType::f64});
  const Tensor rv = rand({3}, {.dtype = DType::f64});
  fill_(rv.narrow(0, 0, 1), 0.7);
  require_gradcheck(
      [&](const std::vector<Tensor>& in) {
        return batch_norm(in[0], rm, rv, in[1], in[2], {.training = false});
      },
      {leaf({4, 3, 2, 2}), leaf({3}), leaf({3})});
  require_gradcheck(
      [&](const std::vector<Tensor>& in) {
        return batch_norm(in[0], rm, rv, Tensor(), in[1], {.training = false});
      },
      {leaf({5, 3}), leaf({3})});
}

TEST_CASE("norm grad: batch_norm updates running stats without recording them",
          "[autograd][batch_norm]") {
  const Tensor rm = zeros({2}), rv = ones({2});
  const Tensor x = randn({4, 2, 3}).set_requires_grad(true);
  const Tensor w = ones({2}).set_requires_grad(true), b = zeros({2}).set_requires_grad(true);
  const Tensor y = batch_norm(x, rm, rv, w, b);
  CHECK(y.requires_grad());
  CHECK_FALSE(rm.requires_grad());
  CHECK(rm.to_vector<float>() != std::vector<float>{0, 0});
  y.backward(ones(y.shape()));
  // Sum of a normalized output does not depend on x; its bias gradient is the count (exact: 12
  // ones). The input gradient is k1 + k3 + k2 (x - mean) with k1 + k3 = w is - w is = 0 exactly,
  // and k2 = -w is^3 sum(x - mean) / 12, the sum (in f64) nonzero only through the mean's rounding
  // to f32 (12 u |mean|): |g| <= is^3 u |mean| |x - mean| < 8 * 6e-8 * 1 * 3 = 1.4e-6 for is < 2,
  // |mean| < 1, |x - mean| < 3: 1e-5.
  for (float g : x.grad().to_vector<float>()) CHECK(g == Approx(0).margin(1e-5));
  CHECK(b.grad().to_vector<float>() == std::vector<float>{12, 12});
  CHECK(w.grad().shape() == Shape{2});
}

TEST_CASE("norm grad: dropout gradcheck with a fixed mask", "[autograd][dropout]") {
  Generator gen;
  for (double p : {0.2, 0.5, 1.0}) {
    INFO("p " << p);
    require_gradcheck(
        [&](const std::vector<Tensor>& in) {
          gen.manual_seed(42);  // every evaluation draws the same mask
          return dropout(in[0], p, true, &gen);
        },
        {leaf({4, 5, 3})});
  }
  require_gradcheck(
      [&](const std::vector<Tensor>& in) {
        gen.manual_seed(1);
        return dropout(in[0].transpose(0, 1), 0.3, true, &gen);
      },
      {leaf({6, 7})});
  // Evaluation mode is the identity, gradient included.
  const Tensor x = leaf({3, 3});
  CHECK(dropout(x, 0.5, false).is_same(x));
}

TEST_CASE("norm grad: dropout backward uses the forward's mask", "[autograd][dropout]") {
  Generator gen(11);
  const Tensor x = ones({50, 40}).set_requires_grad(true);
  const Tensor y = dropout(x, 0.5, true, &gen);
  y.backward(ones(y.shape()));
  const auto yv = y.to_vector<float>(), gv = x.grad().to_vector<float>();
  for (size_t i = 0; i < yv.size(); ++i) REQUIRE(gv[i] == yv[i]);  // both 0 or 2
}

TEST_CASE("norm grad: batch_norm with the fused ReLU, gradcheck and the unfused chain's gradients",
          "[autograd][batch_norm][relu]") {
  const int64_t C = 3;
  const Tensor rm = zeros({C}, {.dtype = DType::f64}), rv = ones({C}, {.dtype = DType::f64});
  for (bool training : {true, false}) {
    INFO("training " << training);
    require_gradcheck(
        [&](const std::vector<Tensor>& in) {
          return batch_norm(in[0], rm, rv, in[1], in[2], {.training = training, .relu = true});
        },
        {leaf({4, C, 3, 2}), leaf({C}), leaf({C})});
  }
  // The node is one (BatchNormReluBackward) and its gradients are relu(batch_norm)'s.
  const Tensor x = leaf({5, C, 4}), w = leaf({C}), b = leaf({C});
  const Tensor fused = batch_norm(x, Tensor(), Tensor(), w, b, {.relu = true});
  REQUIRE(fused.grad_fn());
  CHECK(fused.grad_fn()->name() == "BatchNormReluBackward");
  const Tensor g = randn({5, C, 4}, {.dtype = DType::f64});
  fused.backward(g);
  const std::vector<double> gx = x.grad().to_vector<double>(), gw = w.grad().to_vector<double>();
  x.set_grad(Tensor());
  w.set_grad(Tensor());
  relu(batch_norm(x, Tensor(), Tensor(), w, b)).backward(g);
  const auto rx = x.grad().to_vector<double>(), rw = w.grad().to_vector<double>();
  REQUIRE(rx.size() == gx.size());
  // Exact: the fused backward is the unfused chain's arithmetic with ReLU's mask as a select in
  // the sums' loads (tests/ops/test_batch_norm.cpp checks the ops the same way).
  CHECK(gx == rx);
  CHECK(gw == rw);
}
