// cuda/kernels/reduce.cu in cuda/emu against ops::sum/mean/max_with_indices/min_with_indices:
// reduce_rows_kernel (warp per row up to 1024 elements, block per row above) and
// reduce_cols_kernel (reduction over an outer dim), reduce_partial_kernel + reduce_finish_kernel
// (few long rows in two stages), f32/f16/bf16, ties, NaN and errors.
#include <catch2/catch.hpp>

#include <cmath>

#include "cuda/kernels/reduce.h"
#include "ops/creation.h"
#include "ops/elementwise.h"
#include "ops/reduce.h"
#include "test_kernels_util.h"

using namespace stoke;
namespace kt = stoke::kernels_test;
using cuda::ReduceOp;

namespace {

const DType kDtypes[] = {DType::f32, DType::f16, DType::bf16};

// Runs op over dim 1 of x ([outer, n, inner]) and checks values (and indices for max/min).
void check_reduce(ReduceOp op, const Tensor& x, DType dtype, bool misaligned_out) {
  const int64_t outer = x.size(0), n = x.size(1), inner = x.size(2);
  Tensor out = kt::output({outer, inner}, dtype, misaligned_out);
  Tensor idx = full({outer, inner}, -7, {.dtype = DType::i64});
  const bool indexed = op == ReduceOp::max || op == ReduceOp::min;
  // The two-stage path's partials; poisoned so that an unwritten one shows.
  const size_t ws = cuda::reduce_workspace_bytes(outer, n, inner);
  Tensor workspace = full({static_cast<int64_t>(ws)}, 0xff, {.dtype = DType::u8});
  cuda::reduce(op, dtype, x.data_ptr(), out.data_ptr(), indexed ? idx.data<int64_t>() : nullptr,
               outer, n, inner, ws ? workspace.data_ptr() : nullptr, nullptr);
  const Tensor x32 = x.to(DType::f32);
  const std::string what = detail::str_cat("reduce op ", static_cast<int>(op), " ", dtype, " [",
                                           outer, ", ", n, ", ", inner, "]");
  if (indexed) {  // selections: bit for bit
    const auto want =
        op == ReduceOp::max ? ops::max_with_indices(x32, 1) : ops::min_with_indices(x32, 1);
    kt::require_equal(out.to(DType::f32), want.values, what + " values");
    kt::require_equal(idx, want.indices, what + " indices");
    return;
  }
  const Tensor want = op == ReduceOp::sum ? ops::sum(x32, {1}) : ops::mean(x32, {1});
  // f32 sums of n values of random sign (uniform in [-2, 2]) in another order than the CPU's:
  // the partial sums are random walks, each sum's rounding error has a standard deviation of
  // about u sqrt(n / 6) ||x||_2, the difference of two sqrt(2) times that; six of those,
  // 6u sqrt(n / 3 sum x^2), is about 4u n here (the old bound, 2e-7 n, was 3.4u n). The mean
  // divides it by n and rounds once more (2u |mean|).
  double sq = 0;
  for (double v : ops::sum(ops::mul(x32, x32), {1}).to_vector<double>()) sq = std::max(sq, v);
  const double nd = static_cast<double>(n);
  const double sum_atol = 6 * kt::kU * std::sqrt(nd / 3 * sq);
  kt::Tolerance t = kt::tol(dtype);
  t.atol += op == ReduceOp::sum ? sum_atol : sum_atol / nd;
  kt::require_close(out.to(DType::f32), kt::rounded(want, dtype), t, what);
}

}  // namespace

TEST_CASE("cuda kernels: reduce_rows_kernel (innermost dim) matches ops::",
          "[cuda][kernels][reduce]") {
  const std::vector<Shape> shapes = {{1, 1, 1},    {3, 5, 1},    {7, 33, 1}, {5, 1024, 1},
                                     {2, 1025, 1}, {1, 3000, 1}, {6, 100, 1}};
  uint64_t seed = 1;
  for (DType dtype : kDtypes)
    for (const Shape& s : shapes)
      for (bool mis : {false, true})
        for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean, ReduceOp::max, ReduceOp::min})
          check_reduce(op, kt::input(s, dtype, mis, -2, 2, seed++), dtype, !mis);
}

TEST_CASE("cuda kernels: reduce_cols_kernel (outer dim) matches ops::", "[cuda][kernels][reduce]") {
  const std::vector<Shape> shapes = {{2, 5, 3}, {1, 17, 40}, {3, 9, 33}, {1, 1, 70}, {4, 2, 2}};
  uint64_t seed = 100;
  for (DType dtype : kDtypes)
    for (const Shape& s : shapes)
      for (bool mis : {false, true})
        for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean, ReduceOp::max, ReduceOp::min})
          check_reduce(op, kt::input(s, dtype, mis, -2, 2, seed++), dtype, mis);
}

