// matmul and linear on cuda tensors: cuBLAS in real builds (cuda/vendor/cublas_gemm.h), stoke's
// SGEMM (cuda/kernels/sgemm.h) in the emulated one; matmul_backward and sum_leading_dims composed
// from matmul and sum.
#include <vector>

#include "cuda/kernels/sgemm.h"
#ifndef STOKE_CUDA_EMU
#include "cuda/vendor/cublas_gemm.h"
#endif
#include "ops/check.h"
#include "ops/creation.h"
#include "ops/cuda/backend.h"
#include "ops/elementwise.h"
#include "ops/linalg.h"
#include "ops/linalg_detail.h"
#include "ops/math_mode.h"

namespace stoke::ops::cuda_glue {
namespace {

// C (m, n) = op(A) · op(B) (+ beta C) for 2-D operands of `dtype` on the device, row-major with
// leading dims. Real builds: cuBLAS, f32 (TF32 only when set_allow_tf32 is on; off, results match
// the CPU's to f32 rounding), f16 and bf16 with f32 accumulation. The emulated build has no cuBLAS:
// our SGEMM, f32 only (the callers cast half operands to f32 there, see half_via_f32).
void gemm(DType dtype, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void* a,
          int64_t lda, const void* b, int64_t ldb, float beta, void* c, int64_t ldc) {
#ifdef STOKE_CUDA_EMU
  STOKE_CHECK(dtype == DType::f32, "gemm", "the emulated SGEMM takes f32, got ", dtype);
  cuda::sgemm(ta, tb, m, n, k, 1.f, static_cast<const float*>(a), lda, static_cast<const float*>(b),
              ldb, beta, static_cast<float*>(c), ldc, launch_stream());
#else
  cuda::gemm(dtype, m, n, k, a, lda, b, ldb, c, ldc,
             {.trans_a = ta, .trans_b = tb, .beta = beta, .allow_tf32 = allow_tf32()},
             launch_stream());
#endif
}

// Whether a GEMM op on `dtype` runs through f32 copies (half types in the emulated build).
bool half_via_f32(DType dtype) {
#ifdef STOKE_CUDA_EMU
  return dtype != DType::f32;
#else
  (void)dtype;
  return false;
#endif
}

Tensor detached_f32(const Tensor& t) {
  return t.defined() ? t.detach().to(DType::f32) : t;
}

void check_gemm_operands(const char* op, const Tensor& a, const char* a_name, const Tensor& b,
                         const char* b_name) {
  check_float_dtype(op, a);
  check_same_dtype(op, a, a_name, b, b_name);
}

}  // namespace

Tensor CudaBackend::matmul(const Tensor& a_in, const Tensor& b_in) {
  check_gemm_operands("matmul", a_in, "a", b_in, "b");
  STOKE_CHECK(a_in.dim() >= 1 && b_in.dim() >= 1, "matmul",
              "expected operands with at least 1 dim, got shapes ", a_in.shape(), " and ",
              b_in.shape());
  // torch.matmul's rules, as on the CPU: a 1-D operand gains a dim (dropped from the result),
  // batch dims broadcast.
  const Tensor a2 = a_in.dim() == 1 ? a_in.detach().unsqueeze(0) : a_in.detach();
  const Tensor b2 = b_in.dim() == 1 ? b_in.detach().unsqueeze(1) : b_in.detach();
  STOKE_CHECK(a2.size(-1) == b2.size(-2), "matmul", "expected a's last dim to equal b's ",
              b_in.dim() == 1 ? "only" : "second-to-last", " dim, got shapes ", a_in.shape(),
              " and ", b_in.shape());
  if (half_via_f32(a_in.dtype()))
    return matmul(detached_f32(a_in), detached_f32(b_in)).to(a_in.dtype());
  const int64_t m = a2.size(-2), k = a2.size(-1), n = b2.size(-1);
  const Shape batch = broadcast_shapes(Shape(a2.shape().begin(), a2.shape().end() - 2),
                                       Shape(b2.shape().begin(), b2.shape().end() - 2), "matmul");
  Shape fa = batch, fb = batch, fc = batch;
  fa.insert(fa.end(), {m, k});
  fb.insert(fb.end(), {k, n});
  fc.insert(fc.end(), {m, n});
  Shape result = batch;
  if (a_in.dim() > 1) result.push_back(m);
  if (b_in.dim() > 1) result.push_back(n);
  Tensor c = empty_on(fc, a2.dtype(), a2.device());
  if (c.numel() == 0) return c.view(result);
  if (k == 0) {
    fill_(c, 0.0);
    return c.view(result);
  }
  // Broadcast batch operands are materialized; one GEMM per batch matrix (cuBLAS's strided batched
  // GEMM would save the launches; the training models only multiply 2-D operands).
  const Tensor a = a2.expand(fa).contiguous(), b = b2.expand(fb).contiguous();
  const int64_t count = c.numel() / (m * n);
  const size_t es = a.element_size();
  const auto* pa = static_cast<const char*>(a.data_ptr());
  const auto* pb = static_cast<const char*>(b.data_ptr());
  auto* pc = static_cast<char*>(c.data_ptr());
  for (int64_t i = 0; i < count; ++i)
    gemm(a.dtype(), false, false, m, n, k, pa + i * m * k * es, k, pb + i * k * n * es, n, 0.f,
         pc + i * m * n * es, n);
  return c.view(result);
}

Tensor CudaBackend::linear(const Tensor& x_in, const Tensor& w_in, const Tensor& bias) {
  check_gemm_operands("linear", x_in, "input", w_in, "weight");
  STOKE_CHECK(x_in.dim() >= 1 && w_in.dim() == 2 && x_in.size(-1) == w_in.size(1), "linear",
              "expected input (..., in_features) and weight (out_features, in_features), got ",
              x_in.shape(), " and ", w_in.shape());
  if (half_via_f32(x_in.dtype()))
    return linear(detached_f32(x_in), detached_f32(w_in), detached_f32(bias)).to(x_in.dtype());
  const int64_t in = w_in.size(1), out_f = w_in.size(0);
  Shape out_shape(x_in.shape().begin(), x_in.shape().end() - 1);
  out_shape.push_back(out_f);
  const Tensor x = x_in.detach().contiguous().reshape({-1, in});
  const Tensor w = w_in.detach().contiguous();
  const int64_t m = x.size(0);
  Tensor y = empty_on({m, out_f}, x.dtype(), x.device());
  float beta = 0.f;
  if (bias.defined()) {
    check_shape("linear", bias, "bias", {out_f});
    y.copy_(bias.detach().expand({m, out_f}));
    beta = 1.f;
  }
  if (y.numel() > 0)
    gemm(x.dtype(), false, true, m, out_f, in, x.data_ptr(), in, w.data_ptr(), in, beta,
         y.data_ptr(), out_f);
  return y.view(out_shape);
}

LinearGrads CudaBackend::linear_backward(const Tensor& grad_out, const Tensor& x_in,
                                         const Tensor& w_in, bool need_input, bool need_weight,
                                         bool need_bias) {
  check_gemm_operands("linear_backward", x_in, "input", w_in, "weight");
  check_same_dtype("linear_backward", grad_out, "grad_out", x_in, "input");
  if (half_via_f32(x_in.dtype())) {
    LinearGrads r = linear_backward(detached_f32(grad_out), detached_f32(x_in), detached_f32(w_in),
                                    need_input, need_weight, need_bias);
    for (Tensor* t : {&r.grad_input, &r.grad_weight, &r.grad_bias})
      if (t->defined()) *t = t->to(x_in.dtype());
    return r;
  }
  const int64_t in = w_in.size(1), out_f = w_in.size(0);
  Shape out_shape(x_in.shape().begin(), x_in.shape().end() - 1);
  out_shape.push_back(out_f);
  check_shape("linear_backward", grad_out, "grad_out", out_shape);
  const Tensor g = grad_out.detach().contiguous().reshape({-1, out_f});
  const int64_t rows = g.size(0);
  LinearGrads r;
  if (need_input) {
    const Tensor w = w_in.detach().contiguous();
    Tensor gx = empty_on({rows, in}, g.dtype(), g.device());
    if (gx.numel() > 0)  // gx (rows, in) = g (rows, out) · W (out, in)
      gemm(g.dtype(), false, false, rows, in, out_f, g.data_ptr(), out_f, w.data_ptr(), in, 0.f,
           gx.data_ptr(), in);
    r.grad_input = gx.view(x_in.shape());
  }
  if (need_weight) {
    const Tensor x = x_in.detach().contiguous().reshape({-1, in});
    Tensor gw = empty_on({out_f, in}, g.dtype(), g.device());
    if (rows == 0)
      fill_(gw, 0.0);
    else if (gw.numel() > 0)  // gW (out, in) = gᵀ (out, rows) · x (rows, in)
      gemm(g.dtype(), true, false, out_f, in, rows, g.data_ptr(), out_f, x.data_ptr(), in, 0.f,
           gw.data_ptr(), in);
    r.grad_weight = gw;
  }
  if (need_bias) r.grad_bias = ops::sum_leading_dims(grad_out);
  return r;
}

// --- composed from matmul and sum --------------------------------------------------------------

MatmulGrads CudaBackend::matmul_backward(const Tensor& grad_out, const Tensor& a_in,
                                         const Tensor& b_in, bool need_a, bool need_b) {
  check_same_dtype("matmul_backward", a_in, "a", b_in, "b");
  check_same_dtype("matmul_backward", grad_out, "grad_out", a_in, "a");
  linalg_detail::matmul_backward_shape(grad_out, a_in, b_in);
  // The device's GEMMs (ops::matmul dispatches them, broadcasting batch dims), then the sum over
  // the batch dims an operand was broadcast along.
  const Tensor g = grad_out.detach();
  MatmulGrads r;
  if (need_a) r.grad_a = ops::sum_to(ops::matmul(g, b_in.detach().transpose(-1, -2)), a_in.shape());
  if (need_b) r.grad_b = ops::sum_to(ops::matmul(a_in.detach().transpose(-1, -2), g), b_in.shape());
  return r;
}

Tensor CudaBackend::sum_leading_dims(const Tensor& g_in) {
  STOKE_CHECK(g_in.dim() >= 1, "sum_leading_dims", "expected at least 1 dim, got shape ",
              g_in.shape());
  std::vector<int64_t> dims;
  for (int64_t d = 0; d + 1 < g_in.dim(); ++d) dims.push_back(d);
  return dims.empty() ? g_in.detach().clone() : sum(g_in, dims, false);
}

}  // namespace stoke::ops::cuda_glue
