#include <catch2/catch.hpp>

#include <cmath>

#include "ops/loss.h"
#include "ops/reduce.h"
#include "ops/softmax.h"
#include "stoke/stoke.h"
#include "support/fixture.h"
#include "support/fixture_tensor.h"

using namespace stoke;
using stoke::testing::check_matches;
using stoke::testing::FixtureCase;
using stoke::testing::FixtureTensor;
using stoke::testing::to_tensor;

namespace {

ops::Reduction reduction_of(const std::string& s) {
  if (s == "none") return ops::Reduction::none;
  if (s == "sum") return ops::Reduction::sum;
  return ops::Reduction::mean;
}

}  // namespace

TEST_CASE("cross_entropy: matches PyTorch fixtures", "[ops][loss]") {
  const auto cases =
      stoke::testing::load_fixture(stoke::testing::fixture_path("cross_entropy.txt"));
  REQUIRE(cases.size() >= 9);
  for (const FixtureCase& c : cases) {
    INFO("case " << c.name);
    const Tensor logits = to_tensor(c.tensor("logits"));
    const Tensor target = to_tensor(c.tensor("target"));
    const ops::CrossEntropyOptions opt{.reduction = reduction_of(c.attr("reduction")),
                                       .label_smoothing = c.attr_double("label_smoothing"),
                                       .ignore_index = c.attr_int("ignore_index")};
    // Against torch's f64 results rounded to f32, within torch's f32 tolerance (check_matches'
    // default: assert_close's atol 1e-5, rtol 1.3e-6).
    const auto f = ops::cross_entropy_forward(logits, target, opt);
    check_matches(f.loss, c.tensor("loss"), "loss");
    const Tensor g = ops::cross_entropy_backward(scalar_tensor(1), logits, target, f.lse, opt);
    check_matches(g, c.tensor("grad_logits"), "grad_logits");
    // Exact: cross_entropy is cross_entropy_forward's loss.
    CHECK(ops::cross_entropy(logits, target, opt).item() == f.loss.item());
  }
}

TEST_CASE("cross_entropy: reduction none and consistency with log_softmax + nll", "[ops][loss]") {
  const Tensor x = randn({6, 5});
  const Tensor t = from_vector<int64_t>({0, 4, -100, 2, 3, 1}, {6}, {.dtype = DType::i64});
  const Tensor rows = ops::cross_entropy(x, t, {.reduction = ops::Reduction::none});
  CHECK(rows.shape() == Shape{6});
  const Tensor nll_rows =
      ops::nll_loss(ops::log_softmax(x, 1), t, {.reduction = ops::Reduction::none});
  // Two paths (the fused cross entropy, log_softmax then nll): each row's loss (< 5 here) comes
  // from max, 5 exps (3 ulp each), their f32 sum, a log and a difference: ~10 roundings of values
  // < 5 per path, 2 * 10 u * 5 = 6e-6 apart at most: 1e-5.
  const auto a = rows.to_vector<float>(), b = nll_rows.to_vector<float>();
  for (size_t i = 0; i < a.size(); ++i) CHECK(std::abs(a[i] - b[i]) < 1e-5);
  CHECK(a[2] == 0);  // exact: an ignored row contributes 0
  // mean divides by the 5 counted rows: the row losses' 6e-6 (above) plus the sum's 5 roundings
  // of values < 25: 1e-5 for the mean, 1e-4 for the sum (< 25: 5 * 6e-6 + 5 u * 25).
  double s = 0;
  for (float v : a) s += v;
  CHECK(std::abs(ops::cross_entropy(x, t).item() - s / 5) < 1e-5);
  CHECK(std::abs(ops::nll_loss(ops::log_softmax(x, 1), t).item() - s / 5) < 1e-5);
  CHECK(std::abs(ops::cross_entropy(x, t, {.reduction = ops::Reduction::sum}).item() - s) < 1e-4);
  // Every row ignored: mean is NaN (0 / 0), like PyTorch.
  const Tensor all_ignored = full({6}, -100, {.dtype = DType::i64});
  CHECK(std::isnan(ops::cross_entropy(x, all_ignored).item()));
}