TEST_CASE("cuda kernels: reduce max/min take the first of ties and NaN wins",
          "[cuda][kernels][reduce]") {
  // Few distinct values: every row and column has ties.
  for (const Shape& s : std::vector<Shape>{{4, 50, 1}, {2, 40, 5}, {1, 2000, 1}}) {
    Generator g(9);
    const Tensor x = ops::sub(randint(0, 3, s, {.dtype = DType::i64}, &g).to(DType::f32), 1.0);
    check_reduce(ReduceOp::max, x, DType::f32, false);
    check_reduce(ReduceOp::min, x, DType::f32, false);
  }
  // NaN at positions 3 and 7 of row 0, none in row 1.
  Tensor x = kt::input({2, 40, 1}, DType::f32, false, -1, 1, 3);
  float* p = x.data<float>();
  p[3] = NAN;
  p[7] = NAN;
  for (ReduceOp op : {ReduceOp::max, ReduceOp::min}) {
    check_reduce(op, x, DType::f32, false);
    Tensor idx = empty({2}, {.dtype = DType::i64});
    cuda::reduce(op, DType::f32, x.data_ptr(), nullptr, idx.data<int64_t>(), 2, 40, 1, nullptr,
                 nullptr);
    CHECK(idx.to_vector<int64_t>()[0] == 3);  // argmax alone (no values output)
  }
}

TEST_CASE("cuda kernels: reduce edge cases and errors", "[cuda][kernels][reduce]") {
  Tensor x = zeros({2, 0, 3});
  Tensor out = full({2, 3}, 5.0);
  cuda::reduce(ReduceOp::sum, DType::f32, x.data_ptr(), out.data_ptr(), nullptr, 2, 0, 3, nullptr,
               nullptr);
  kt::require_equal(out, zeros({2, 3}), "sum over an empty dim");  // 0 exactly
  cuda::reduce(ReduceOp::mean, DType::f32, x.data_ptr(), out.data_ptr(), nullptr, 2, 0, 3, nullptr,
               nullptr);
  CHECK(std::isnan(out.to_vector<float>()[0]));
  int64_t idx[6];
  CHECK_THROWS_WITH(cuda::reduce(ReduceOp::max, DType::f32, x.data_ptr(), out.data_ptr(), idx, 2, 0,
                                 3, nullptr, nullptr),
                    Catch::Contains("cuda::reduce") && Catch::Contains("non-empty reduced dim"));
  CHECK_THROWS_WITH(cuda::reduce(ReduceOp::sum, DType::f32, x.data_ptr(), out.data_ptr(), idx, 2, 1,
                                 3, nullptr, nullptr),
                    Catch::Contains("no indices output for sum/mean"));
  CHECK_THROWS_WITH(cuda::reduce(ReduceOp::sum, DType::i64, x.data_ptr(), out.data_ptr(), nullptr,
                                 2, 1, 3, nullptr, nullptr),
                    Catch::Contains("expected dtype f32, f16 or bf16, got i64"));
}

TEST_CASE("cuda kernels: reduce_partial_kernel + reduce_finish_kernel (few long rows) match ops::",
          "[cuda][kernels][reduce]") {
  // At and past the two-stage threshold, slices not dividing n.
  const std::vector<Shape> shapes = {{1, 32768, 1}, {3, 40001, 1}, {1, 70000, 1}};
  uint64_t seed = 300;
  for (const Shape& s : shapes) {
    REQUIRE(cuda::reduce_workspace_bytes(s[0], s[1], s[2]) > 0);
    for (DType dtype : kDtypes)
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean, ReduceOp::max, ReduceOp::min})
        check_reduce(op, kt::input(s, dtype, false, -2, 2, seed++), dtype, false);
  }
  CHECK(cuda::reduce_workspace_bytes(1, 32767, 1) == 0);   // short: one block per row
  CHECK(cuda::reduce_workspace_bytes(64, 40000, 1) == 0);  // enough rows to fill the device
  CHECK(cuda::reduce_workspace_bytes(1, 40000, 2) == 0);   // columns
  // Ties across slices: the first extremum wins; a NaN in a late slice wins over every number.
  Generator g(11);
  Tensor x = ops::sub(randint(0, 3, {2, 50000, 1}, {.dtype = DType::i64}, &g).to(DType::f32), 1.0);
  check_reduce(ReduceOp::max, x, DType::f32, false);
  check_reduce(ReduceOp::min, x, DType::f32, false);
  x.data<float>()[45000] = NAN;
  check_reduce(ReduceOp::max, x, DType::f32, false);
  check_reduce(ReduceOp::min, x, DType::f32, false);
  // Without the workspace it needs, the launcher says so.
  Tensor out = empty({2});
  CHECK_THROWS_WITH(cuda::reduce(ReduceOp::sum, DType::f32, x.data_ptr(), out.data_ptr(), nullptr,
                                 2, 50000, 1, nullptr, nullptr),
                    Catch::Contains("expected a workspace of"));
}
