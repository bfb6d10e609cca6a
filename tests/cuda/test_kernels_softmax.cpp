// cuda/kernels/softmax.cu and loss_cross_entropy.cu in cuda/emu against ops::softmax/log_softmax
// (+ backward) and ops::cross_entropy_forward/backward: softmax_rows_kernel and
// softmax_backward_rows_kernel (warp per row, block per row), softmax_cols_kernel and
// softmax_backward_cols_kernel (a non-last dim), and the fused cross entropy
// (cross_entropy_count_kernel, cross_entropy_fused_kernel, cross_entropy_reduce_kernel).
#include <catch2/catch.hpp>

#include <cmath>

#include "cuda/kernels/loss_cross_entropy.h"
#include "cuda/kernels/softmax.h"
#include "ops/creation.h"
#include "ops/loss.h"
#include "ops/softmax.h"
#include "test_kernels_util.h"

using namespace stoke;
namespace kt = stoke::kernels_test;

namespace {

const DType kDtypes[] = {DType::f32, DType::f16, DType::bf16};

void check_softmax(const Shape& s, DType dtype, bool log, bool mis, uint64_t seed) {
  const int64_t outer = s[0], n = s[1], inner = s[2];
  const Tensor x = kt::input(s, dtype, mis, -4, 4, seed);
  Tensor y = kt::output(s, dtype, !mis);
  cuda::softmax_forward(dtype, x.data_ptr(), y.data_ptr(), outer, n, inner, log, nullptr);
  const Tensor x32 = x.to(DType::f32);
  const Tensor want = log ? ops::log_softmax(x32, 1) : ops::softmax(x32, 1);
  const std::string what =
      detail::str_cat(log ? "log_softmax " : "softmax ", dtype, " ", s, mis ? " misaligned" : "");
  // softmax: exp of the same fl(x - max) (the CPU's polynomial 1.5 ulp, expf 2: 7u), the row
  // sum of n positive terms (positive_sum_rtol) and the division (2u), relative. log_softmax:
  // x - max - log(sum): the sum's relative error becomes log's absolute one, log adds 2u of
  // |log sum| <= log(n) + 8 and the subtraction 2u |y| <= 2u (log(n) + 16).
  const double ln = std::log(static_cast<double>(n));
  kt::Tolerance t = kt::tol(dtype);
  if (log)
    t.atol += kt::positive_sum_rtol(n) + 4 * kt::kU * (ln + 12);
  else
    t.rtol += kt::positive_sum_rtol(n) + 9 * kt::kU;
  kt::require_close(y.to(DType::f32), kt::rounded(want, dtype), t, what);
  // Backward from the stored y, dx written over the gradient (in place).
  const Tensor g = kt::input(s, dtype, mis, -1, 1, seed + 1000);
  const Tensor y32 = y.to(DType::f32), g32 = g.to(DType::f32);
  const Tensor want_dx =
      log ? ops::log_softmax_backward(g32, y32, 1) : ops::softmax_backward(g32, y32, 1);
  Tensor dx = g.clone();
  cuda::softmax_backward(dtype, dx.data_ptr(), y.data_ptr(), dx.data_ptr(), outer, n, inner, log,
                         nullptr);
  // softmax: y (g - sum g y), the sum of n terms |g y| <= y (sum 1) in other orders: 2 sqrt(n) u
  // absolute; log_softmax: g - exp(y) sum g, the sum of n uniform g in [-1, 1] with random signs:
  // signed_sum_tol(n, n / 3) = 6u sqrt(n / 3 * n / 3) = 2u n (the old 2e-7 n was this, 1.7x). In
  // f16/bf16 dx also rounds the dtype's g and y: one ulp (rtol) of |g| <= 1 absolute.
  kt::Tolerance tb = kt::tol(dtype);
  tb.atol += (log ? 2 * kt::kU * static_cast<double>(n) : kt::positive_sum_rtol(n)) +
             (dtype == DType::f32 ? 0 : tb.rtol);
  kt::require_close(dx.to(DType::f32), kt::rounded(want_dx, dtype), tb, what + " backward");
}

}  // namespace

TEST_CASE("cuda kernels: softmax_rows_kernel and softmax_backward_rows_kernel match ops::",
          "[cuda][kernels][softmax]") {
  const std::vector<Shape> shapes = {{1, 1, 1},    {3, 7, 1},    {9, 33, 1},
                                     {2, 1024, 1}, {2, 1500, 1}, {1, 2100, 1}};
  uint64_t seed = 1;
  for (DType dtype : kDtypes)
    for (const Shape& s : shapes)
      for (bool log : {false, true})
        for (bool mis : {false, true}) check_softmax(s, dtype, log, mis, seed++);
}

