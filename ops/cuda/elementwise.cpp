// Comparisons, where, pow and the elementwise backward kernels on cuda tensors, and the in-place
// sqrt_/clamp_/lerp_: cuda/kernels/elementwise_compare.h and cuda/kernels/elementwise.h; sum_to
// through the reduction (ops::sum). The ops:: entry points have already run the checks every device
// shares (dtypes agree, shapes broadcast, in-place targets writable); what is left here is the
// device's own dtype rule (f32, f16, bf16 for math) and one launch per op over the operands' own
// strides (no contiguous copies for broadcasting).
#include <array>
#include <vector>

#include "cuda/kernels/elementwise.h"
#include "cuda/kernels/elementwise_compare.h"
#include "ops/check.h"
#include "ops/creation.h"
#include "ops/cuda/backend.h"
#include "ops/cuda/glue_util.h"
#include "ops/reduce.h"

namespace stoke::ops::cuda_glue {
namespace {

// ops' op kinds to the kernels' by name (both enums come from core/elementwise_ops.h).
STOKE_DEFINE_TO_CUDA(cuda::UnaryBackwardOp, UnaryGradOp, STOKE_UNARY_GRAD_OPS, "unary_backward")

STOKE_DEFINE_TO_CUDA(cuda::CompareOp, CompareOp, STOKE_COMPARE_OPS, "compare")

// Offsets of N operands broadcast to `shape`; operand 0 is the (contiguous) output.
template <int N>
cuda::StridedOffsets<N> offsets_over(const char* op, const Tensor& out,
                                     const std::array<const Tensor*, N - 1>& inputs) {
  const Shape& shape = out.shape();
  std::array<Shape, N - 1> st;
  const int64_t* strides[N];
  strides[0] = out.strides().data();
  for (int k = 0; k < N - 1; ++k) {
    st[k] = broadcast_strides(inputs[k]->shape(), inputs[k]->strides(), shape);
    strides[k + 1] = st[k].data();
  }
  return cuda::make_strided_offsets<N>(op, shape.data(), static_cast<int>(shape.size()), strides);
}

// t = f(t) for an in-place unary map: in place when t is contiguous, else through a contiguous
// copy written back with the strided copy kernel.
void map_in_place(CudaBackend& k, const Tensor& t, cuda::UnaryOp op, const cuda::UnaryParams& p) {
  if (t.numel() == 0) return;
  const Tensor c = t.is_contiguous() ? t : t.contiguous();
  cuda::unary(op, c.dtype(), c.data_ptr(), c.data_ptr(), c.numel(), launch_stream(), p);
  if (!t.is_contiguous()) k.copy_strided(t, c);
}

}  // namespace

// --- comparisons and where ----------------------------------------------------------------------

Tensor CudaBackend::compare(CompareOp op, const Tensor& a, const Tensor& b) {
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), compare_op_name(op));
  Tensor out = empty_on(shape, DType::boolean, a.device());
  if (out.numel() == 0) return out;
  cuda::compare(to_cuda(op), a.dtype(), a.data_ptr(), b.data_ptr(), typed<bool>(out),
                offsets_over<3>(compare_op_name(op), out, {&a, &b}), out.numel(), launch_stream());
  return out;
}

Tensor CudaBackend::compare_scalar(CompareOp op, const Tensor& a_in, double s) {
  const Tensor a = a_in.contiguous();
  Tensor out = empty_on(a.shape(), DType::boolean, a.device());
  if (out.numel() == 0) return out;
  // Floating tensors compare with the scalar rounded to their dtype, as on the CPU (and torch);
  // the rounding is a host-side scalar conversion (no device access).
  if (is_floating(a.dtype())) s = scalar_tensor(s, {.dtype = a.dtype()}).item();
  cuda::compare_scalar(to_cuda(op), a.dtype(), a.data_ptr(), s, typed<bool>(out), out.numel(),
                       launch_stream());
  return out;
}

Tensor CudaBackend::where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  const Shape shape =
      broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  Tensor out = empty_on(shape, a.dtype(), a.device());
  if (out.numel() == 0) return out;
  cuda::where(typed<bool>(cond), a.data_ptr(), b.data_ptr(), out.data_ptr(), a.element_size(),
              offsets_over<4>("where", out, {&cond, &a, &b}), out.numel(), launch_stream());
  return out;
}

Tensor CudaBackend::where_backward(const Tensor& grad, const Tensor& cond, bool for_a) {
  check_float_dtype("where_backward", grad);
  const Shape shape = broadcast_shapes(grad.shape(), cond.shape(), "where_backward");
  Tensor out = empty_on(shape, grad.dtype(), grad.device());
  if (out.numel() == 0) return out;
  cuda::select_or_zero(typed<bool>(cond), for_a, grad.data_ptr(), out.data_ptr(),
                       grad.element_size(), offsets_over<3>("where_backward", out, {&grad, &cond}),
                       out.numel(), launch_stream());
  return out;
}

// --- pow and the backward maps -------------------------------------------------------------------

