// Comparisons, where and the unary backward maps on cuda tensors: cuda/kernels/compare.h and
// cuda::unary_backward (cuda/kernels/elementwise.h).
#include "cuda/kernels/elementwise.h"
#include "cuda/kernels/compare.h"
#include "ops/check.h"
#include "ops/creation.h"
#include "ops/cuda/backend.h"

namespace stoke::ops::cuda_glue {
namespace {

cuda::UnaryBackwardOp to_cuda(UnaryGradOp op) {
  switch (op) {
    case UnaryGradOp::leaky_relu:
      return cuda::UnaryBackwardOp::leaky_relu;
    case UnaryGradOp::sigmoid:
      return cuda::UnaryBackwardOp::sigmoid;
    case UnaryGradOp::tanh:
      return cuda::UnaryBackwardOp::tanh;
    case UnaryGradOp::gelu:
      return cuda::UnaryBackwardOp::gelu;
    case UnaryGradOp::gelu_tanh:
      return cuda::UnaryBackwardOp::gelu_tanh;
    case UnaryGradOp::clamp:
      return cuda::UnaryBackwardOp::clamp;
    case UnaryGradOp::abs:
      return cuda::UnaryBackwardOp::abs;
    case UnaryGradOp::sqrt:
      return cuda::UnaryBackwardOp::sqrt;
    case UnaryGradOp::rsqrt:
      return cuda::UnaryBackwardOp::rsqrt;
  }
  return cuda::UnaryBackwardOp::sigmoid;
}

const char* name_of(CompareOp op) {
  static const char* names[] = {"eq", "ne", "lt", "le", "gt", "ge"};
  return names[static_cast<int>(op)];
}

// t broadcast to `shape` and made contiguous (a no-op when it already is).
Tensor dense(const Tensor& t, const Shape& shape) {
  return t.shape() == shape ? t.contiguous() : t.expand(shape).contiguous();
}

}  // namespace

Tensor CudaKernels::unary_backward(UnaryGradOp op, const Tensor& grad_in, const Tensor& saved_in,
                                   const UnaryGradParams& params) {
  const char* name = "unary_backward";
  check_same_dtype(name, grad_in, "grad", saved_in, "saved tensor");
  check_float_dtype(name, grad_in);
  const Shape shape = broadcast_shapes(grad_in.shape(), saved_in.shape(), name);
  const Tensor g = dense(grad_in.detach(), shape), s = dense(saved_in.detach(), shape);
  Tensor out = empty_on(shape, g.dtype(), g.device());
  cuda::UnaryParams p;
  p.negative_slope = static_cast<float>(params.negative_slope);
  p.min = static_cast<float>(params.min);
  p.max = static_cast<float>(params.max);
  cuda::unary_backward(to_cuda(op), g.dtype(), g.data_ptr(), s.data_ptr(), out.data_ptr(),
                       out.numel(), launch_stream(), p);
  return out;
}

Tensor CudaKernels::compare(CompareOp op, const Tensor& a, const Tensor& b) {
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), name_of(op));
  Tensor out = empty_on(shape, DType::boolean, a.device());
  if (out.numel() == 0) return out;
  const Shape as = broadcast_strides(a.shape(), a.strides(), shape);
  const Shape bs = broadcast_strides(b.shape(), b.strides(), shape);
  const int64_t* strides[3] = {out.strides().data(), as.data(), bs.data()};
  const auto offsets = cuda::make_strided_offsets<3>(name_of(op), shape.data(),
                                                     static_cast<int>(shape.size()), strides);
  cuda::compare(static_cast<cuda::CompareOp>(op), a.dtype(), a.data_ptr(), b.data_ptr(),
                typed<bool>(out), offsets, out.numel(), launch_stream());
  return out;
}

Tensor CudaKernels::compare_scalar(CompareOp op, const Tensor& a_in, double s) {
  const Tensor a = a_in.detach().contiguous();
  Tensor out = empty_on(a.shape(), DType::boolean, a.device());
  if (out.numel() == 0) return out;
  // Floating tensors compare with the scalar rounded to their dtype, as on the CPU (and torch).
  if (is_floating(a.dtype())) s = scalar_tensor(s, {.dtype = a.dtype()}).item();
  cuda::compare_scalar(static_cast<cuda::CompareOp>(op), a.dtype(), a.data_ptr(), s,
                       typed<bool>(out), out.numel(), launch_stream());
  return out;
}

Tensor CudaKernels::where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  const Shape shape =
      broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  Tensor out = empty_on(shape, a.dtype(), a.device());
  if (out.numel() == 0) return out;
  const Shape cs = broadcast_strides(cond.shape(), cond.strides(), shape);
  const Shape as = broadcast_strides(a.shape(), a.strides(), shape);
  const Shape bs = broadcast_strides(b.shape(), b.strides(), shape);
  const int64_t* strides[4] = {out.strides().data(), cs.data(), as.data(), bs.data()};
  const auto offsets =
      cuda::make_strided_offsets<4>("where", shape.data(), static_cast<int>(shape.size()), strides);
  cuda::where(typed<bool>(cond), a.data_ptr(), b.data_ptr(), out.data_ptr(), a.element_size(),
              offsets, out.numel(), launch_stream());
  return out;
}

}  // namespace stoke::ops::cuda_glue
