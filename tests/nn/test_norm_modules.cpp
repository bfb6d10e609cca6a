// nn::GroupNorm and nn::LayerNorm: torch's parameter names and defaults, the forward equals the
// functional op with the module's parameters in training and evaluation alike (no running
// statistics), gradients reach the parameters, and bad construction is refused. Also the ReLU
// observer (autograd/elementwise_relu_observer.h), which sees batch norm's fused ReLU.
#include <catch2/catch.hpp>

#include <vector>

#include "autograd/elementwise_relu_observer.h"
#include "nn/layers.h"
#include "stoke/stoke.h"
#include "support/fixture_tensor.h"

using namespace stoke;
using stoke::testing::max_abs_diff;

TEST_CASE("nn::GroupNorm: parameters weight / bias, forward and gradients", "[nn][group_norm]") {
  nn::GroupNorm gn(2, 6, {.eps = 1e-3});
  const auto params = gn.named_parameters();
  REQUIRE(params.size() == 2);
  CHECK(params[0].first == "weight");
  CHECK(params[1].first == "bias");
  CHECK(max_abs_diff(gn.weight, ones({6})) == 0);
  CHECK(max_abs_diff(gn.bias, zeros({6})) == 0);
  CHECK(gn.named_buffers().empty());
  {
    NoGradGuard g;
    gn.weight.copy_(randn({6}));
    gn.bias.copy_(randn({6}));
  }
  const Tensor x = randn({3, 6, 4, 2});
  const Tensor ref = ops::group_norm(x, 2, gn.weight.detach(), gn.bias.detach(), {.eps = 1e-3});
  // Bit for bit: the module's forward is stoke::group_norm, whose forward is the same
  // ops::group_norm_forward on the same values (a rerun); the op itself is checked against torch
  // in tests/ops.
  CHECK(max_abs_diff(gn.forward(x), ref) == 0);
  gn.eval();
  CHECK(max_abs_diff(gn.forward(x), ref) == 0);
  gn.train();
  stoke::sum(gn.forward(x)).backward();
  REQUIRE(gn.bias.grad().defined());
  // Exact: the bias gradient is the sum of 24 ones (sum's gradient), an integer f32 holds.
  CHECK(max_abs_diff(gn.bias.grad(), full({6}, 3 * 4 * 2)) == 0);
  CHECK_THROWS_WITH(nn::GroupNorm(4, 6), Catch::Contains("nn::GroupNorm") &&
                                             Catch::Contains("num_groups 4") &&
                                             Catch::Contains("num_channels 6"));
  nn::GroupNorm plain(3, 6, {.affine = false});
  CHECK(plain.named_parameters().empty());
  CHECK(max_abs_diff(plain.forward(x), ops::group_norm(x, 3)) == 0);  // the same op, as above
}

TEST_CASE("nn::LayerNorm: parameters of normalized_shape, forward and gradients",
          "[nn][group_norm]") {
  nn::LayerNorm ln({3, 4});
  const auto params = ln.named_parameters();
  REQUIRE(params.size() == 2);
  CHECK(params[0].first == "weight");
  CHECK(params[1].first == "bias");
  CHECK(ln.weight.shape() == Shape{3, 4});
  {
    NoGradGuard g;
    ln.weight.copy_(randn({3, 4}));
  }
  const Tensor x = randn({2, 5, 3, 4});
  // The same op on the same values, as for GroupNorm.
  CHECK(max_abs_diff(ln.forward(x),
                     ops::layer_norm(x, {3, 4}, ln.weight.detach(), ln.bias.detach())) == 0);
  stoke::sum(ln.forward(x)).backward();
  REQUIRE(ln.weight.grad().defined());
  CHECK(ln.weight.grad().shape() == Shape{3, 4});
  CHECK(max_abs_diff(ln.bias.grad(), full({3, 4}, 10)) == 0);  // a sum of 10 ones: exact
  nn::LayerNorm plain({4}, {.elementwise_affine = false});
  CHECK(plain.named_parameters().empty());
  CHECK_THROWS_WITH(plain.forward(randn({2, 3})), Catch::Contains("normalized_shape [4]"));
}

TEST_CASE("relu observer: every ReLU output, batch norm's fused one included, in call order",
          "[nn][relu_observer]") {
  nn::BatchNorm2d bn(3);
  const Tensor x = randn({2, 3, 4, 4});
  std::vector<Tensor> seen;
  set_relu_observer([&](const Tensor& y) { seen.push_back(y); });
  const Tensor a = relu(x);
  const Tensor b = bn.forward_relu(x);
  const Tensor c = bn.forward(x);  // no ReLU: not reported
  set_relu_observer({});
  const Tensor d = relu(x);  // removed: not reported
  REQUIRE(seen.size() == 2);
  // The observer is handed the very outputs (same storage), not copies.
  CHECK(seen[0].data<float>() == a.data<float>());
  CHECK(seen[1].data<float>() == b.data<float>());
  (void)c;
  (void)d;
}
