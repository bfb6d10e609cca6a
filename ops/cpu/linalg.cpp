// CPU matmul / linear: operands are reduced to (batch of) strided matrices that GEMM can read
// directly (row-major or transposed), and batch dims are coalesced so that a stack of matrices is
// one gemm_batched call, or a single GEMM when the stack can be folded into one tall matrix.
#include <algorithm>
#include <vector>

#include "core/parallel.h"
#include "core/strided.h"
#include "ops/check.h"
#include "ops/cpu/backend.h"
#include "ops/cpu/gemm.h"
#include "ops/creation.h"
#include "ops/linalg.h"
#include "ops/linalg_detail.h"

namespace stoke::ops::cpu {
namespace {

// How GEMM reads the trailing (rows x cols) matrix of a tensor: stored row-major with row stride
// ld, or stored transposed (column-major) with column stride ld.
struct MatLayout {
  bool usable = false;
  bool trans = false;
  int64_t ld = 1;
};

MatLayout mat_layout(const Tensor& t) {
  const int64_t r = t.size(-2), c = t.size(-1), sr = t.stride(-2), sc = t.stride(-1);
  // Size-1 dims may carry any stride: they are never stepped along.
  if ((sc == 1 || c <= 1) && (r <= 1 || sr >= std::max<int64_t>(c, 1)))
    return {true, false, r <= 1 ? std::max<int64_t>(c, 1) : sr};
  if ((sr == 1 || r <= 1) && (c <= 1 || sc >= std::max<int64_t>(r, 1)))
    return {true, true, c <= 1 ? std::max<int64_t>(r, 1) : sc};
  return {};
}

// The tensor itself when GEMM can read its trailing matrices in place, else a contiguous copy.
Tensor blas_ready(const Tensor& t) {
  return mat_layout(t).usable ? t : t.contiguous();
}

// C[i] = A[i]·B[i] (+ beta·C[i]) over the batch dims of C; A and B are already expanded to C's
// batch shape (stride 0 on broadcast dims) and readable by GEMM. C's trailing matrix is
// contiguous; C may have stride 0 on batch dims (a reduction), in which case beta must be 1 and
// the products are summed in batch order.
template <class T>
void batched_product(const Tensor& A, const Tensor& B, const Tensor& C, T beta) {
  const MatLayout la = mat_layout(A), lb = mat_layout(B);
  const int64_t m = C.size(-2), n = C.size(-1), k = A.size(-1);
  const int64_t ldc = std::max<int64_t>(n, 1);
  const int64_t nb = C.dim() - 2;
  Shape batch(C.shape().begin(), C.shape().begin() + nb);
  std::array<Shape, 3> strides;
  for (int i = 0; i < 3; ++i) strides[i] = Shape(nb);
  for (int64_t d = 0; d < nb; ++d) {
    strides[0][d] = A.stride(d);
    strides[1][d] = B.stride(d);
    strides[2][d] = C.stride(d);
  }
  const StridedGeometry<3> g = coalesce<3>(batch, strides);
  const T* a0 = A.data<T>();
  const T* b0 = B.data<T>();
  T* c0 = C.data<T>();
  for_each_row(
      g, 0, g.rows(),
      [&](const std::array<int64_t, 3>& off, int64_t count, const std::array<int64_t, 3>& st) {
        const T* a = a0 + off[0];
        const T* b = b0 + off[1];
        T* c = c0 + off[2];
        if (count > 1 && st[1] == 0 && !la.trans && st[0] == m * la.ld && st[2] == m * ldc) {
          // A stack of row blocks times one B: a single tall GEMM.
          cpu::gemm(false, lb.trans, count * m, n, k, T(1), a, la.ld, b, lb.ld, beta, c, ldc);
        } else if (count > 1 && st[2] == 0 && la.trans && !lb.trans && st[0] == k * la.ld &&
                   st[1] == k * lb.ld) {
          // Sum over the stack of Aᵢᵀ·Bᵢ: one GEMM with a longer contraction.
          cpu::gemm(true, false, m, n, count * k, T(1), a, la.ld, b, lb.ld, beta, c, ldc);
        } else {
          cpu::gemm_batched(la.trans, lb.trans, count, m, n, k, T(1), a, la.ld, st[0], b, lb.ld,
                            st[1], beta, c, ldc, st[2]);
        }
      });
}

// The product a·b (both >= 2-D, GEMM-readable) reduced to `shape` (a broadcast of which is the
// full product's shape): dims of the product that `shape` broadcasts along are summed.
Tensor product_to_shape(const Tensor& a, const Tensor& b, const Shape& full, const Shape& shape) {
  const int64_t nb = static_cast<int64_t>(full.size()) - 2;
  Shape a_full(full.begin(), full.begin() + nb), b_full = a_full;
  a_full.push_back(a.size(-2));
  a_full.push_back(a.size(-1));
  b_full.push_back(b.size(-2));
  b_full.push_back(b.size(-1));
  const Tensor C = empty(shape, {.dtype = a.dtype()});
  const Tensor Ce = C.expand(full);
  bool reduce = false;
  for (int64_t d = 0; d < nb; ++d) reduce |= Ce.stride(d) == 0 && Ce.size(d) > 1;
  if (reduce) fill_(C, 0);
  dispatch_float(a.dtype(), "matmul", [&](auto tag) {
    using T = typename decltype(tag)::type;
    batched_product<T>(a.expand(a_full), b.expand(b_full), Ce, reduce ? T(1) : T(0));
  });
  return C;
}

void check_operands(const char* op, const Tensor& a, const char* a_name, const Tensor& b,
                    const char* b_name) {
  check_float(op, a, a_name);
  check_same_dtype(op, a, a_name, b, b_name);
}

Shape batch_of(const Tensor& t) {
  return Shape(t.shape().begin(), t.shape().end() - 2);
}

void check_linear(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  STOKE_CHECK(x.defined() && weight.defined(), op, "expected defined input and weight");
  check_float(op, x, "input");
  check_same_dtype(op, x, "input", weight, "weight");
  check_dim(op, weight, "weight", 2, "(out_features, in_features)");
  STOKE_CHECK(x.dim() >= 1 && x.size(-1) == weight.size(1), op,
              "expected input (..., in_features) with in_features = ", weight.size(1),
              " to match weight of shape ", weight.shape(), ", got input of shape ", x.shape());
  if (bias.defined()) {
    check_same_dtype(op, x, "input", bias, "bias");
    check_shape(op, bias, "bias", {weight.size(0)});
  }
}

}  // namespace

Tensor CpuBackend::matmul(const Tensor& a_in, const Tensor& b_in) {
  check_operands("matmul", a_in, "a", b_in, "b");
  STOKE_CHECK(a_in.dim() >= 1 && b_in.dim() >= 1, "matmul",
              "expected operands with at least 1 dim, got shapes ", a_in.shape(), " and ",
              b_in.shape());
  // Views taken here must not be recorded by autograd: the caller records the whole op.
  const Tensor a = a_in.dim() == 1 ? a_in.detach().unsqueeze(0) : a_in.detach();
  const Tensor b = b_in.dim() == 1 ? b_in.detach().unsqueeze(1) : b_in.detach();
  STOKE_CHECK(a.size(-1) == b.size(-2), "matmul", "expected a's last dim to equal b's ",
              b_in.dim() == 1 ? "only" : "second-to-last", " dim, got shapes ", a_in.shape(),
              " and ", b_in.shape());
  Shape full = broadcast_shapes(batch_of(a), batch_of(b), "matmul");
  full.push_back(a.size(-2));
  full.push_back(b.size(-1));
  Tensor out = product_to_shape(blas_ready(a), blas_ready(b), full, full);
  Shape result(full.begin(), full.end() - 2);
  if (a_in.dim() > 1) result.push_back(full[full.size() - 2]);
  if (b_in.dim() > 1) result.push_back(full.back());
  return out.view(result);
}

Tensor CpuBackend::linear(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in) {
  check_linear("linear", x_in, weight_in, bias_in);
  const int64_t in = weight_in.size(1), out_f = weight_in.size(0);
  Shape out_shape(x_in.shape().begin(), x_in.shape().end() - 1);
  out_shape.push_back(out_f);
  const Tensor x = blas_ready(x_in.detach().reshape({-1, in}));
  const Tensor w = blas_ready(weight_in.detach());
  const int64_t rows = x.size(0);
  Tensor y = empty({rows, out_f}, {.dtype = x.dtype()});
  const MatLayout lx = mat_layout(x), lw = mat_layout(w);
  dispatch_float(x.dtype(), "linear", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* yp = y.data<T>();
    T beta = 0;
    if (bias_in.defined()) {
      // Start C at the bias and let GEMM accumulate onto it (addmm), saving a pass over y.
      const Tensor bias = bias_in.detach().contiguous();
      const T* bp = bias.data<T>();
      parallel_for(0, rows, std::max<int64_t>(1, 65536 / std::max<int64_t>(out_f, 1)),
                   [&](int64_t r0, int64_t r1) {
                     for (int64_t r = r0; r < r1; ++r) std::copy(bp, bp + out_f, yp + r * out_f);
                   });
      beta = 1;
    }
    // y = x·Wᵀ: W stored (out, in) row-major is read transposed.
    cpu::gemm(lx.trans, !lw.trans, rows, out_f, in, T(1), x.data<T>(), lx.ld, w.data<T>(), lw.ld,
              beta, yp, std::max<int64_t>(out_f, 1));
  });
  return y.view(out_shape);
}

