// The linalg entry points: checks, then the backend of the tensors' device (ops/cpu/linalg.cpp,
// ops/cuda/linalg.cpp). matmul_backward and sum_leading_dims are composed from matmul and sum on
// other devices; the CPU runs its own kernels for them (ops/cpu/linalg_kernels.h).
#include "ops/linalg.h"

#include <vector>

#include "ops/backend.h"
#include "ops/check.h"
#include "ops/cpu/linalg_kernels.h"
#include "ops/elementwise.h"
#include "ops/reduce.h"

namespace stoke::ops {
namespace {

Shape batch_of(const Tensor& t) {
  return Shape(t.shape().begin(), t.shape().end() - 2);
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  STOKE_CHECK(a.defined() && b.defined(), "matmul", "expected defined operands");
  return dispatch("matmul", {&a, &b}).matmul(a, b);
}

MatmulGrads matmul_backward(const Tensor& grad_out, const Tensor& a_in, const Tensor& b_in,
                            bool need_a, bool need_b) {
  const bool on_cpu =
      dispatch("matmul_backward", {&grad_out, &a_in, &b_in}).type() == Device::Type::cpu;
  if (on_cpu) {
    // The CPU kernels' dtypes (f32, f64), checked before the shapes as always.
    check_float("matmul_backward", a_in, "a");
    check_same_dtype("matmul_backward", a_in, "a", b_in, "b");
    check_float("matmul_backward", grad_out, "grad_out");
    check_same_dtype("matmul_backward", grad_out, "grad_out", a_in, "a");
  } else {
    check_same_dtype("matmul_backward", a_in, "a", b_in, "b");
    check_same_dtype("matmul_backward", grad_out, "grad_out", a_in, "a");
  }
  STOKE_CHECK(a_in.dim() >= 2 && b_in.dim() >= 2, "matmul_backward",
              "expected operands with at least 2 dims, got shapes ", a_in.shape(), " and ",
              b_in.shape());
  Shape full = broadcast_shapes(batch_of(a_in), batch_of(b_in), "matmul_backward");
  full.push_back(a_in.size(-2));
  full.push_back(b_in.size(-1));
  check_shape("matmul_backward", grad_out, "grad_out", full);
  if (on_cpu) return cpu::matmul_backward(grad_out, a_in, b_in, full, need_a, need_b);
  // The device's GEMMs (ops::matmul dispatches them, broadcasting batch dims), then the sum over
  // the batch dims an operand was broadcast along.
  const Tensor g = grad_out.detach();
  MatmulGrads r;
  if (need_a) r.grad_a = sum_to(matmul(g, b_in.detach().transpose(-1, -2)), a_in.shape());
  if (need_b) r.grad_b = sum_to(matmul(a_in.detach().transpose(-1, -2), g), b_in.shape());
  return r;
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  return dispatch("linear", {&x, &weight, &bias}).linear(x, weight, bias);
}

LinearGrads linear_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight,
                            bool need_input, bool need_weight, bool need_bias) {
  return dispatch("linear_backward", {&grad_out, &x, &weight})
      .linear_backward(grad_out, x, weight, need_input, need_weight, need_bias);
}

Tensor sum_leading_dims(const Tensor& g_in) {
  Backend& k = dispatch("sum_leading_dims", {&g_in});
  if (k.type() == Device::Type::cpu) return cpu::sum_leading_dims(g_in);
  STOKE_CHECK(g_in.dim() >= 1, "sum_leading_dims", "expected at least 1 dim, got shape ",
              g_in.shape());
  std::vector<int64_t> dims;
  for (int64_t d = 0; d + 1 < g_in.dim(); ++d) dims.push_back(d);
  return dims.empty() ? g_in.detach().clone() : k.sum(g_in, dims, false);
}

}  // namespace stoke::ops
