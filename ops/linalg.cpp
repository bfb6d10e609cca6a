// The linalg entry points: checks, then the backend of the tensors' device (ops/cpu/linalg.cpp,
// ops/cuda/linalg.cpp).
#include "ops/linalg.h"

#include <algorithm>

#include "core/profiler.h"
#include "ops/backend.h"
#include "ops/check.h"
#include "ops/linalg_detail.h"

namespace stoke::ops {
namespace {

Shape batch_of(const Tensor& t) {
  return Shape(t.shape().begin(), t.shape().end() - 2);
}

}  // namespace

namespace linalg_detail {

Shape matmul_backward_shape(const Tensor& grad_out, const Tensor& a_in, const Tensor& b_in) {
  STOKE_CHECK(a_in.dim() >= 2 && b_in.dim() >= 2, "matmul_backward",
              "expected operands with at least 2 dims, got shapes ", a_in.shape(), " and ",
              b_in.shape());
  Shape full = broadcast_shapes(batch_of(a_in), batch_of(b_in), "matmul_backward");
  full.push_back(a_in.size(-2));
  full.push_back(b_in.size(-1));
  check_shape("matmul_backward", grad_out, "grad_out", full);
  return full;
}

}  // namespace linalg_detail

namespace {
// Multiply-adds x 2 of a (batched) matrix product, for the profiler's GFLOP/s; 0 when a shape
// is not a matrix (the backend reports that).
double matmul_flops(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined() || a.dim() < 2 || b.dim() < 2) return 0;
  const double m = static_cast<double>(a.size(-2)), k = static_cast<double>(a.size(-1)),
               n = static_cast<double>(b.size(-1));
  const double batch = std::max(static_cast<double>(a.numel()) / std::max(m * k, 1.0),
                                static_cast<double>(b.numel()) / std::max(k * n, 1.0));
  return 2.0 * batch * m * n * k;
}
}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  STOKE_CHECK(a.defined() && b.defined(), "matmul", "expected defined operands");
  if (profiler::enabled()) profiler::next_range_flops(matmul_flops(a, b));
  return dispatch("matmul", {&a, &b}).matmul(a, b);
}

MatmulGrads matmul_backward(const Tensor& grad_out, const Tensor& a_in, const Tensor& b_in,
                            bool need_a, bool need_b) {
  // The backend checks the dtypes, then the shapes (linalg_detail::matmul_backward_shape).
  if (profiler::enabled())
    profiler::next_range_flops(matmul_flops(a_in, b_in) * (int{need_a} + int{need_b}));
  return dispatch("matmul_backward", {&grad_out, &a_in, &b_in})
      .matmul_backward(grad_out, a_in, b_in, need_a, need_b);
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  if (profiler::enabled() && x.defined() && weight.defined() && weight.dim() == 2)
    profiler::next_range_flops(2.0 * static_cast<double>(x.numel()) *
                               static_cast<double>(weight.size(0)));
  return dispatch("linear", {&x, &weight, &bias}).linear(x, weight, bias);
}

LinearGrads linear_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight,
                            bool need_input, bool need_weight, bool need_bias) {
  if (profiler::enabled() && x.defined() && weight.defined() && weight.dim() == 2)
    profiler::next_range_flops(2.0 * static_cast<double>(x.numel()) *
                               static_cast<double>(weight.size(0)) *
                               (int{need_input} + int{need_weight}));
  return dispatch("linear_backward", {&grad_out, &x, &weight})
      .linear_backward(grad_out, x, weight, need_input, need_weight, need_bias);
}

Tensor sum_leading_dims(const Tensor& g_in) {
  return dispatch("sum_leading_dims", {&g_in}).sum_leading_dims(g_in);
}

}  // namespace stoke::ops