LinearGrads CpuBackend::linear_backward(const Tensor& grad_out, const Tensor& x_in,
                                        const Tensor& weight_in, bool need_input, bool need_weight,
                                        bool need_bias) {
  check_linear("linear_backward", x_in, weight_in, Tensor());
  check_same_dtype("linear_backward", grad_out, "grad_out", x_in, "input");
  const int64_t in = weight_in.size(1), out_f = weight_in.size(0);
  Shape out_shape(x_in.shape().begin(), x_in.shape().end() - 1);
  out_shape.push_back(out_f);
  check_shape("linear_backward", grad_out, "grad_out", out_shape);
  const Tensor g = blas_ready(grad_out.detach().reshape({-1, out_f}));
  const int64_t rows = g.size(0);
  const MatLayout lg = mat_layout(g);
  LinearGrads r;
  dispatch_float(x_in.dtype(), "linear_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (need_input) {
      const Tensor w = blas_ready(weight_in.detach());
      const MatLayout lw = mat_layout(w);
      Tensor gx = empty({rows, in}, {.dtype = x_in.dtype()});
      cpu::gemm(lg.trans, lw.trans, rows, in, out_f, T(1), g.data<T>(), lg.ld, w.data<T>(), lw.ld,
                T(0), gx.data<T>(), std::max<int64_t>(in, 1));
      r.grad_input = gx.view(x_in.shape());
    }
    if (need_weight) {
      const Tensor x = blas_ready(x_in.detach().reshape({-1, in}));
      const MatLayout lx = mat_layout(x);
      Tensor gw = empty({out_f, in}, {.dtype = x_in.dtype()});
      cpu::gemm(!lg.trans, lx.trans, out_f, in, rows, T(1), g.data<T>(), lg.ld, x.data<T>(), lx.ld,
                T(0), gw.data<T>(), std::max<int64_t>(in, 1));
      r.grad_weight = gw;
    }
  });
  if (need_bias) r.grad_bias = ops::sum_leading_dims(grad_out);
  return r;
}