TEST_CASE("cuda kernels: softmax_cols_kernel and softmax_backward_cols_kernel match ops::",
          "[cuda][kernels][softmax]") {
  const std::vector<Shape> shapes = {{2, 5, 3}, {1, 17, 40}, {3, 1, 4}, {2, 300, 2}};
  uint64_t seed = 200;
  for (DType dtype : kDtypes)
    for (const Shape& s : shapes)
      for (bool log : {false, true})
        for (bool mis : {false, true}) check_softmax(s, dtype, log, mis, seed++);
}

TEST_CASE("cuda kernels: softmax is stable for large logits", "[cuda][kernels][softmax]") {
  const Tensor x = from_vector<float>({1000.f, 1001.f, 1002.f, -1000.f}, {1, 4});
  Tensor y = empty({1, 4});
  cuda::softmax_forward(DType::f32, x.data_ptr(), y.data_ptr(), 1, 4, 1, false, nullptr);
  kt::require_close(y, ops::softmax(x, 1), kt::tol(DType::f32), "large logits");
  CHECK_THROWS_WITH(
      cuda::softmax_forward(DType::f64, x.data_ptr(), y.data_ptr(), 1, 4, 1, true, nullptr),
      Catch::Contains("cuda::log_softmax") && Catch::Contains("got f64"));
}

namespace {

struct CeRun {
  Tensor row_loss, loss, dlogits;
  int64_t count = 0, bad = 0;
};

CeRun run_ce(const Tensor& x, const Tensor& target, const cuda::CrossEntropyParams& p,
             const Tensor& grad, DType dtype, bool with_grad) {
  const int64_t n = x.size(0), c = x.size(1);
  CeRun r;
  r.row_loss = full({n}, NAN);
  r.loss = full({1}, NAN);
  r.dlogits = kt::output({n, c}, dtype, false);
  Tensor scratch = full({2}, -5, {.dtype = DType::i64});
  cuda::CrossEntropyBuffers b{.row_loss = r.row_loss.data<float>(),
                              .loss = r.loss.data<float>(),
                              .dlogits = with_grad ? r.dlogits.data_ptr() : nullptr,
                              .grad = grad.defined() ? grad.data<float>() : nullptr,
                              .scratch = scratch.data<int64_t>()};
  cuda::cross_entropy(dtype, x.data_ptr(), target.data<int64_t>(), n, c, p, b, nullptr);
  r.count = scratch.to_vector<int64_t>()[0];
  r.bad = scratch.to_vector<int64_t>()[1];
  return r;
}

}  // namespace

