// CUDA elementwise launchers: binary arithmetic with NumPy broadcasting (any strides, up to
// kMaxDims dims after merging), tensor-scalar arithmetic, the unary maps of ops/elementwise.h and
// their backward kernels. Dtypes f32, f16 and bf16 (f16/bf16 are loaded to f32, computed in f32
// and rounded to nearest even on store). Contiguous operands take 128-bit vectorized loads and
// stores when every pointer is 16-byte aligned; any size and any alignment work. The output may
// alias an input (in-place ops): each element is read before it is written, by the same thread.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/dtype.h"
#include "core/elementwise_ops.h"
#include "cuda/compat.h"
#include "cuda/kernels/elementwise_util.h"

namespace stoke::cuda {

// Binary arithmetic, as ops::add/sub/mul/div/maximum/minimum (maximum/minimum propagate NaN).
enum class BinaryOp : uint8_t { STOKE_BINARY_OPS(STOKE_ENUMERATOR) };

// Unary maps (core/elementwise_ops.h), then the two with parameters (UnaryParams).
enum class UnaryOp : uint8_t { STOKE_UNARY_OPS(STOKE_ENUMERATOR) leaky_relu, clamp };

// Backward kernels: out = f(grad, saved), saved being what ops::NAME_backward takes (the
// forward's output for relu/sigmoid/tanh/sqrt/rsqrt, its input for leaky_relu/gelu/clamp/abs).
enum class UnaryBackwardOp : uint8_t { relu, STOKE_UNARY_GRAD_OPS(STOKE_ENUMERATOR) };

// Parameters of the parametrized maps: leaky_relu's slope, clamp's bounds (±inf for a missing
// bound, which behaves exactly like no bound, NaN passing through).
struct UnaryParams {
  float negative_slope = 0.01f;
  float min = -INFINITY;
  float max = INFINITY;
};

// Offsets of (out, a, b) over the output shape, for binary().
using BinaryOffsets = StridedOffsets<3>;

// Builds the offsets of a broadcasting binary op: out_shape (ndim dims) and the strides of out, a
// and b already broadcast to it (0 on broadcast dims; core's broadcast_strides gives them).
BinaryOffsets make_binary_offsets(const int64_t* out_shape, int ndim, const int64_t* out_strides,
                                  const int64_t* a_strides, const int64_t* b_strides);

// out = a op (alpha * b) for add/sub (alpha is ignored by the other ops) over `offsets`
// (numel elements). Contiguous, same-shaped operands take the vectorized path.
void binary(BinaryOp op, DType dtype, const void* a, const void* b, void* out,
            const BinaryOffsets& offsets, int64_t numel, cudaStream_t stream, float alpha = 1.f);

// Contiguous same-shaped operands of n elements: out = a op (alpha * b).
void binary(BinaryOp op, DType dtype, const void* a, const void* b, void* out, int64_t n,
            cudaStream_t stream, float alpha = 1.f);

// out = x op s, or s op x with scalar_first (sub(s, x), div(s, x)); contiguous, n elements.
void binary_scalar(BinaryOp op, DType dtype, const void* x, double s, void* out, int64_t n,
                   cudaStream_t stream, bool scalar_first = false);

// out = f(x) for contiguous x and out of n elements.
void unary(UnaryOp op, DType dtype, const void* x, void* out, int64_t n, cudaStream_t stream,
           const UnaryParams& params = {});

// out = f'(saved) * grad (see UnaryBackwardOp) for contiguous operands of n elements.
void unary_backward(UnaryBackwardOp op, DType dtype, const void* grad, const void* saved, void* out,
                    int64_t n, cudaStream_t stream, const UnaryParams& params = {});

// --- pow, lerp and the backward maps over broadcast operands -------------------------------------

// The backward maps over broadcast (or any strided) operands: offsets of (out, grad, saved) from
// make_binary_offsets; contiguous operands take the vectorized path.
void unary_backward(UnaryBackwardOp op, DType dtype, const void* grad, const void* saved, void* out,
                    const BinaryOffsets& offsets, int64_t n, cudaStream_t stream,
                    const UnaryParams& params = {});

// out = x ** exponent (contiguous, n elements) as ops::pow computes it: x * x for 2, x for 1,
// sqrt(x) for 0.5, powf(x, exponent) otherwise.
void pow(DType dtype, const void* x, void* out, int64_t n, double exponent, cudaStream_t stream);

// out = grad * exponent * x^(exponent - 1) as ops::pow_backward (0 for exponent 0, grad * 2x for
// 2, grad for 1); offsets of (out, grad, x).
void pow_backward(DType dtype, const void* grad, const void* x, void* out,
                  const BinaryOffsets& offsets, int64_t n, double exponent, cudaStream_t stream);

// out = a + weight * (b - a) (ops::lerp_ with out == a); offsets of (out, a, b).
void lerp(DType dtype, const void* a, const void* b, void* out, const BinaryOffsets& offsets,
          int64_t n, float weight, cudaStream_t stream);

// Backward kernels of three broadcast operands (grad, a, b), as the ops:: functions:
//   div_other  -grad * a / b^2                                         (div_backward_other)
//   maximum    grad where a > b, grad / 2 where a == b, 0 elsewhere    (maximum_backward)
//   minimum    the same with a < b                                     (minimum_backward)
enum class TernaryBackwardOp : uint8_t { div_other, maximum, minimum };
// Offsets of (out, grad, a, b) over the broadcast shape, from make_strided_offsets<4>.
using TernaryOffsets = StridedOffsets<4>;
void ternary_backward(TernaryBackwardOp op, DType dtype, const void* grad, const void* a,
                      const void* b, void* out, const TernaryOffsets& offsets, int64_t n,
                      cudaStream_t stream);

}  // namespace stoke::cuda