Tensor CudaBackend::pow(const Tensor& x_in, double exponent) {
  check_float_dtype("pow", x_in);
  const Tensor x = x_in.contiguous();
  Tensor out = empty_on(x.shape(), x.dtype(), x.device());
  cuda::pow(x.dtype(), x.data_ptr(), out.data_ptr(), x.numel(), exponent, launch_stream());
  return out;
}

Tensor CudaBackend::pow_backward(const Tensor& grad, const Tensor& x, double exponent) {
  const char* name = "pow_backward";
  check_same_dtype(name, grad, "grad", x, "saved tensor");
  check_float_dtype(name, grad);
  Tensor out =
      empty_on(broadcast_shapes(grad.shape(), x.shape(), name), grad.dtype(), grad.device());
  if (out.numel() == 0) return out;
  cuda::pow_backward(grad.dtype(), grad.data_ptr(), x.data_ptr(), out.data_ptr(),
                     offsets_over<3>(name, out, {&grad, &x}), out.numel(), exponent,
                     launch_stream());
  return out;
}

Tensor CudaBackend::unary_backward(UnaryGradOp op, const Tensor& grad, const Tensor& saved,
                                   const UnaryGradParams& params) {
  const char* name = unary_grad_op_name(op);
  check_same_dtype(name, grad, "grad", saved, "saved tensor");
  check_float_dtype(name, grad);
  Tensor out =
      empty_on(broadcast_shapes(grad.shape(), saved.shape(), name), grad.dtype(), grad.device());
  if (out.numel() == 0) return out;
  cuda::UnaryParams p;
  p.negative_slope = static_cast<float>(params.negative_slope);
  p.min = static_cast<float>(params.min);
  p.max = static_cast<float>(params.max);
  cuda::unary_backward(to_cuda(op), grad.dtype(), grad.data_ptr(), saved.data_ptr(), out.data_ptr(),
                       offsets_over<3>(name, out, {&grad, &saved}), out.numel(), launch_stream(),
                       p);
  return out;
}

namespace {
Tensor ternary_backward(cuda::TernaryBackwardOp op, const char* name, const Tensor& grad,
                        const Tensor& a, const Tensor& b) {
  check_same_dtype(name, grad, "grad", a, "a");
  check_same_dtype(name, grad, "grad", b, "b");
  check_float_dtype(name, grad);
  const Shape shape =
      broadcast_shapes(broadcast_shapes(grad.shape(), a.shape(), name), b.shape(), name);
  Tensor out = empty_on(shape, grad.dtype(), grad.device());
  if (out.numel() == 0) return out;
  cuda::ternary_backward(op, grad.dtype(), grad.data_ptr(), a.data_ptr(), b.data_ptr(),
                         out.data_ptr(), offsets_over<4>(name, out, {&grad, &a, &b}), out.numel(),
                         launch_stream());
  return out;
}
}  // namespace

Tensor CudaBackend::div_backward_other(const Tensor& grad, const Tensor& a, const Tensor& b) {
  return ternary_backward(cuda::TernaryBackwardOp::div_other, "div_backward", grad, a, b);
}

Tensor CudaBackend::minmax_backward(bool max, const Tensor& grad, const Tensor& a,
                                    const Tensor& b) {
  return ternary_backward(max ? cuda::TernaryBackwardOp::maximum : cuda::TernaryBackwardOp::minimum,
                          max ? "maximum_backward" : "minimum_backward", grad, a, b);
}

// --- in place ----------------------------------------------------------------------------------

void CudaBackend::sqrt_(const Tensor& t) {
  check_float_dtype("sqrt_", t);
  map_in_place(*this, t, cuda::UnaryOp::sqrt, {});
}

void CudaBackend::clamp_(const Tensor& t, std::optional<double> min, std::optional<double> max) {
  check_float_dtype("clamp_", t);
  cuda::UnaryParams p;  // a missing bound is infinite, which clamps nothing (NaN passes)
  if (min) p.min = static_cast<float>(*min);
  if (max) p.max = static_cast<float>(*max);
  map_in_place(*this, t, cuda::UnaryOp::clamp, p);
}

void CudaBackend::lerp_(const Tensor& t, const Tensor& end, double weight) {
  check_float_dtype("lerp_", t);
  if (t.numel() == 0) return;
  // t is both the first operand and the output: each element is read, then written, by the
  // same thread.
  cuda::lerp(t.dtype(), t.data_ptr(), end.data_ptr(), t.data_ptr(),
             offsets_over<3>("lerp_", t, {&t, &end}), t.numel(), static_cast<float>(weight),
             launch_stream());
}

// --- sum_to ------------------------------------------------------------------------------------

Tensor CudaBackend::sum_to(const Tensor& grad, const Shape& shape) {
  // Sum the broadcast dims with the reduction kernel, then drop the leading.
  const Shape& gs = grad.shape();
  const size_t lead = gs.size() - shape.size();
  std::vector<int64_t> dims;
  for (size_t i = 0; i < gs.size(); ++i)
    if (i < lead || shape[i - lead] == 1) dims.push_back(static_cast<int64_t>(i));
  return ops::sum(grad, dims, true).reshape(shape);
}

}  // namespace stoke::ops::cuda_glue
