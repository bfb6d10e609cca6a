#include <dlfcn.h>
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <string>

#include "ops/cpu/gemm.h"
#include "ops/cpu/transpose.h"
#include "ops/linalg.h"
#include "stoke/stoke.h"
#include "support/fixture.h"
#include "support/fixture_tensor.h"

using namespace stoke;

namespace {

// Reference product of >= 2-D operands in double: batch dims broadcast by core's expand, then
// plain triple loops.
Tensor naive_matmul(const Tensor& a, const Tensor& b) {
  Shape ba(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  Shape batch = broadcast_shapes(ba, bb, "naive");
  const int64_t n = a.size(-2), k = a.size(-1), m = b.size(-1);
  Shape fa = batch, fb = batch, fo = batch;
  fa.insert(fa.end(), {n, k});
  fb.insert(fb.end(), {k, m});
  fo.insert(fo.end(), {n, m});
  const std::vector<double> av = a.expand(fa).contiguous().to_vector<double>();
  const std::vector<double> bv = b.expand(fb).contiguous().to_vector<double>();
  std::vector<double> ov(static_cast<size_t>(fo.numel()), 0.0);
  const int64_t nb = batch.numel();
  for (int64_t p = 0; p < nb; ++p)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < m; ++j) {
        double s = 0;
        for (int64_t l = 0; l < k; ++l) s += av[(p * n + i) * k + l] * bv[(p * k + l) * m + j];
        ov[(p * n + i) * m + j] = s;
      }
  return from_vector(ov, fo, {.dtype = DType::f64});
}

Tensor abs64(const Tensor& t) {
  return ops::abs(t.to(DType::f64));
}

// The f32 product against the f64 naive loop on the same values: each element a sum of k
// products, within testing::sum_error_factor(k)'s bound of its sum of |terms| (the naive loop on
// absolute values); the f32 values are the reference's inputs, so no input rounding enters.
double matmul_error_ratio(const Tensor& got, const Tensor& a, const Tensor& b) {
  const int64_t k = a.dim() == 1 ? a.size(0) : a.size(-1);
  auto mat = [](const Tensor& t, bool left) {
    return t.dim() > 1 ? t : left ? t.view({1, t.size(0)}) : t.view({t.size(0), 1});
  };
  const Tensor want = naive_matmul(mat(a, true), mat(b, false)).reshape(got.shape());
  const Tensor abs = naive_matmul(abs64(mat(a, true)), abs64(mat(b, false))).reshape(got.shape());
  // In f64 the naive loop rounds as well: twice the bound.
  const double both = got.dtype() == DType::f64 ? 2 : 1;
  return testing::max_bound_ratio(got, want, abs, both * testing::sum_error_factor(k, got.dtype()));
}

}  // namespace

