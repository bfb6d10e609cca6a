// The SGEMM versions (cuda/kernels/sgemm.cu) in cuda/emu against ops::matmul: every version and
// tile, the NN/NT/TN/TT layouts, sizes that are not multiples of any tile (k included), leading
// dims wider than the rows, alpha/beta, and misaligned pointers or leading dims that send the
// vectorized version to its scalar fallback; split-K (sgemm_split_k) against the plain sgemm's
// reference. Kernels covered: sgemm_naive_kernel, sgemm_smem_tiled_kernel,
// sgemm_register_blocked_kernel, sgemm_vectorized_kernel, sgemm_split_k_reduce_kernel.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "cuda/kernels/sgemm.h"
#include "ops/creation.h"
#include "ops/linalg.h"
#include "test_kernels_util.h"

namespace {

using namespace stoke;
using cuda::SgemmVersion;

// A rows x cols row-major matrix with leading dim ld: `storage` is (rows, ld), `view` its first
// cols columns, and the padding columns hold kSentinel so that stray writes show up.
constexpr float kSentinel = 777.f;
struct Mat {
  Tensor storage, view;
  int64_t ld;
  float* ptr() const { return storage.data<float>(); }
};

Mat make_mat(int64_t rows, int64_t cols, int64_t ld, bool misaligned, uint64_t seed) {
  Mat m{kernels_test::input({rows, ld}, DType::f32, misaligned, -1, 1, seed), Tensor(), ld};
  if (ld > cols) m.storage.narrow(1, cols, ld - cols).copy_(full({rows, ld - cols}, kSentinel));
  m.view = m.storage.narrow(1, 0, cols);
  return m;
}

struct GemmCase {
  int64_t m, n, k;
  bool ta, tb;
  float alpha, beta;
  int64_t pad = 0;          // extra leading-dim elements beyond the row length
  bool ld4 = false;         // then round every leading dim up to a multiple of 4
  bool misaligned = false;  // A, B and C start one element past an aligned address
};

std::string describe(const GemmCase& c, SgemmVersion v, int tile) {
  return detail::str_cat(cuda::sgemm_version_name(v), " tile ", tile, " ", c.ta ? "T" : "N",
                         c.tb ? "T" : "N", " m=", c.m, " n=", c.n, " k=", c.k, " alpha=", c.alpha,
                         " beta=", c.beta, " pad=", c.pad, c.ld4 ? " ld%4=0" : "",
                         c.misaligned ? " misaligned" : "");
}

// The leading dim of a matrix with `cols` columns in case c (at least 1).
int64_t leading_dim(const GemmCase& c, int64_t cols) {
  const int64_t ld = std::max<int64_t>(cols + c.pad, 1);
  return c.ld4 ? (ld + 3) / 4 * 4 : ld;
}

// Runs one case and compares C with alpha * op(A) * op(B) + beta * C0 computed from ops::matmul;
// the padding columns of C must keep the sentinel.
// slices == 0: the plain sgemm; else sgemm_split_k with that many slices (and a workspace whose
// unused tail keeps a sentinel).
void check_gemm(const GemmCase& c, SgemmVersion v, int tile, uint64_t seed, int64_t slices = 0) {
  INFO(describe(c, v, tile));
  const int64_t a_rows = c.ta ? c.k : c.m, a_cols = c.ta ? c.m : c.k;
  const int64_t b_rows = c.tb ? c.n : c.k, b_cols = c.tb ? c.k : c.n;
  const Mat a = make_mat(a_rows, a_cols, leading_dim(c, a_cols), c.misaligned, seed);
  const Mat b = make_mat(b_rows, b_cols, leading_dim(c, b_cols), c.misaligned, seed + 1);
  Mat cm = make_mat(c.m, c.n, leading_dim(c, c.n), c.misaligned, seed + 2);
  if (c.beta == 0.f) cm.view.copy_(full({c.m, c.n}, NAN));  // beta == 0 must not read C
  const Tensor c0 = cm.view.clone();
  const Tensor op_a = c.ta ? a.view.t() : a.view, op_b = c.tb ? b.view.t() : b.view;
  const Tensor prod = c.k == 0 ? zeros({c.m, c.n}) : ops::matmul(op_a, op_b);

  if (slices == 0) {
    cuda::sgemm(c.ta, c.tb, c.m, c.n, c.k, c.alpha, a.ptr(), a.ld, b.ptr(), b.ld, c.beta, cm.ptr(),
                cm.ld, nullptr, {.version = v, .tile = tile});
  } else {
    INFO("split-K, " << slices << " slices");
    const int64_t ws = cuda::sgemm_split_k_workspace_floats(c.m, c.n, slices);
    std::vector<float> workspace(static_cast<size_t>(ws) + 16, kSentinel);
    cuda::sgemm_split_k(c.ta, c.tb, c.m, c.n, c.k, c.alpha, a.ptr(), a.ld, b.ptr(), b.ld, c.beta,
                        cm.ptr(), cm.ld, slices, workspace.data(), nullptr,
                        {.version = v, .tile = tile});
    for (size_t i = static_cast<size_t>(ws); i < workspace.size(); ++i)
      REQUIRE(workspace[i] == kSentinel);  // nothing written past the workspace it asked for
  }

  const std::vector<float> p = prod.contiguous().to_vector<float>(), old = c0.to_vector<float>();
  std::vector<float> want(p.size());
  for (size_t i = 0; i < p.size(); ++i)
    want[i] = c.alpha * p[i] + (c.beta == 0.f ? 0.f : c.beta * old[i]);
  // Sums of k products of values uniform in [-1, 1] (random signs, E (a b)^2 = 1/9), in other
  // orders than ops::matmul's (split-K's slices included): within 6u sqrt(k / 3 * k / 9) of each
  // other times |alpha| (six standard deviations of two random-walk rounding errors, u = 2^-24);
  // alpha p + beta c rounds ~3 times on each side (6u of |alpha| k + |beta|, relative to |C|).
  const double kd = static_cast<double>(c.k);
  const double atol = 6 * kernels_test::kU * std::sqrt(kd / 3 * kd / 9) * std::abs(c.alpha);
  kernels_test::require_close(
      cm.view, from_vector(want, {c.m, c.n}),
      {6 * kernels_test::kU, atol + 6 * kernels_test::kU * std::abs(c.beta)}, "C");
  if (cm.ld > c.n)  // untouched: bit for bit
    kernels_test::require_equal(cm.storage.narrow(1, c.n, cm.ld - c.n),
                                full({c.m, cm.ld - c.n}, kSentinel), "C padding columns");
}

const std::vector<std::array<bool, 2>> kLayouts = {
    {false, false}, {false, true}, {true, false}, {true, true}};

}  // namespace

