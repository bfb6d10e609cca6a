// Index ops and the remaining losses on "cuda" tensors (emulated) against the CPU: cat, stack,
// index_select, embedding, gather and their backward, one_hot, the backward of max/min, nll and
// mse losses, out-of-range indices reported with the CPU's message at the next synchronization.
#include <catch2/catch.hpp>

#include <functional>

#include "cuda/runtime/deferred_checks.h"
#include "cuda/runtime/stream.h"
#include "ops_cuda_util.h"

using namespace stoke;
using namespace stoke::test;

namespace {

Tensor indices(const Shape& shape, int64_t bound, uint64_t seed) {
  Generator g(seed);
  return randint(0, bound, shape, {.dtype = DType::i64}, &g);
}

}  // namespace

TEST_CASE("cuda ops: cat, stack, index_select, embedding and gather match the CPU",
          "[ops_cuda_index]") {
  const Tensor a = rand_cpu({2, 3, 4}, 1), b = rand_cpu({2, 5, 4}, 2);
  CHECK(max_diff(ops::cat({a.to(kCuda), b.to(kCuda)}, 1), ops::cat({a, b}, 1)) == 0);
  CHECK(ops::cat({a.to(kCuda), b.to(kCuda)}, 1).device() == kCuda);
  CHECK(max_diff(ops::stack({a.to(kCuda), a.to(kCuda)}, 3), ops::stack({a, a}, 3)) == 0);
  CHECK_THROWS_WITH(ops::cat({a.to(kCuda), b}, 1), Catch::Contains("same device"));

  const Tensor idx = indices({7}, 5, 3);  // repeated indices: the backward accumulates
  CHECK(max_diff(ops::index_select(b.to(kCuda), 1, idx.to(kCuda)), ops::index_select(b, 1, idx)) ==
        0);
  const Tensor gs = rand_cpu({2, 7, 4}, 4);
  // The backward sums the gradients of repeated indices (at most 7) in other orders: sum_tol,
  // with the sums of |g| from the same backward on |g| in f64.
  const auto abs64 = [](const Tensor& t) { return ops::abs(t).to(DType::f64); };
  CHECK(max_diff(ops::index_select_backward(gs.to(kCuda), 1, idx.to(kCuda), b.shape()),
                 ops::index_select_backward(gs, 1, idx, b.shape())) <
        sum_tol(7, max_abs(ops::index_select_backward(abs64(gs), 1, idx, b.shape()))));

  const Tensor table = rand_cpu({10, 6}, 5), ids = indices({3, 4}, 10, 6);
  CHECK(max_diff(ops::embedding(table.to(kCuda), ids.to(kCuda)), ops::embedding(table, ids)) == 0);
  const Tensor ge = rand_cpu({3, 4, 6}, 7);
  CHECK(max_diff(ops::embedding_backward(ge.to(kCuda), ids.to(kCuda), 10),
                 ops::embedding_backward(ge, ids, 10)) <
        sum_tol(12, max_abs(ops::embedding_backward(abs64(ge), ids, 10))));  // <= 12 repeats

  const Tensor x = rand_cpu({4, 6}, 8), gi = indices({4, 3}, 6, 9);
  CHECK(max_diff(ops::gather(x.to(kCuda), 1, gi.to(kCuda)), ops::gather(x, 1, gi)) == 0);
  const Tensor gg = rand_cpu({4, 3}, 10);
  CHECK(max_diff(ops::gather_backward(gg.to(kCuda), 1, gi.to(kCuda), x.shape()),
                 ops::gather_backward(gg, 1, gi, x.shape())) <
        sum_tol(3, max_abs(ops::gather_backward(abs64(gg), 1, gi, x.shape()))));  // <= 3 a row

  const Tensor labels = indices({6}, 4, 11);
  CHECK(max_diff(ops::one_hot(labels.to(kCuda), 4), ops::one_hot(labels, 4)) == 0);
  CHECK(max_diff(ops::one_hot(labels.to(kCuda)), ops::one_hot(labels)) == 0);
}

TEST_CASE("cuda ops: an out-of-range index fails like on the CPU", "[ops_cuda_index]") {
  const Tensor x = rand_cpu({3, 4}, 1);
  const Tensor bad = from_vector<int64_t>({0, 2, 7, 1}, {4}, {.dtype = DType::i64});
  // On cuda the range check is read at the next synchronization (the read-back here).
  const auto sync = [](const Tensor& t) { return t.to(Device::cpu()); };
  for (Device dev : {Device::cpu(), kCuda}) {
    INFO(dev);
    CHECK_THROWS_WITH(sync(ops::index_select(x.to(dev), 1, bad.to(dev))),
                      Catch::Contains("stoke::index_select: index 7 at position [2]") &&
                          Catch::Contains("of size 4"));
    CHECK_THROWS_WITH(sync(ops::embedding(x.to(dev), bad.to(dev))),
                      Catch::Contains("stoke::embedding: index 7"));
    CHECK_THROWS_WITH(sync(ops::nll_loss(x.to(dev).narrow(0, 0, 3).t().contiguous(), bad.to(dev))),
                      Catch::Contains("target 7 out of range for 3 classes at row 2"));
  }
}