TEST_CASE("gemm: all transpose combinations, alpha, beta and leading dims", "[ops][linalg]") {
  // Sizes straddle the split threshold so both the single call and the pool split run (rows
  // split: 130 x 33, 150 x 40; columns: 33 x 300, where each chunk transposes its own columns of
  // a transposed B). (150, 40, 600) spans several of stoke's AVX-512 GEMM's row and depth blocks
  // (144 x 256), where f32 products run it (gemm_fastest_runs_avx512); (40, 50, 100) runs it in
  // one call, over a partial second column panel.
  for (auto [m, n, k] : {std::array<int64_t, 3>{5, 7, 3},
                         {40, 50, 100},
                         {130, 33, 257},
                         {33, 300, 129},
                         {150, 40, 600}}) {
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        INFO("m=" << m << " n=" << n << " k=" << k << " ta=" << ta << " tb=" << tb);
        const int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 1, ldc = n + 2;
        Tensor A = randn({ta ? k : m, lda}, {.dtype = DType::f64});
        Tensor B = randn({tb ? n : k, ldb}, {.dtype = DType::f64});
        Tensor C = randn({m, ldc}, {.dtype = DType::f64});
        const std::vector<double> a = A.to_vector<double>(), b = B.to_vector<double>();
        std::vector<double> c = C.to_vector<double>();
        const double alpha = 0.5, beta = -2.0;
        // expect = alpha A B + beta C, its sum of |terms| (bound), and the same for the f32
        // calls on the f32 values of A and B (product p32, abs32; C added after).
        std::vector<double> expect = c, bound(c.size(), 0.0), p32(c.size(), 0.0), abs32 = p32;
        const std::vector<double> a32 = A.to(DType::f32).to_vector<double>(),
                                  b32 = B.to(DType::f32).to_vector<double>();
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            double s = 0, sa = 0, s32 = 0, sa32 = 0;
            for (int64_t l = 0; l < k; ++l) {
              const int64_t ai = ta ? l * lda + i : i * lda + l,
                            bi = tb ? j * ldb + l : l * ldb + j;
              s += a[ai] * b[bi];
              sa += std::abs(a[ai] * b[bi]);
              s32 += a32[ai] * b32[bi];
              sa32 += std::abs(a32[ai] * b32[bi]);
            }
            const int64_t o = i * ldc + j;
            expect[o] = alpha * s + beta * c[o];
            bound[o] = std::abs(alpha) * sa + std::abs(beta * c[o]);
            p32[o] = s32;
            abs32[o] = sa32;
          }
        ops::cpu::gemm(ta, tb, m, n, k, alpha, A.data<double>(), lda, B.data<double>(), ldb, beta,
                       C.data<double>(), ldc);
        // f64: k products, alpha and beta C (k + 2 terms); the reference rounds too: twice.
        const double f64_factor = 2 * testing::sum_error_factor(k + 2, DType::f64);
        const std::vector<double> got = C.to_vector<double>();
        double worst = 0;
        for (size_t i = 0; i < got.size(); ++i)
          worst = std::max(worst, std::abs(got[i] - expect[i]) / (f64_factor * bound[i]));
        CHECK(worst <= 1);
        // f32 with beta = 0 ignores NaNs already in C: A B within sum_error_factor(k) of p32.
        const double f32_factor = testing::sum_error_factor(k, DType::f32);
        Tensor Cf = full({m, ldc}, NAN);
        Tensor Af = A.to(DType::f32), Bf = B.to(DType::f32);
        ops::cpu::gemm(ta, tb, m, n, k, 1.0f, Af.data<float>(), lda, Bf.data<float>(), ldb, 0.0f,
                       Cf.data<float>(), ldc);
        const std::vector<float> gf = Cf.to_vector<float>();
        double worst_f = 0;
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            const int64_t o = i * ldc + j;
            const double d = std::abs(gf[o] - p32[o]);
            worst_f = std::max(worst_f, std::isnan(d) ? INFINITY : d / (f32_factor * abs32[o]));
          }
        CHECK(worst_f <= 1);
        // f32 with beta = 1 (C += A B), alpha = 1: the other form stoke's own GEMM takes (k + 1
        // terms, C's among them).
        const double acc_factor = testing::sum_error_factor(k + 1, DType::f32);
        Tensor Cacc = C.to(DType::f32);
        const std::vector<float> c0 = Cacc.to_vector<float>();
        ops::cpu::gemm(ta, tb, m, n, k, 1.0f, Af.data<float>(), lda, Bf.data<float>(), ldb, 1.0f,
                       Cacc.data<float>(), ldc);
        const std::vector<float> ga = Cacc.to_vector<float>();
        double worst_a = 0;
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            const int64_t o = i * ldc + j;
            const double d = std::abs(ga[o] - (p32[o] + c0[o]));
            worst_a =
                std::max(worst_a, std::isnan(d) ? INFINITY
                                                : d / (acc_factor * (abs32[o] + std::abs(c0[o]))));
          }
        CHECK(worst_a <= 1);
      }
  }
}

TEST_CASE("gemm: OpenBLAS does not run its SSE3 fallback on an AVX2 CPU", "[ops][linalg]") {
  // OpenBLAS 0.3.21 falls back to "Prescott" on CPUs it does not know (Sapphire Rapids);
  // ops/cpu/gemm.cpp re-selects SkylakeX or Haswell there unless OPENBLAS_CORETYPE chooses.
  using NameFn = char* (*)();
  auto corename = reinterpret_cast<NameFn>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  if (!corename || std::getenv("OPENBLAS_CORETYPE")) {
    WARN("no DYNAMIC_ARCH OpenBLAS, or OPENBLAS_CORETYPE chooses the kernels: nothing to check");
    return;
  }
  float a = 2, b = 3, c = 0;
  ops::cpu::gemm(false, false, 1, 1, 1, 1.0f, &a, 1, &b, 1, 0.0f, &c, 1);  // selects on first use
  REQUIRE(c == 6);
  const std::string name = corename();
  INFO("OpenBLAS core: " << name);
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) CHECK(name != "Prescott");
}