TEST_CASE("nll_loss and mse_loss values", "[ops][loss]") {
  const Tensor lp = from_vector<float>({-1, -2, -3, -0.5f, -0.25f, -4}, {2, 3});
  const Tensor t = from_vector<int64_t>({2, 0}, {2}, {.dtype = DType::i64});
  // Exact: sums and means of small binary fractions (3 + 0.5 = 3.5, / 2 = 1.75).
  CHECK(ops::nll_loss(lp, t).item() == 1.75);
  CHECK(ops::nll_loss(lp, t, {.reduction = ops::Reduction::sum}).item() == 3.5);
  CHECK(ops::nll_loss(lp, t, {.ignore_index = 0}).item() == 3.0);
  // Non-contiguous log_probs.
  CHECK(ops::nll_loss(lp.t().contiguous().t(), t).item() == 1.75);
  const Tensor gx = ops::nll_loss_backward(scalar_tensor(1), {2, 3}, t);
  CHECK(gx.to_vector<float>() == std::vector<float>{0, 0, -0.5f, -0.5f, 0, 0});

  const Tensor a = from_vector<float>({1, 2, 3, 4}, {2, 2});
  const Tensor b = from_vector<float>({1, 0, 5, 4}, {2, 2});
  // Exact: small integers.
  CHECK(ops::mse_loss(a, b).item() == 2.0);
  CHECK(ops::mse_loss(a, b, ops::Reduction::sum).item() == 8.0);
  CHECK(ops::mse_loss(a, b, ops::Reduction::none).to_vector<float>() ==
        std::vector<float>{0, 4, 4, 0});
  CHECK(ops::mse_loss_backward(scalar_tensor(1), a, b).to_vector<float>() ==
        std::vector<float>{0, 1, -1, 0});
}

TEST_CASE("losses: errors name the op, the row and the value", "[ops][loss]") {
  const Tensor x = randn({4, 10});
  const Tensor bad = from_vector<int64_t>({1, 2, 3, 12}, {4}, {.dtype = DType::i64});
  CHECK_THROWS_WITH(ops::cross_entropy(x, bad),
                    Catch::Contains("cross_entropy") &&
                        Catch::Contains("target 12 out of range for 10 classes at row 3"));
  const Tensor neg = from_vector<int64_t>({1, -1, 3, 2}, {4}, {.dtype = DType::i64});
  CHECK_THROWS_WITH(ops::nll_loss(x, neg),
                    Catch::Contains("target -1 out of range for 10 classes at row 1"));
  CHECK_THROWS_WITH(ops::cross_entropy(x, neg.to(DType::i32)), Catch::Contains("i64"));
  CHECK_THROWS_WITH(ops::cross_entropy(x, neg.narrow(0, 0, 3)),
                    Catch::Contains("expected target of shape [4]") && Catch::Contains("[3]"));
  CHECK_THROWS_WITH(ops::cross_entropy(randn({2, 3, 4}), neg),
                    Catch::Contains("(N, C, d1, ...)") && Catch::Contains("[2, 4]"));
  CHECK_THROWS_WITH(ops::cross_entropy_forward(randn({2, 3, 4}), neg.narrow(0, 0, 2)),
                    Catch::Contains("(N, C)"));
  CHECK_THROWS_WITH(ops::mse_loss(randn({2, 3}), randn({3, 2})),
                    Catch::Contains("mse_loss") && Catch::Contains("input [2, 3]") &&
                        Catch::Contains("target [3, 2]"));
  CHECK_THROWS_WITH(ops::mse_loss(randn({2, 3}), randn({2, 3}, {.dtype = DType::f64})),
                    Catch::Contains("f32") && Catch::Contains("f64"));
  CHECK_THROWS_WITH(ops::softmax(x, 2),
                    Catch::Contains("softmax") && Catch::Contains("out of range"));
  CHECK_THROWS_WITH(ops::softmax(arange(0, 3, 1, {.dtype = DType::i64}), 0),
                    Catch::Contains("f32 or f64"));
}