TEST_CASE("cuda kernels: fused cross entropy matches ops::cross_entropy forward and backward",
          "[cuda][kernels][cross_entropy]") {
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 1},    {5, 10},   {7, 33},
                                                           {3, 1024}, {2, 1500}, {9, 7}};
  uint64_t seed = 1;
  for (DType dtype : kDtypes)
    for (const auto& [n, c] : shapes)
      for (double eps : {0.0, 0.1})
        for (auto red : {cuda::CrossEntropyReduction::none, cuda::CrossEntropyReduction::mean,
                         cuda::CrossEntropyReduction::sum}) {
          const int64_t ignore = (seed % 2) ? -100 : 1;
          const Tensor x = kt::input({n, c}, dtype, false, -3, 3, seed++);
          Generator g(seed++);
          Tensor target = randint(0, c, {n}, {.dtype = DType::i64}, &g);
          if (n > 2) target.data<int64_t>()[1] = ignore;  // one ignored row
          const Reduction ops_red = red == cuda::CrossEntropyReduction::none   ? Reduction::none
                                    : red == cuda::CrossEntropyReduction::mean ? Reduction::mean
                                                                               : Reduction::sum;
          const CrossEntropyOptions opts{
              .reduction = ops_red, .label_smoothing = eps, .ignore_index = ignore};
          const cuda::CrossEntropyParams p{
              .reduction = red, .label_smoothing = static_cast<float>(eps), .ignore_index = ignore};
          // dloss: 0.7 for mean/sum, per-row values for none.
          const Tensor grad = red == cuda::CrossEntropyReduction::none
                                  ? kt::input({n}, DType::f32, false, -1, 1, seed++)
                                  : full({1}, 0.7);
          const CeRun r = run_ce(x, target, p, grad, dtype, true);
          const Tensor x32 = x.to(DType::f32);
          const auto fwd = ops::cross_entropy_forward(x32, target, opts);
          const std::string what =
              detail::str_cat("cross_entropy ", dtype, " N=", n, " C=", c, " eps=", eps,
                              " reduction ", static_cast<int>(red), " ignore ", ignore);
          // Losses are f32 whatever the logits' dtype. A row: lse = max + log(sum of c exps),
          // the sum's relative error (positive_sum_rtol(c) + 7u for exp) becoming log's absolute
          // one, log and the subtractions 2u each of |loss| <= log(c) + 8, twice for the two
          // sides; the smoothing's mean of c logits is smaller. Sum and mean add the n rows in
          // other orders (positive_sum_rtol(n) relative) and carry n rows' errors (sum: n times,
          // absolute).
          const double row = kt::positive_sum_rtol(c) + 7 * kt::kU +
                             4 * kt::kU * (std::log(static_cast<double>(c)) + 8);
          kt::Tolerance t = kt::tol(DType::f32);
          t.rtol += kt::positive_sum_rtol(n);
          t.atol = row * (red == cuda::CrossEntropyReduction::sum ? static_cast<double>(n) : 1.0);
          if (red == cuda::CrossEntropyReduction::none)
            kt::require_close(r.row_loss, fwd.loss, t, what + " row losses");
          else
            kt::require_close(r.loss.view({}), fwd.loss, t, what + " loss");
          int64_t valid = 0;
          for (int64_t v : target.to_vector<int64_t>()) valid += v != ignore;
          CHECK(r.count == valid);
          CHECK(r.bad == -1);
          const Tensor ops_grad = red == cuda::CrossEntropyReduction::none ? grad : grad.view({});
          const Tensor want = ops::cross_entropy_backward(ops_grad, x32, target, fwd.lse, opts);
          // (softmax - smoothed one-hot) dloss / N: softmax's relative error (see check_softmax),
          // and u of the 1 it is subtracted from at the target.
          kt::Tolerance tg = kt::tol(dtype);
          tg.rtol += kt::positive_sum_rtol(c) + 9 * kt::kU;
          tg.atol += 2 * kt::kU;
          kt::require_close(r.dlogits.to(DType::f32), kt::rounded(want, dtype), tg,
                            what + " dlogits");
        }
}

TEST_CASE("cuda kernels: cross entropy without dlogits, with grad 1, and bad targets",
          "[cuda][kernels][cross_entropy]") {
  const Tensor x = kt::input({6, 5}, DType::f32, true, -2, 2, 42);
  const Tensor target = from_vector<int64_t>({0, 4, -100, 2, 3, 1}, {6}, {.dtype = DType::i64});
  // Forward only, mean over the 5 non-ignored rows.
  CeRun r = run_ce(x, target, {}, Tensor(), DType::f32, false);
  CHECK(r.count == 5);
  kt::require_close(r.loss.view({}), ops::cross_entropy(x, target), kt::tol(DType::f32),
                    "forward only");
  CHECK(std::isnan(r.dlogits.to_vector<float>()[0]));  // untouched
  // grad null means dloss = 1.
  r = run_ce(x, target, {.reduction = cuda::CrossEntropyReduction::sum}, Tensor(), DType::f32,
             true);
  const CrossEntropyOptions sum_opts{.reduction = Reduction::sum};
  const auto fwd = ops::cross_entropy_forward(x, target, sum_opts);
  kt::require_close(r.dlogits,
                    ops::cross_entropy_backward(scalar_tensor(1.0), x, target, fwd.lse, sum_opts),
                    kt::tol(DType::f32), "dlogits with grad 1");
  // Targets out of range: the first bad row is reported, its loss is NaN and its grad 0.
  const Tensor bad = from_vector<int64_t>({0, 7, -100, -3, 3, 1}, {6}, {.dtype = DType::i64});
  r = run_ce(x, bad, {.reduction = cuda::CrossEntropyReduction::none}, Tensor(), DType::f32, true);
  CHECK(r.bad == 1);
  CHECK(std::isnan(r.row_loss.to_vector<float>()[1]));
  CHECK(std::isnan(r.row_loss.to_vector<float>()[3]));
  CHECK(r.dlogits.narrow(0, 1, 1).to_vector<float>() == std::vector<float>(5, 0.f));
  Tensor scratch = empty({2}, {.dtype = DType::i64});
  CHECK_THROWS_WITH(
      cuda::cross_entropy(
          DType::f32, x.data_ptr(), target.data<int64_t>(), 6, 5, {.label_smoothing = 1.5f},
          {.row_loss = r.row_loss.data<float>(), .scratch = scratch.data<int64_t>()}, nullptr),
      Catch::Contains("cuda::cross_entropy") && Catch::Contains("label_smoothing in [0, 1]"));
}