TEST_CASE("gemm_avx512: every row count, masked columns, transposed A, depth blocks",
          "[ops][linalg]") {
  if (!ops::cpu::gemm_avx512_available()) {
    WARN("the CPU has no AVX-512F: stoke's AVX-512 GEMM does not run here");
    return;
  }
  // m from 1 to 25 covers every row-tile size (12 rows per tile) and a remainder; n = 1, 15, 16,
  // 17, 33, 64 covers the masks of both column vectors.
  // m from 1 to 25 and 150 (two 144-row blocks), depth 37 and 300 (two 256-deep blocks); the
  // reference is the f64 product of the same f32 values.
  for (auto [m, depth] : {std::array<int64_t, 2>{1, 37},
                          {5, 37},
                          {12, 37},
                          {13, 37},
                          {25, 37},
                          {13, 300},
                          {150, 37},
                          {150, 0}})
    for (int64_t n : {1, 15, 16, 17, 33, 64})
      for (bool trans_a : {false, true})
        for (bool accumulate : {false, true}) {
          const int64_t lda = trans_a ? m + 3 : depth + 2, ldb = n + 5, ldc = n + 1;
          INFO("m " << m << " n " << n << " depth " << depth << " trans_a " << trans_a
                    << " accumulate " << accumulate);
          Tensor A = randn({trans_a ? depth : m, lda}), B = randn({depth, ldb});
          Tensor C0 = randn({m, ldc});
          Tensor ours = C0.clone();
          ops::cpu::gemm_avx512(m, n, depth, A.data<float>(), trans_a ? 1 : lda, trans_a ? lda : 1,
                                B.data<float>(), ldb, accumulate, ours.data<float>(), ldc);
          Tensor a = (trans_a ? A.narrow(0, 0, depth).narrow(1, 0, m).t() : A.narrow(1, 0, depth))
                         .to(DType::f64);
          Tensor ref = naive_matmul(a, B.narrow(1, 0, n).to(DType::f64));
          if (accumulate) ref = ref + C0.narrow(1, 0, n).to(DType::f64);
          // The product's columns within sum_error_factor of depth products (and C0's value
          // when accumulating); columns past n keep C0's values, untouched (exact).
          Tensor abs = naive_matmul(abs64(a), abs64(B.narrow(1, 0, n)));
          if (accumulate) abs = abs + abs64(C0.narrow(1, 0, n));
          CHECK(testing::max_bound_ratio(ours.narrow(1, 0, n), ref, abs,
                                         testing::sum_error_factor(depth + 1, DType::f32)) <= 1);
          CHECK(ours.narrow(1, n, ldc - n).to_vector<float>() ==
                C0.narrow(1, n, ldc - n).to_vector<float>());
        }
}

TEST_CASE("cpu transpose: every block edge, leading dims, f32 and f64", "[ops][linalg]") {
  // f32 runs 16 x 16 AVX-512 blocks where the CPU has AVX-512F (masked at the edges); f64 and
  // other CPUs the scalar blocks. Values past each row (the leading dims' slack) stay untouched.
  for (int64_t rows : {1, 5, 16, 17, 40})
    for (int64_t cols : {1, 7, 16, 31, 33}) {
      INFO("rows " << rows << " cols " << cols);
      const int64_t ld_src = cols + 3, ld_dst = rows + 5;
      const Tensor src = randn({rows, ld_src}, {.dtype = DType::f64});
      const std::vector<double> s = src.to_vector<double>();
      Tensor d64 = full({cols, ld_dst}, -7.0, {.dtype = DType::f64});
      ops::cpu::transpose(src.data<double>(), rows, cols, ld_src, d64.data<double>(), ld_dst);
      const Tensor src32 = src.to(DType::f32);
      Tensor d32 = full({cols, ld_dst}, -7.0);
      ops::cpu::transpose(src32.data<float>(), rows, cols, ld_src, d32.data<float>(), ld_dst);
      const std::vector<double> g64 = d64.to_vector<double>(), g32 = d32.to_vector<double>();
      int64_t wrong = 0;
      for (int64_t j = 0; j < cols; ++j)
        for (int64_t i = 0; i < ld_dst; ++i) {
          const double want = i < rows ? s[i * ld_src + j] : -7.0;
          wrong += g64[j * ld_dst + i] != want;
          wrong += g32[j * ld_dst + i] != double(float(want));
        }
      CHECK(wrong == 0);
    }
}

