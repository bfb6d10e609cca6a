// Gradchecks (f64) of group_norm and layer_norm through autograd, with and without affine
// parameters, and through permutes (layer norm over the channels of NCHW).
#include <catch2/catch.hpp>

#include "autograd/group_norm.h"
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

TEST_CASE("norm grad: group_norm gradcheck, 2-D to 5-D, with and without affine",
          "[autograd][group_norm]") {
  struct Case {
    Shape shape;
    int64_t groups;
  };
  for (const Case& c : {Case{{3, 4}, 2}, Case{{2, 6, 5}, 3}, Case{{2, 4, 3, 3}, 1},
                        Case{{2, 4, 2, 3}, 4}, Case{{1, 2, 2, 3, 2}, 2}}) {
    INFO("shape " << c.shape << " groups " << c.groups);
    const int64_t C = c.shape[1];
    require_gradcheck(
        [&](const std::vector<Tensor>& in) { return group_norm(in[0], c.groups, in[1], in[2]); },
        {leaf(c.shape), leaf({C}), leaf({C})});
    require_gradcheck(
        [&](const std::vector<Tensor>& in) {
          return group_norm(in[0], c.groups, Tensor(), Tensor(), {.eps = 1e-3});
        },
        {leaf(c.shape)});
  }
}

TEST_CASE("norm grad: layer_norm gradcheck over one and several trailing dims",
          "[autograd][group_norm]") {
  struct Case {
    Shape shape, normalized;
  };
  for (const Case& c : {Case{{4, 5}, {5}}, Case{{2, 3, 4}, {4}}, Case{{2, 3, 4}, {3, 4}},
                        Case{{6}, {6}}, Case{{2, 2, 3, 2}, {3, 2}}}) {
    INFO("shape " << c.shape << " over " << c.normalized);
    require_gradcheck(
        [&](const std::vector<Tensor>& in) {
          return layer_norm(in[0], c.normalized, in[1], in[2]);
        },
        {leaf(c.shape), leaf(c.normalized), leaf(c.normalized)});
    require_gradcheck(
        [&](const std::vector<Tensor>& in) { return layer_norm(in[0], c.normalized); },
        {leaf(c.shape)});
  }
  // Weight only (no bias), and LayerNorm over channels of NCHW through permutes (ConvNeXt's).
  require_gradcheck([&](const std::vector<Tensor>& in) { return layer_norm(in[0], {3}, in[1]); },
                    {leaf({2, 4, 3}), leaf({3})});
  require_gradcheck(
      [&](const std::vector<Tensor>& in) {
        return layer_norm(in[0].permute({0, 2, 3, 1}), {3}, in[1], in[2]).permute({0, 3, 1, 2});
      },
      {leaf({2, 3, 2, 2}), leaf({3}), leaf({3})});
}