TEST_CASE("cuda ops: range checks are read at the next synchronization, not per call",
          "[ops_cuda_index]") {
  const Tensor x = rand_cpu({3, 4}, 1).to(kCuda);
  const Tensor good = from_vector<int64_t>({0, 2, 3, 1}, {4}, {.dtype = DType::i64}).to(kCuda);
  const Tensor bad = from_vector<int64_t>({0, 2, 7, 1}, {4}, {.dtype = DType::i64}).to(kCuda);
  REQUIRE(cuda::pending_deferred_checks() == 0);
  // Good indices: two calls, no read-back until the result is read.
  Tensor a = ops::index_select(x, 1, good);
  Tensor b = ops::index_select(x, 1, good);
  CHECK(cuda::pending_deferred_checks() == 2);
  CHECK(max_diff(a, b) == 0);  // reads both back: the checks pass and are cleared
  CHECK(cuda::pending_deferred_checks() == 0);
  // A bad index: the call returns, the kernel skipped the bad column (zeros there), and the next
  // synchronization raises the op's error once.
  Tensor c;
  REQUIRE_NOTHROW(c = ops::index_select(x, 1, bad));
  CHECK(cuda::pending_deferred_checks() == 1);
  CHECK_THROWS_WITH(cuda::Stream().synchronize(),
                    Catch::Contains("stoke::index_select: index 7 at position [2]") &&
                        Catch::Contains("found at the next synchronization"));
  CHECK(cuda::pending_deferred_checks() == 0);
  const std::vector<float> got = c.to(Device::cpu()).to_vector<float>();
  CHECK(got[2] == 0.f);
  CHECK(got[6] == 0.f);
  // Cross entropy's target check likewise; the loss of the other rows is computed.
  const Tensor logits = rand_cpu({3, 5}, 2).to(kCuda);
  const Tensor t = from_vector<int64_t>({1, 9, 0}, {3}, {.dtype = DType::i64}).to(kCuda);
  Tensor loss;
  REQUIRE_NOTHROW(loss = ops::cross_entropy(logits, t, {.reduction = Reduction::none}));
  CHECK_THROWS_WITH(loss.to(Device::cpu()),
                    Catch::Contains("stoke::cross_entropy: target 9 of row 1 is out of range for 5 "
                                    "classes"));
  // A loop that never synchronizes still sees its errors: the list is bounded.
  for (int i = 0; i < 256; ++i) ops::index_select(x, 1, good);
  CHECK(cuda::pending_deferred_checks() == 256);
  ops::index_select(x, 1, good);  // the 257th reads them all
  CHECK(cuda::pending_deferred_checks() == 0);
}

TEST_CASE("cuda ops: max/min backward, nll and mse losses match the CPU", "[ops_cuda_index]") {
  const Tensor x = rand_cpu({5, 7}, 20);
  const Tensor dx = x.to(kCuda);
  const auto want = ops::max_with_indices(x, 1, false);
  const auto got = ops::max_with_indices(dx, 1, false);
  const Tensor g = rand_cpu({5}, 21);
  CHECK(max_diff(ops::index_reduce_backward(g.to(kCuda), got.indices, x.shape(), 1, false),
                 ops::index_reduce_backward(g, want.indices, x.shape(), 1, false)) == 0);
  const auto all = ops::max_all_with_index(dx);
  CHECK(max_diff(ops::flat_index_backward(rand_cpu({}, 22).to(kCuda), all.indices, x.shape()),
                 ops::flat_index_backward(rand_cpu({}, 22), ops::max_all_with_index(x).indices,
                                          x.shape())) == 0);

  const Tensor logp = ops::log_softmax(x, 1);
  Tensor target = indices({5}, 7, 23);
  target.narrow(0, 1, 1).copy_(
      from_vector<int64_t>({-100}, {1}, {.dtype = DType::i64}));  // an ignored row
  for (Reduction r : {Reduction::none, Reduction::sum, Reduction::mean}) {
    INFO(static_cast<int>(r));
    const NllLossOptions o{.reduction = r};
    const Tensor lw = ops::nll_loss(logp, target, o);
    // Per row a selection (-logp[target]); sum and mean add 4 rows in other orders (sum_tol) and
    // mean divides once more (2u |mean|).
    const double rows =
        max_abs(ops::sum(ops::abs(ops::nll_loss(logp, target, {.reduction = Reduction::none}))));
    CHECK(max_diff(ops::nll_loss(logp.to(kCuda), target.to(kCuda), o), lw) <=
          sum_tol(5, rows) + 2 * kU * max_abs(lw));
    const Tensor gl = r == Reduction::none ? rand_cpu({5}, 24) : rand_cpu({}, 24);
    // -g, or -g / 4 (a quotient or a product by the rounded 1 / 4, exact either way): at most
    // one rounding of each result on either side.
    const Tensor gw = ops::nll_loss_backward(gl, x.shape(), target, o);
    CHECK(max_diff(ops::nll_loss_backward(gl.to(kCuda), x.shape(), target.to(kCuda), o), gw) <=
          2 * kU * max_abs(gw));
    const Tensor y = rand_cpu({5, 7}, 25);
    // (x - y)^2 per element (two roundings), summed over 35 for sum and mean (sum_tol), mean's
    // division one more rounding.
    const Tensor sq = ops::mse_loss(x, y, Reduction::none);
    const Tensor mw = ops::mse_loss(x, y, r);
    CHECK(max_diff(ops::mse_loss(dx, y.to(kCuda), r), mw) <=
          sum_tol(35, max_abs(ops::sum(sq))) + 6 * kU * max_abs(mw));
    const Tensor gm = r == Reduction::none ? rand_cpu({5, 7}, 26) : rand_cpu({}, 26);
    // 2 (x - y) g (/ 35): about four roundings of each result on either side.
    const Tensor mgw = ops::mse_loss_backward(gm, x, y, r);
    CHECK(max_diff(ops::mse_loss_backward(gm.to(kCuda), dx, y.to(kCuda), r), mgw) <=
          8 * kU * max_abs(mgw));
  }
}