TEST_CASE("gemm_batched: shared C accumulates in order", "[ops][linalg]") {
  Tensor A = randn({4, 3, 5}, {.dtype = DType::f64}), B = randn({4, 5, 2}, {.dtype = DType::f64});
  Tensor C = zeros({3, 2}, {.dtype = DType::f64});
  ops::cpu::gemm_batched<double>(false, false, 4, 3, 2, 5, 1.0, A.data<double>(), 5, 15,
                                 B.data<double>(), 2, 10, 0.0, C.data<double>(), 2, 0);
  Tensor ref = naive_matmul(A, B);
  std::vector<double> r = ref.to_vector<double>(), expect(6, 0.0);
  for (int p = 0; p < 4; ++p)
    for (int i = 0; i < 6; ++i) expect[i] += r[p * 6 + i];
  // 4 batches of 5 products into one C: 20 terms per element, both sides rounding in f64.
  const Tensor abs = ops::sum(naive_matmul(abs64(A), abs64(B)), {0});
  CHECK(testing::max_bound_ratio(C, from_vector(expect, {3, 2}, {.dtype = DType::f64}), abs,
                                 2 * testing::sum_error_factor(20, DType::f64)) <= 1);
}

TEST_CASE("matmul: 2-D values against naive loops, odd sizes", "[ops][linalg]") {
  for (auto [n, k, m] :
       {std::array<int64_t, 3>{1, 1, 1}, {3, 5, 7}, {17, 33, 65}, {64, 130, 257}}) {
    INFO("n=" << n << " k=" << k << " m=" << m);
    Tensor a = randn({n, k}), b = randn({k, m});
    Tensor c = ops::matmul(a, b);
    CHECK(c.shape() == Shape{n, m});
    CHECK(c.dtype() == DType::f32);
    CHECK(matmul_error_ratio(c, a, b) <= 1);
  }
}

TEST_CASE("matmul: transposed and sliced views", "[ops][linalg]") {
  Tensor at = randn({9, 6}), bt = randn({11, 9});
  Tensor a = at.t(), b = bt.t();  // (6, 9) x (9, 11), both read transposed by GEMM
  CHECK_FALSE(a.is_contiguous());
  CHECK(matmul_error_ratio(ops::matmul(a, b), a, b) <= 1);
  CHECK(matmul_error_ratio(ops::matmul(a, bt.t().contiguous()), a, b) <= 1);
  // Inner stride 2: not a GEMM layout, copied first.
  Tensor s = randn({6, 18}).slice(1, 0, 18, 2);
  CHECK(matmul_error_ratio(ops::matmul(s, b), s, b) <= 1);
  // Row slice of a wider matrix: leading dimension larger than the width.
  Tensor w = randn({6, 20}).narrow(1, 3, 9);
  CHECK(matmul_error_ratio(ops::matmul(w, b), w, b) <= 1);
  // Batched transposed views.
  Tensor ab = randn({3, 5, 4}).transpose(1, 2), bb = randn({3, 7, 5}).transpose(1, 2);
  CHECK(matmul_error_ratio(ops::matmul(ab, bb), ab, bb) <= 1);
}

TEST_CASE("matmul: batched and broadcast batch dims", "[ops][linalg]") {
  struct Case {
    Shape a, b, out;
  };
  for (const Case& c :
       {Case{{4, 3, 5}, {4, 5, 2}, {4, 3, 2}}, Case{{4, 3, 5}, {5, 2}, {4, 3, 2}},
        Case{{3, 5}, {4, 5, 2}, {4, 3, 2}}, Case{{2, 1, 3, 5}, {3, 5, 6}, {2, 3, 3, 6}},
        Case{{2, 4, 3, 5}, {1, 4, 5, 6}, {2, 4, 3, 6}}, Case{{1, 3, 5}, {6, 5, 2}, {6, 3, 2}},
        Case{{40, 30, 50}, {50, 20}, {40, 30, 20}}}) {
    INFO("a " << c.a << " b " << c.b);
    Tensor a = randn(c.a), b = randn(c.b);
    Tensor out = ops::matmul(a, b);
    CHECK(out.shape() == c.out);
    CHECK(matmul_error_ratio(out, a, b) <= 1);
  }
  // An expanded (stride 0) batch operand.
  Tensor a = randn({1, 3, 5}).expand({4, 3, 5}), b = randn({4, 5, 2});
  CHECK(matmul_error_ratio(ops::matmul(a, b), a, b) <= 1);
}