TEST_CASE("cuda kernels: sgemm_version_name and sgemm_tile_sizes", "[cuda][kernels][sgemm]") {
  CHECK(std::string(cuda::sgemm_version_name(SgemmVersion::naive)) == "naive");
  CHECK(std::string(cuda::sgemm_version_name(SgemmVersion::smem_tiled)) == "smem_tiled");
  CHECK(std::string(cuda::sgemm_version_name(SgemmVersion::register_blocked)) ==
        "register_blocked");
  CHECK(std::string(cuda::sgemm_version_name(SgemmVersion::vectorized)) == "vectorized");
  CHECK(static_cast<int>(SgemmVersion::vectorized) == 3);
  for (SgemmVersion v : cuda::kSgemmVersions) CHECK(!cuda::sgemm_tile_sizes(v).empty());
  CHECK(cuda::sgemm_tile_sizes(SgemmVersion::vectorized) == std::vector<int>{128, 64});
}

TEST_CASE("cuda kernels: every sgemm version matches ops::matmul in every layout",
          "[cuda][kernels][sgemm]") {
  // sgemm_naive_kernel, sgemm_smem_tiled_kernel, sgemm_register_blocked_kernel and
  // sgemm_vectorized_kernel with their default tiles; shapes below, at and above a tile, with k
  // not a multiple of the 8-deep slab or of 4 (partial float4 vectors).
  const std::vector<std::array<int64_t, 3>> shapes = {
      {1, 1, 1}, {17, 33, 9}, {64, 64, 16}, {70, 45, 37}, {129, 20, 11}};
  uint64_t seed = 1;
  for (SgemmVersion v : cuda::kSgemmVersions)
    for (const auto& lay : kLayouts)
      for (const auto& s : shapes) {
        const GemmCase c{s[0], s[1], s[2], lay[0], lay[1], 1.f, 0.f};
        check_gemm(c, v, 0, seed++);
      }
}

