// cuBLAS GEMM for matmul/linear (real builds only). Row-major operands as stoke stores them, f32
// (TF32 tensor cores opt-in), f16 and bf16 with f32 accumulation, single or strided-batched.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/tensor.h"
#include "cuda/compat.h"

namespace stoke::cuda {

// gemm(..., GemmOptions{.trans_b = true, .allow_tf32 = true}).
struct GemmOptions {
  bool trans_a = false;  // use Aᵀ: A is stored (k, m)
  bool trans_b = false;  // use Bᵀ: B is stored (n, k)
  float alpha = 1.0f;
  float beta = 0.0f;        // C = alpha·op(A)·op(B) + beta·C
  bool allow_tf32 = false;  // f32 only: tensor cores with 10-bit mantissa inputs (~1e-3 rel.)
  int64_t batch = 1;        // strided-batched when > 1
  int64_t stride_a = 0;     // elements between consecutive batch matrices
  int64_t stride_b = 0;
  int64_t stride_c = 0;
};

// Row-major C (m, n, leading dimension ldc) = alpha·op(A)·op(B) + beta·C with op(A) (m, k) and
// op(B) (k, n); lda/ldb are the row lengths of A and B as stored. dtype is f32, f16 or bf16 (all
// three operands), accumulation is f32. Runs on `stream` on the current device.
void gemm(DType dtype, int64_t m, int64_t n, int64_t k, const void* a, int64_t lda, const void* b,
          int64_t ldb, void* c, int64_t ldc, const GemmOptions& options, cudaStream_t stream);

// a (…, m, k) · b (…, k, n) for contiguous cuda tensors of one dtype, 2-D or 3-D (batched, same
// batch size) -> a new (…, m, n) tensor, on the current stream of their device.
Tensor cublas_matmul(const Tensor& a, const Tensor& b, bool allow_tf32 = false);
// x (N, in) · weightᵀ (weight (out, in)) -> (N, out), as linear without bias.
Tensor cublas_linear(const Tensor& x, const Tensor& weight, bool allow_tf32 = false);

}  // namespace stoke::cuda