TEST_CASE("matmul: 1-D operands", "[ops][linalg]") {
  Tensor v = randn({5}), w = randn({5}), M = randn({5, 3}), N = randn({3, 5}), B = randn({2, 5, 3});
  Tensor dot = ops::matmul(v, w);
  CHECK(dot.dim() == 0);
  CHECK(matmul_error_ratio(dot, v, w) <= 1);
  Tensor vm = ops::matmul(v, M);
  CHECK(vm.shape() == Shape{3});
  CHECK(matmul_error_ratio(vm, v, M) <= 1);
  Tensor nv = ops::matmul(N, v);
  CHECK(nv.shape() == Shape{3});
  CHECK(matmul_error_ratio(nv, N, v) <= 1);
  Tensor vb = ops::matmul(v, B);
  CHECK(vb.shape() == Shape{2, 3});
  CHECK(matmul_error_ratio(vb, v, B) <= 1);
  Tensor bv = ops::matmul(B.transpose(1, 2), v);
  CHECK(bv.shape() == Shape{2, 3});
}

TEST_CASE("matmul: f64 and empty sizes", "[ops][linalg]") {
  Tensor a = randn({7, 9}, {.dtype = DType::f64}), b = randn({2, 9, 4}, {.dtype = DType::f64});
  Tensor c = ops::matmul(a, b);
  CHECK(c.dtype() == DType::f64);
  CHECK(matmul_error_ratio(c, a, b) <= 1);
  // k = 0 gives zeros; n = 0 gives an empty result.
  Tensor z = ops::matmul(randn({3, 0}), randn({0, 4}));
  CHECK(z.shape() == Shape{3, 4});
  CHECK(z.to_vector<float>() == std::vector<float>(12, 0.0f));  // exact: empty sums
  CHECK(ops::matmul(randn({0, 3}), randn({3, 4})).shape() == Shape{0, 4});
}

TEST_CASE("matmul: errors name the op, shapes and dtypes", "[ops][linalg]") {
  CHECK_THROWS_WITH(ops::matmul(randn({3, 4}), randn({5, 2})), Catch::Contains("matmul") &&
                                                                   Catch::Contains("[3, 4]") &&
                                                                   Catch::Contains("[5, 2]"));
  CHECK_THROWS_WITH(ops::matmul(randn({3, 4}), randn({4, 2}, {.dtype = DType::f64})),
                    Catch::Contains("f32") && Catch::Contains("f64"));
  CHECK_THROWS_WITH(ops::matmul(scalar_tensor(1), randn({4})), Catch::Contains("at least 1 dim"));
  CHECK_THROWS_WITH(ops::matmul(randn({2, 3, 4}), randn({3, 4, 5})), Catch::Contains("matmul"));
  CHECK_THROWS_WITH(ops::matmul(randint(0, 3, {2, 2}), randint(0, 3, {2, 2})),
                    Catch::Contains("f32 or f64"));
}

TEST_CASE("linear: PyTorch fixtures, forward and backward", "[ops][linalg][fixture]") {
  const auto cases = testing::load_fixture(testing::fixture_path("linear.txt"));
  REQUIRE(cases.size() >= 4);
  for (const auto& c : cases) {
    INFO("case " << c.name);
    Tensor x = testing::to_tensor(c.tensor("input")), w = testing::to_tensor(c.tensor("weight"));
    Tensor b = testing::to_tensor(c.tensor("bias")), g = testing::to_tensor(c.tensor("grad_out"));
    // Each result a sum of terms (output: in + 1, grad_input: out, grad_weight and grad_bias: the
    // rows) within sum_error_factor of its sum of |terms|, plus the fixture's rounding to f32 (u).
    const int64_t in = w.size(1), out = w.size(0);
    const Tensor x2 = x.reshape({-1, in}), g2 = g.reshape({-1, out});
    const int64_t rows = x2.size(0);
    const double u = testing::unit_roundoff(DType::f32);
    auto check = [&](const Tensor& got, const char* name, const Tensor& abs, int64_t terms) {
      INFO(name);
      CHECK(testing::max_bound_ratio(got, testing::to_tensor(c.tensor(name)),
                                     abs.reshape(got.shape()),
                                     testing::sum_error_factor(terms, DType::f32), u) <= 1);
    };
    check(ops::linear(x, w, b), "output", naive_matmul(abs64(x2), abs64(w).t()) + abs64(b), in + 1);
    ops::LinearGrads r = ops::linear_backward(g, x, w, true, true, true);
    check(r.grad_input, "grad_input", naive_matmul(abs64(g2), abs64(w)), out);
    check(r.grad_weight, "grad_weight", naive_matmul(abs64(g2).t(), abs64(x2)), rows);
    check(r.grad_bias, "grad_bias", ops::sum(abs64(g2), {0}), rows);
    ops::LinearGrads only_w = ops::linear_backward(g, x, w, false, true, false);
    CHECK_FALSE(only_w.grad_input.defined());
    CHECK_FALSE(only_w.grad_bias.defined());
    CHECK(only_w.grad_weight.defined());
  }
}