TEST_CASE("cuda kernels: sgemm tile sweep, alpha/beta and padded leading dims",
          "[cuda][kernels][sgemm]") {
  uint64_t seed = 100;
  for (SgemmVersion v : cuda::kSgemmVersions)
    for (int tile : cuda::sgemm_tile_sizes(v))
      for (const auto& lay : kLayouts) {
        // Leading dims 3 wider than the rows (v3 falls back to scalar), then multiples of 4
        // (v3's float4 path) with m, n, k off multiples of 4.
        check_gemm({37, 29, 23, lay[0], lay[1], 1.5f, -0.5f, 3}, v, tile, seed++);
        check_gemm({45, 39, 35, lay[0], lay[1], -0.75f, 2.f, 0, true}, v, tile, seed++);
      }
}

TEST_CASE("cuda kernels: sgemm_vectorized_kernel's float4 path and scalar fallback",
          "[cuda][kernels][sgemm]") {
  uint64_t seed = 300;
  for (int tile : cuda::sgemm_tile_sizes(SgemmVersion::vectorized))
    for (const auto& lay : kLayouts) {
      // Aligned, leading dims multiples of 4, edges not multiples of 4 (m, n, k = 1 mod 4 beyond
      // a tile): float4 loads with scalar vectors at the edges, float4 and scalar C stores.
      check_gemm({133, 69, 41, lay[0], lay[1], 1.f, 0.25f, 0, true}, SgemmVersion::vectorized, tile,
                 seed++);
      // Leading dims multiples of 4 again but every pointer one float past 16-byte alignment.
      check_gemm({33, 21, 13, lay[0], lay[1], 1.f, 1.f, 0, true, true}, SgemmVersion::vectorized,
                 tile, seed++);
      // Leading dims not multiples of 4.
      check_gemm({30, 22, 14, lay[0], lay[1], 2.f, 0.f, 1}, SgemmVersion::vectorized, tile, seed++);
    }
}

TEST_CASE("cuda kernels: sgemm with k = 0 scales C by beta and empty outputs are no-ops",
          "[cuda][kernels][sgemm]") {
  for (SgemmVersion v : cuda::kSgemmVersions) {
    check_gemm({5, 7, 0, false, false, 1.f, 0.5f}, v, 0, 7);
    check_gemm({5, 7, 0, true, true, 1.f, 0.f}, v, 0, 8);
    // m = 0 or n = 0: nothing to do, and null pointers are fine.
    CHECK_NOTHROW(cuda::sgemm(false, false, 0, 4, 3, 1.f, nullptr, 3, nullptr, 4, 0.f, nullptr, 4,
                              nullptr, {.version = v}));
  }
}

TEST_CASE("cuda kernels: sgemm rejects bad arguments with messages", "[cuda][kernels][sgemm]") {
  std::vector<float> a(64, 1.f), b(64, 1.f), c(64, 0.f);
  auto run = [&](int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc,
                 cuda::SgemmOptions o) {
    cuda::sgemm(false, false, m, n, k, 1.f, a.data(), lda, b.data(), ldb, 0.f, c.data(), ldc,
                nullptr, o);
  };
  CHECK_THROWS_WITH(run(-1, 2, 2, 2, 2, 2, {}),
                    Catch::Contains("cuda::sgemm") && Catch::Contains("expected sizes >= 0"));
  CHECK_THROWS_WITH(run(2, 4, 4, 3, 4, 4, {}),
                    Catch::Contains("lda >= 4") && Catch::Contains("got lda=3"));
  CHECK_THROWS_WITH(run(2, 2, 2, 2, 2, 2, {.version = SgemmVersion::vectorized, .tile = 32}),
                    Catch::Contains("tile size of vectorized") && Catch::Contains("got 32"));
  CHECK_THROWS_WITH(run(2, 2, 2, 2, 2, 2, {.version = static_cast<SgemmVersion>(7)}),
                    Catch::Contains("expected version 0..3") && Catch::Contains("got 7"));
}