TEST_CASE("cuda ops: autograd through max, gather, index_select and the losses matches the CPU",
          "[ops_cuda_index]") {
  const Tensor x0 = rand_cpu({4, 6}, 30), y0 = rand_cpu({4, 6}, 31);
  const Tensor idx = indices({5}, 6, 32), gi = indices({4, 2}, 6, 33), t = indices({4}, 6, 34);
  auto run = [&](Device dev) {
    Tensor x = x0.to(dev).detach();
    x.set_requires_grad(true);
    const Tensor h = stoke::mul(x, 2.0);
    Tensor loss =
        stoke::add(stoke::sum(stoke::max(h, 1)), stoke::sum(stoke::gather(h, 1, gi.to(dev))));
    loss = stoke::add(loss, stoke::sum(stoke::index_select(h, 1, idx.to(dev))));
    loss = stoke::add(loss, nll_loss(log_softmax(h, 1), t.to(dev)));
    loss = stoke::add(loss, mse_loss(h, y0.to(dev)));
    loss.backward();
    return x.grad();
  };
  // Each gradient element sums at most five contributions (max, gather, index_select, nll,
  // mse), of |.| <= 2, 4, 4, 0.5 and 2 (2 (|h| + |y|) / 24 for mse): sum_tol(5, 12.5) = 3.3e-6,
  // plus the log_softmax and mse backward's own few u.
  CHECK(max_diff(run(kCuda), run(Device::cpu())) < 1e-5);
}

TEST_CASE("cuda ops: pad and interpolate through autograd match the CPU", "[ops_cuda]") {
  const Tensor x0 = rand_cpu({2, 3, 5, 4}, 71);
  const std::vector<std::pair<const char*, std::function<Tensor(const Tensor&)>>> fns = {
      {"reflect",
       [](const Tensor& t) {
         return pad(t, {2, 1, 3, 2}, {.mode = PadMode::reflect});
       }},
      {"replicate",
       [](const Tensor& t) {
         return pad(t, {1, 3}, {.mode = PadMode::replicate});
       }},
      {"constant",
       [](const Tensor& t) {
         return pad(t, {-1, 2, 1, 1}, {.value = 0.5});
       }},
      {"nearest",
       [](const Tensor& t) {
         return interpolate(t, {.size = {9, 7}});
       }},
      {"bilinear",
       [](const Tensor& t) {
         return interpolate(t, {.scale_factor = {2, 1.5}, .mode = InterpolateMode::bilinear});
       }},
  };
  for (const auto& [name, fn] : fns) {
    INFO(name);
    const auto& f = fn;  // clang 14 cannot capture a structured binding
    auto run = [&](Device dev) {
      Tensor x = x0.to(dev).detach();
      x.set_requires_grad(true);
      const Tensor y = f(x);
      stoke::sum(stoke::mul(y, y)).backward();
      return std::vector<Tensor>{y, x.grad()};
    };
    const auto want = run(Device::cpu());
    const auto got = run(kCuda);
    CHECK(got[0].device() == kCuda);
    // pad and nearest copy values (bit for bit); bilinear blends 4 values |x| <= 4 with weights
    // (~8 roundings each side): 2 x 8u x 4 = 3.8e-6.
    CHECK(max_diff(got[0], want[0]) < 64 * kU);
    // The backward of sum(y^2) scatters 2 y w back: an input element gathers up to 9 bilinear
    // contributions (scale 2 x 1.5; weights summing to 3) of |2 y| <= 8: sum_tol(9, 24) = 8.6e-6,
    // plus the forward's difference times 2 x 3.
    CHECK(max_diff(got[1], want[1]) < sum_tol(9, 24) + 6 * 64 * kU);
  }
}
