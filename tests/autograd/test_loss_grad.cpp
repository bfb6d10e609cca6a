#include <catch2/catch.hpp>

#include "autograd/loss.h"
#include "autograd/reduce.h"
#include "autograd/softmax.h"
#include "stoke/stoke.h"

using namespace stoke;

namespace {

Tensor leaf(const Shape& shape) {
  Tensor x = randn(shape, {.dtype = DType::f64});
  x.set_requires_grad(true);
  return x;
}

Tensor targets(const std::vector<int64_t>& v) {
  return from_vector(v, {static_cast<int64_t>(v.size())}, {.dtype = DType::i64});
}

void require_gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                       const std::vector<Tensor>& inputs) {
  const auto r = autograd::gradcheck(f, inputs);
  INFO(r.worst);
  REQUIRE(r.ok);
}

}  // namespace

TEST_CASE("loss grad: cross_entropy reductions, smoothing, ignore_index", "[autograd][loss]") {
  const Tensor t = targets({0, 3, 2, 1, 3});
  const Tensor t_ignored = targets({0, -100, 2, 1, -100});
  const Tensor t_class = targets({0, 3, 2, 1, 2});
  const std::vector<CrossEntropyOptions> opts = {
      {},
      {.reduction = Reduction::sum},
      {.reduction = Reduction::none},
      {.label_smoothing = 0.1},
      {.reduction = Reduction::sum, .label_smoothing = 0.3},
  };
  for (size_t i = 0; i < opts.size(); ++i) {
    INFO("options " << i);
    require_gradcheck([&](const auto& v) { return cross_entropy(v[0], t, opts[i]); },
                      {leaf({5, 4})});
    require_gradcheck([&](const auto& v) { return cross_entropy(v[0], t_ignored, opts[i]); },
                      {leaf({5, 4})});
  }
  require_gradcheck(
      [&](const auto& v) {
        return cross_entropy(v[0], t_class, {.label_smoothing = 0.2, .ignore_index = 2});
      },
      {leaf({5, 4})});
  // Non-contiguous logits.
  Tensor xt = randn({4, 5}, {.dtype = DType::f64}).t();
  xt.set_requires_grad(true);
  require_gradcheck([&](const auto& v) { return cross_entropy(v[0], t); }, {xt});
}

TEST_CASE("loss grad: cross_entropy equals log_softmax + nll_loss", "[autograd][loss]") {
  const Tensor t = targets({1, 0, -100, 2});
  Tensor a = randn({4, 3}, {.dtype = DType::f64});
  a.set_requires_grad(true);
  Tensor b = a.detach().clone();
  b.set_requires_grad(true);
  const Tensor l1 = cross_entropy(a, t);
  const Tensor l2 = nll_loss(log_softmax(b, 1), t);
  CHECK(l1.item() == Approx(l2.item()).epsilon(1e-12));
  l1.backward();
  l2.backward();
  const auto ga = a.grad().to_vector<double>(), gb = b.grad().to_vector<double>();
  for (size_t i = 0; i < ga.size(); ++i) CHECK(ga[i] == Approx(gb[i]).margin(1e-12));
}

TEST_CASE("loss grad: nll_loss", "[autograd][loss]") {
  const Tensor t = targets({2, 0, 1, 2});
  for (Reduction r : {Reduction::mean, Reduction::sum, Reduction::none}) {
    require_gradcheck([&](const auto& v) { return nll_loss(v[0], t, {.reduction = r}); },
                      {leaf({4, 3})});
    require_gradcheck(
        [&](const auto& v) { return nll_loss(v[0], t, {.reduction = r, .ignore_index = 0}); },
        {leaf({4, 3})});
  }
  require_gradcheck([&](const auto& v) { return nll_loss(log_softmax(v[0], 1), t); },
                    {leaf({4, 3})});
}

TEST_CASE("loss grad: mse_loss w.r.t. input and target", "[autograd][loss]") {
  for (Reduction r : {Reduction::mean, Reduction::sum, Reduction::none}) {
    require_gradcheck([&](const auto& v) { return mse_loss(v[0], v[1], r); },
                      {leaf({3, 4}), leaf({3, 4})});
  }
  // Only the input requires grad; a non-contiguous target.
  const Tensor target = randn({4, 3}, {.dtype = DType::f64}).t();
  require_gradcheck([&](const auto& v) { return mse_loss(v[0], v[1]); }, {leaf({3, 4}), target});
  Tensor x = from_vector<double>({1, 2}, {2}, {.dtype = DType::f64});
  x.set_requires_grad(true);
  mse_loss(x, from_vector<double>({0, 0}, {2}, {.dtype = DType::f64})).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{1, 2});
}
