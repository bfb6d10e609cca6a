#include "ops/cpu/gemm.h"

#include <cblas.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <type_traits>

#include "core/error.h"
#include "core/parallel.h"
#include "ops/cpu/transpose.h"
#include "ops/creation.h"

// Declared here rather than taken from cblas.h so that the one call site does not depend on which
// OpenBLAS header variant is installed.
extern "C" void openblas_set_num_threads(int);

namespace stoke::ops::cpu {
namespace {

// Below this many multiply-adds a product runs as one call: the pool's hand-off costs more than
// the second core saves.
constexpr int64_t kSplitMacs = int64_t{1} << 20;
// Chunk boundaries are multiples of this many rows/columns so that OpenBLAS's register blocks are
// not cut into ragged pieces.
constexpr int64_t kGemmBlock = 16;

// OpenBLAS 0.3.21 (Debian 12) does not know recent Xeons (Sapphire/Emerald Rapids): its
// DYNAMIC_ARCH detection falls back to the SSE3 "Prescott" kernels, 5-15x slower than the AVX-512
// ones the CPU can run. When that fallback was taken and the user did not choose a core with
// OPENBLAS_CORETYPE, re-run OpenBLAS's core selection with the best kernel set the CPU supports.
// The hooks are looked up at run time, so a non-DYNAMIC_ARCH OpenBLAS simply skips this.
void select_blas_kernels() {
  using InitFn = void (*)();
  using NameFn = char* (*)();
  auto corename = reinterpret_cast<NameFn>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  auto quit = reinterpret_cast<InitFn>(dlsym(RTLD_DEFAULT, "gotoblas_dynamic_quit"));
  auto init = reinterpret_cast<InitFn>(dlsym(RTLD_DEFAULT, "gotoblas_dynamic_init"));
  if (!corename || !quit || !init || std::getenv("OPENBLAS_CORETYPE")) return;
  const char* name = corename();
  if (!name || std::strcmp(name, "Prescott") != 0) return;
  const char* best = nullptr;
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
    best = "SkylakeX";
  else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    best = "Haswell";
  if (!best) return;
  setenv("OPENBLAS_CORETYPE", best, 0);
  quit();
  init();
  unsetenv("OPENBLAS_CORETYPE");
}

void ensure_single_threaded_blas() {
  static std::once_flag once;
  std::call_once(once, [] {
    select_blas_kernels();
    openblas_set_num_threads(1);
  });
}

CBLAS_TRANSPOSE tr(bool t) {
  return t ? CblasTrans : CblasNoTrans;
}

void blas(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, tr(ta), tr(tb), static_cast<blasint>(m), static_cast<blasint>(n),
              static_cast<blasint>(k), alpha, a, static_cast<blasint>(lda), b,
              static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

void blas(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
          int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, tr(ta), tr(tb), static_cast<blasint>(m), static_cast<blasint>(n),
              static_cast<blasint>(k), alpha, a, static_cast<blasint>(lda), b,
              static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

// Whether an f32 product runs stoke's AVX-512 GEMM: where gemm_fastest does (OpenBLAS runs
// narrower kernels than the CPU has), with cblas's alpha 1 and beta 0 or 1 (gemm_avx512 computes
// C = A B or C += A B), and big enough to fill its 12 x 32 register tiles: a product 16 columns
// wide would leave half of each tile's lanes idle, where OpenBLAS's AVX2 tiles are full.
bool own_kernel_fits(int64_t m, int64_t n, int64_t k, float alpha, float beta) {
  return gemm_fastest_runs_avx512() && alpha == 1.0f && (beta == 0.0f || beta == 1.0f) && m >= 24 &&
         n >= 32 && k >= 16;
}

// C (+)= op(A) op(B) with gemm_avx512, split over the pool as gemm_impl splits OpenBLAS's calls:
// rows in multiples of its 12-row tiles, or columns in multiples of 32. op(B) = Bᵀ is copied
// transposed first (k x n, O(k n) against the product's O(m n k)): by each column chunk for its
// own columns where the columns are split (a linear layer's Wᵀ: both cores transpose, and each
// chunk's panel is still in cache when its product reads it), else by the whole pool up front.
void own_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
              const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const int64_t a_row = ta ? 1 : lda, a_col = ta ? lda : 1;
  const bool accumulate = beta != 0.0f;
  // A Tensor, so that the caching allocator hands the same pages back call after call (a fresh
  // buffer was faulted in page by page every call) and no thread keeps one past its use.
  Tensor bt;
  float* bt_data = nullptr;
  if (tb) {
    bt = empty({k * n}, {.dtype = DType::f32});
    bt_data = bt.data<float>();
  }
  // op(B)'s columns [c0, c1): transposed into bt first when B is stored transposed.
  auto columns = [&](int64_t c0, int64_t c1) -> const float* {
    if (!tb) return b + c0;
    transpose(b + c0 * ldb, c1 - c0, k, ldb, bt_data + c0, n);
    return bt_data + c0;
  };
  const int64_t bt_ld = tb ? n : ldb;
  const bool serial = num_threads() == 1 || in_parallel_region() || m * n * k < kSplitMacs;
  if (serial || m < n) {
    constexpr int64_t cols = 32;
    const int64_t panels = (n + cols - 1) / cols;
    parallel_for(0, panels, serial ? panels : 1, [&](int64_t b0, int64_t b1) {
      const int64_t c0 = b0 * cols, c1 = std::min(n, b1 * cols);
      gemm_avx512(m, c1 - c0, k, a, a_row, a_col, columns(c0, c1), bt_ld, accumulate, c + c0, ldc);
    });
    return;
  }
  if (tb) {
    // Blocks of 16 of B's rows (B (n, k) -> bt (k, n)), at least ~16K floats per task.
    constexpr int64_t blk = 16;
    parallel_for(0, (n + blk - 1) / blk, std::max<int64_t>(1, 16384 / (blk * k)),
                 [&](int64_t j0, int64_t j1) { columns(j0 * blk, std::min(n, j1 * blk)); });
  }
  const float* bp = tb ? bt_data : b;
  constexpr int64_t rows = 12;
  parallel_for(0, (m + rows - 1) / rows, 1, [&](int64_t b0, int64_t b1) {
    const int64_t r0 = b0 * rows, r1 = std::min(m, b1 * rows);
    gemm_avx512(r1 - r0, n, k, a + r0 * a_row, a_row, a_col, bp, bt_ld, accumulate, c + r0 * ldc,
                ldc);
  });
}

template <class T>
void gemm_impl(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
               const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  STOKE_CHECK(m >= 0 && n >= 0 && k >= 0, "gemm", "expected non-negative sizes, got m=", m,
              " n=", n, " k=", k);
  STOKE_CHECK(lda >= std::max<int64_t>(1, ta ? m : k) && ldb >= std::max<int64_t>(1, tb ? k : n) &&
                  ldc >= std::max<int64_t>(1, n),
              "gemm", "leading dimensions too small: lda=", lda, " ldb=", ldb, " ldc=", ldc,
              " for m=", m, " n=", n, " k=", k, " trans_a=", ta, " trans_b=", tb);
  if (m == 0 || n == 0) return;
  if (k == 0) {
    // BLAS would scale C by beta; keep beta == 0 from reading C.
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
    return;
  }
  ensure_single_threaded_blas();
  if constexpr (std::is_same_v<T, float>) {
    if (own_kernel_fits(m, n, k, alpha, beta))
      return own_gemm(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
  }
  const int threads = num_threads();
  if (threads == 1 || in_parallel_region() || m * n * k < kSplitMacs) {
    blas(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  // Split the larger side of C so that each chunk keeps a tall/wide, cache-friendly panel; the
  // other operand is shared (read-only) by all chunks.
  if (m >= n) {
    const int64_t blocks = (m + kGemmBlock - 1) / kGemmBlock;
    parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
      const int64_t r0 = b0 * kGemmBlock, r1 = std::min(m, b1 * kGemmBlock);
      const T* ap = ta ? a + r0 : a + r0 * lda;
      blas(ta, tb, r1 - r0, n, k, alpha, ap, lda, b, ldb, beta, c + r0 * ldc, ldc);
    });
  } else {
    const int64_t blocks = (n + kGemmBlock - 1) / kGemmBlock;
    parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
      const int64_t c0 = b0 * kGemmBlock, c1 = std::min(n, b1 * kGemmBlock);
      const T* bp = tb ? b + c0 * ldb : b + c0;
      blas(ta, tb, m, c1 - c0, k, alpha, a, lda, bp, ldb, beta, c + c0, ldc);
    });
  }
}

}  // namespace

bool gemm_kernels_avx512() {
  static const bool avx512 = [] {
    ensure_single_threaded_blas();  // OpenBLAS's final kernel choice
    using NameFn = char* (*)();
    auto corename = reinterpret_cast<NameFn>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
    const char* name = corename ? corename() : nullptr;
    if (!name) return false;
    for (const char* set : {"SkylakeX", "Cooperlake", "SapphireRapids"})
      if (std::strcmp(name, set) == 0) return true;
    return false;
  }();
  return avx512;
}

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  gemm_impl(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
          const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c,
          int64_t ldc) {
  gemm_impl(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

template <class T>
void gemm_batched(bool trans_a, bool trans_b, int64_t batch, int64_t m, int64_t n, int64_t k,
                  T alpha, const T* a, int64_t lda, int64_t stride_a, const T* b, int64_t ldb,
                  int64_t stride_b, T beta, T* c, int64_t ldc, int64_t stride_c) {
  if (batch <= 0) return;
  auto one = [&](int64_t i, T beta_i) {
    gemm(trans_a, trans_b, m, n, k, alpha, a + i * stride_a, lda, b + i * stride_b, ldb, beta_i,
         c + i * stride_c, ldc);
  };
  // Entries that share C must run in order (deterministic sum); so must large entries, which
  // gemm splits over the pool itself.
  const bool serial = stride_c == 0 || batch == 1 || in_parallel_region() ||
                      batch < num_threads() || m * n * k >= 8 * kSplitMacs;
  if (serial) {
    for (int64_t i = 0; i < batch; ++i) one(i, stride_c == 0 && i > 0 ? T(1) : beta);
    return;
  }
  const int64_t grain = std::max<int64_t>(1, kSplitMacs / std::max<int64_t>(1, m * n * k));
  parallel_for(0, batch, grain, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) one(i, beta);
  });
}

template void gemm_batched<float>(bool, bool, int64_t, int64_t, int64_t, int64_t, float,
                                  const float*, int64_t, int64_t, const float*, int64_t, int64_t,
                                  float, float*, int64_t, int64_t);
template void gemm_batched<double>(bool, bool, int64_t, int64_t, int64_t, int64_t, double,
                                   const double*, int64_t, int64_t, const double*, int64_t, int64_t,
                                   double, double*, int64_t, int64_t);

}  // namespace stoke::ops::cpu