// --- matmul_backward and sum_leading_dims (the CUDA backend composes matmul and sum) ----------

// Reads the transposed operands in place and sums the broadcast batch dims inside GEMM.
MatmulGrads CpuBackend::matmul_backward(const Tensor& grad_out, const Tensor& a_in,
                                        const Tensor& b_in, bool need_a, bool need_b) {
  // The CPU kernels' dtypes (f32, f64), checked before the shapes as always.
  check_float("matmul_backward", a_in, "a");
  check_same_dtype("matmul_backward", a_in, "a", b_in, "b");
  check_float("matmul_backward", grad_out, "grad_out");
  check_same_dtype("matmul_backward", grad_out, "grad_out", a_in, "a");
  const Shape full = linalg_detail::matmul_backward_shape(grad_out, a_in, b_in);
  const Tensor g = blas_ready(grad_out.detach());
  MatmulGrads r;
  if (need_a) {
    const Tensor bt = blas_ready(b_in.detach()).transpose(-1, -2);
    Shape fa = full;
    fa.back() = a_in.size(-1);
    r.grad_a = product_to_shape(g, bt, fa, a_in.shape());
  }
  if (need_b) {
    const Tensor at = blas_ready(a_in.detach()).transpose(-1, -2);
    Shape fb = full;
    fb[fb.size() - 2] = b_in.size(-2);
    r.grad_b = product_to_shape(at, g, fb, b_in.shape());
  }
  return r;
}

Tensor CpuBackend::sum_leading_dims(const Tensor& g_in) {
  check_float("sum_leading_dims", g_in, "input");
  STOKE_CHECK(g_in.dim() >= 1, "sum_leading_dims", "expected at least 1 dim, got shape ",
              g_in.shape());
  const Tensor g = g_in.detach().contiguous();
  const int64_t n = g.size(-1), rows = n == 0 ? 0 : g.numel() / n;
  Tensor out = empty({n}, {.dtype = g.dtype()});
  dispatch_float(g.dtype(), "sum_leading_dims", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* gp = g.data<T>();
    T* op = out.data<T>();
    // Row chunks each sum into their own partial row (the inner loop over columns vectorizes);
    // the partials are then added in chunk order, so the result does not depend on timing.
    const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(n, 1));
    const int64_t chunks = std::max<int64_t>(1, parallel_chunk_count(rows, grain));
    std::vector<T> partial(static_cast<size_t>(chunks * n), T(0));
    parallel_chunks(0, rows, grain, [&](int64_t chunk, int64_t r0, int64_t r1) {
      T* acc = partial.data() + chunk * n;
      for (int64_t r = r0; r < r1; ++r) {
        const T* row = gp + r * n;
        for (int64_t j = 0; j < n; ++j) acc[j] += row[j];
      }
    });
    std::copy(partial.begin(), partial.begin() + n, op);
    for (int64_t c = 1; c < chunks; ++c)
      for (int64_t j = 0; j < n; ++j) op[j] += partial[c * n + j];
  });
  return out;
}

}  // namespace stoke::ops::cpu