TEST_CASE("cuda kernels: sgemm_split_k matches the product for every version, layout and slicing",
          "[cuda][kernels][sgemm]") {
  // Long k over a small C (conv2d's weight gradient): k not a multiple of the 16-element slice
  // unit, slices that leave the last one short, more slices than k can fill (fewer run), one slice
  // (the plain sgemm), alpha/beta with beta == 0 not reading C, and v3's float4 path (aligned, ld
  // multiples of 4: each slice's start stays 16-byte aligned) and its scalar fallback.
  uint64_t seed = 500;
  for (SgemmVersion v : cuda::kSgemmVersions)
    for (const auto& lay : kLayouts) {
      check_gemm({9, 13, 1000, lay[0], lay[1], 1.f, 0.f}, v, 0, seed++, 7);
      check_gemm({20, 12, 515, lay[0], lay[1], 0.5f, 1.5f, 0, true}, v, 0, seed++, 3);
    }
  for (const auto& lay : kLayouts) {
    check_gemm({9, 13, 40, lay[0], lay[1], 1.f, 1.f}, SgemmVersion::vectorized, 0, seed++, 64);
    check_gemm({9, 13, 100, lay[0], lay[1], 2.f, -1.f, 1}, SgemmVersion::vectorized, 64, seed++, 1);
    check_gemm({5, 7, 0, lay[0], lay[1], 1.f, 0.5f}, SgemmVersion::vectorized, 0, seed++, 4);
  }
}

TEST_CASE("cuda kernels: sgemm_split_k_slices, its workspace and bad arguments",
          "[cuda][kernels][sgemm]") {
  using cuda::sgemm_split_k_slices;
  // C of one 128-tile: slices grow with k (512 per slice) up to the target of 256 blocks.
  CHECK(sgemm_split_k_slices(64, 27, 100) == 1);
  CHECK(sgemm_split_k_slices(64, 27, 1024) == 2);
  CHECK(sgemm_split_k_slices(64, 27, 28672) == 56);
  CHECK(sgemm_split_k_slices(64, 27, 131072) == 256);
  CHECK(sgemm_split_k_slices(64, 27, int64_t{1} << 30) == cuda::kSgemmSplitKMaxSlices);
  // 5 tiles: ceil(256 / 5) = 52 blocks' worth; 256 tiles or more: never split.
  CHECK(sgemm_split_k_slices(64, 576, int64_t{1} << 20) == 52);
  CHECK(sgemm_split_k_slices(2048, 2048, int64_t{1} << 20) == 1);
  // Smaller tiles make more blocks of C.
  CHECK(sgemm_split_k_slices(64, 64, 1 << 20, {.version = SgemmVersion::vectorized, .tile = 64}) ==
        256);
  CHECK(sgemm_split_k_slices(128, 128, 1 << 20,
                             {.version = SgemmVersion::vectorized, .tile = 64}) == 64);
  CHECK(cuda::sgemm_split_k_workspace_floats(3, 5, 1) == 0);
  CHECK(cuda::sgemm_split_k_workspace_floats(3, 5, 4) == 60);

  std::vector<float> a(64 * 64, 1.f), b(64 * 64, 1.f), c(64, 0.f);
  auto run = [&](int64_t slices, float* ws) {
    cuda::sgemm_split_k(false, false, 8, 8, 64, 1.f, a.data(), 64, b.data(), 8, 0.f, c.data(), 8,
                        slices, ws, nullptr);
  };
  CHECK_THROWS_WITH(run(0, nullptr), Catch::Contains("cuda::sgemm_split_k") &&
                                         Catch::Contains("expected 1..256 slices, got 0"));
  CHECK_THROWS_WITH(run(4, nullptr), Catch::Contains("expected a workspace of 256 floats"));
  CHECK_NOTHROW(run(1, nullptr));  // one slice is the plain sgemm: no workspace
  CHECK(c[0] == 64.f);
}