TEST_CASE("linear: no bias, transposed input and weight, 1-D input", "[ops][linalg]") {
  Tensor x = randn({10, 6}), w = randn({4, 6});
  CHECK(matmul_error_ratio(ops::linear(x, w), x, w.t()) <= 1);
  CHECK(matmul_error_ratio(ops::linear(x.t().contiguous().t(), w.t().contiguous().t()), x, w.t()) <=
        1);
  Tensor y1 = ops::linear(x.select(0, 2), w);
  CHECK(y1.shape() == Shape{4});
  CHECK(matmul_error_ratio(y1, x.select(0, 2), w.t()) <= 1);
  // 4-D input with a large row count (split GEMM, parallel bias fill): 64 products and the bias.
  Tensor big = randn({3, 4, 50, 64}), wb = randn({96, 64}), bb = randn({96});
  Tensor yb = ops::linear(big, wb, bb);
  CHECK(yb.shape() == Shape{3, 4, 50, 96});
  const Tensor big2 = big.reshape({-1, 64});
  CHECK(testing::max_bound_ratio(yb.reshape({-1, 96}),
                                 naive_matmul(big2, wb.t()) + bb.to(DType::f64),
                                 naive_matmul(abs64(big2), abs64(wb).t()) + abs64(bb),
                                 testing::sum_error_factor(65, DType::f32)) <= 1);
}

TEST_CASE("linear: errors", "[ops][linalg]") {
  CHECK_THROWS_WITH(ops::linear(randn({2, 5}), randn({3, 4})), Catch::Contains("linear") &&
                                                                   Catch::Contains("[3, 4]") &&
                                                                   Catch::Contains("[2, 5]"));
  CHECK_THROWS_WITH(ops::linear(randn({2, 4}), randn({3, 4}), randn({4})), Catch::Contains("bias"));
  CHECK_THROWS_WITH(ops::linear(randn({2, 4}), randn({3, 4}, {.dtype = DType::f64})),
                    Catch::Contains("f64"));
  CHECK_THROWS_WITH(ops::linear(randn({2, 4}), randn({4})), Catch::Contains("weight"));
}

TEST_CASE("sum_leading_dims: matches a naive column sum", "[ops][linalg]") {
  for (Shape s : {Shape{7}, Shape{5, 3}, Shape{3, 300, 17}, Shape{4000, 33}}) {
    Tensor g = randn(s, {.dtype = DType::f64});
    const int64_t n = s.back(), rows = g.numel() / n;
    std::vector<double> v = g.to_vector<double>(), e(n, 0.0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < n; ++j) e[j] += v[r * n + j];
    // rows terms per column, both sides rounding in f64.
    CHECK(testing::max_bound_ratio(ops::sum_leading_dims(g),
                                   from_vector(e, {n}, {.dtype = DType::f64}),
                                   ops::sum(abs64(g).reshape({rows, n}), {0}),
                                   2 * testing::sum_error_factor(rows, DType::f64)) <= 1);
  }
  // Non-contiguous input: exact, as sum_leading_dims makes its input contiguous before the same
  // loop.
  Tensor t = randn({6, 4}).t();
  CHECK(ops::sum_leading_dims(t).to_vector<float>() ==
        ops::sum_leading_dims(t.contiguous()).to_vector<float>());
}

TEST_CASE("linalg: the TF32 setting is off by default and round-trips", "[ops][linalg]") {
  // Off unless STOKE_ALLOW_TF32=1 is in the environment (CI does not set it); the CPU ignores it.
  const char* env = std::getenv("STOKE_ALLOW_TF32");
  CHECK(allow_tf32() == (env != nullptr && std::string(env) == "1"));
  const bool before = allow_tf32();
  const Tensor a = ones({3, 4}), b = ones({4, 2});
  set_allow_tf32(true);
  CHECK(allow_tf32());
  CHECK(ops::matmul(a, b).to_vector<float>() ==
        std::vector<float>(6, 4.f));  // exact: 1 + 1 + 1 + 1
  set_allow_tf32(false);
  CHECK_FALSE(allow_tf32());
  set_allow_tf32(before);
}
