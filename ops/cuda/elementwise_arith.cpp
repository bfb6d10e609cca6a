// The arithmetic elementwise ops on cuda tensors: binary (in place and with a scalar), unary maps,
// leaky_relu, clamp and relu's backward, on cuda/kernels/elementwise.h (floating dtypes) and
// cuda/kernels/elementwise_integer.h (i32, i64, u8); addcmul_, addcdiv_ and zero_ composed from
// them and fill. Outputs are allocated on the input's device, and non-contiguous inputs are made
// contiguous on the device first where a kernel needs it.
#include <cmath>

#include "core/grad_mode.h"
#include "cuda/kernels/elementwise.h"
#include "cuda/kernels/elementwise_integer.h"
#include "ops/check.h"
#include "ops/creation.h"
#include "ops/cuda/backend.h"
#include "ops/cuda/glue_util.h"

namespace stoke::ops::cuda_glue {
namespace {

// ops' op kinds to the kernels' by name (both enums come from core/elementwise_ops.h).
STOKE_DEFINE_TO_CUDA(cuda::BinaryOp, BinaryOp, STOKE_BINARY_OPS, "binary")

STOKE_DEFINE_TO_CUDA(cuda::UnaryOp, UnaryOp, STOKE_UNARY_OPS, "unary")

Tensor map_unary(const char* op, const Tensor& x_in, cuda::UnaryOp kind,
                 const cuda::UnaryParams& params = {}) {
  check_float_dtype(op, x_in);
  const Tensor x = x_in.detach().contiguous();
  Tensor out = empty_on(x.shape(), x.dtype(), x.device());
  cuda::unary(kind, x.dtype(), x.data_ptr(), out.data_ptr(), x.numel(), launch_stream(), params);
  return out;
}

// A scalar applied to an integer tensor must be integral and in range, as on the CPU.
int64_t integral_scalar(double v, DType dtype, const char* op) {
  const double lo = dtype == DType::u8    ? 0
                    : dtype == DType::i32 ? -2147483648.0
                                          : -9.2233720368547758e18;
  const double hi = dtype == DType::u8    ? 255
                    : dtype == DType::i32 ? 2147483647.0
                                          : 9.2233720368547758e18;
  STOKE_CHECK(std::trunc(v) == v && v >= lo && v <= hi, op,
              "expected an integral scalar in the range of dtype ", dtype, ", got ", v,
              " (cast the tensor to a floating dtype first)");
  return static_cast<int64_t>(v);
}

}  // namespace

Tensor CudaBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = binary_op_name(op);
  check_same_dtype(name, a, "a", b, "b");
  const bool integer = is_integer(a.dtype());
  if (!integer) check_float_dtype(name, a);
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  Tensor out = empty_on(shape, a.dtype(), a.device());
  if (out.numel() == 0) return out;
  const Shape as = broadcast_strides(a.shape(), a.strides(), shape);
  const Shape bs = broadcast_strides(b.shape(), b.strides(), shape);
  const auto offsets = cuda::make_binary_offsets(shape.data(), static_cast<int>(shape.size()),
                                                 out.strides().data(), as.data(), bs.data());
  if (integer)
    cuda::int_binary(to_cuda(op), a.dtype(), a.data_ptr(), b.data_ptr(), out.data_ptr(), offsets,
                     out.numel(), 1, launch_stream());
  else
    cuda::binary(to_cuda(op), a.dtype(), a.data_ptr(), b.data_ptr(), out.data_ptr(), offsets,
                 out.numel(), launch_stream());
  return out;
}

void CudaBackend::binary_(BinaryOp op, const Tensor& t, const Tensor& other, double alpha) {
  const char* name = binary_op_name(op);
  check_same_dtype(name, t, "self", other, "other");
  const bool integer = is_integer(t.dtype());
  if (!integer) check_float_dtype(name, t);
  STOKE_CHECK(!t.requires_grad() || !GradMode::is_enabled(), name,
              "in-place update of a tensor that requires grad (wrap it in NoGradGuard)");
  const Shape shape = t.shape();
  STOKE_CHECK(broadcast_shapes(shape, other.shape(), name) == shape, name, "cannot broadcast ",
              other.shape(), " to the in-place operand's shape ", shape);
  if (t.numel() == 0) return;
  const Shape os = broadcast_strides(other.shape(), other.strides(), shape);
  // The output aliases operand a: each element is read and written by the same thread.
  const auto offsets = cuda::make_binary_offsets(shape.data(), static_cast<int>(shape.size()),
                                                 t.strides().data(), t.strides().data(), os.data());
  if (integer)
    cuda::int_binary(to_cuda(op), t.dtype(), t.data_ptr(), other.data_ptr(), t.data_ptr(), offsets,
                     t.numel(), integral_scalar(alpha, t.dtype(), name), launch_stream());
  else
    cuda::binary(to_cuda(op), t.dtype(), t.data_ptr(), other.data_ptr(), t.data_ptr(), offsets,
                 t.numel(), launch_stream(), static_cast<float>(alpha));
}

void CudaBackend::binary_scalar_(BinaryOp op, const Tensor& t, double s) {
  const char* name = binary_op_name(op);
  const bool integer = is_integer(t.dtype());
  if (!integer) check_float_dtype(name, t);
  STOKE_CHECK(!t.requires_grad() || !GradMode::is_enabled(), name,
              "in-place update of a tensor that requires grad (wrap it in NoGradGuard)");
  if (t.is_contiguous()) {
    if (integer)
      cuda::int_binary_scalar(to_cuda(op), t.dtype(), t.data_ptr(),
                              integral_scalar(s, t.dtype(), name), t.data_ptr(), t.numel(), false,
                              launch_stream());
    else
      cuda::binary_scalar(to_cuda(op), t.dtype(), t.data_ptr(), s, t.data_ptr(), t.numel(),
                          launch_stream());
    return;
  }
  const Tensor tmp = binary_scalar(op, t, s, false);
  copy_strided(t, tmp);
}

Tensor CudaBackend::binary_scalar(BinaryOp op, const Tensor& a_in, double s, bool scalar_first) {
  const char* name = binary_op_name(op);
  const Tensor a = a_in.detach().contiguous();
  Tensor out = empty_on(a.shape(), a.dtype(), a.device());
  if (is_integer(a.dtype())) {
    cuda::int_binary_scalar(to_cuda(op), a.dtype(), a.data_ptr(),
                            integral_scalar(s, a.dtype(), name), out.data_ptr(), a.numel(),
                            scalar_first, launch_stream());
    return out;
  }
  check_float_dtype(name, a_in);
  cuda::binary_scalar(to_cuda(op), a.dtype(), a.data_ptr(), s, out.data_ptr(), a.numel(),
                      launch_stream(), scalar_first);
  return out;
}

Tensor CudaBackend::unary(UnaryOp op, const Tensor& x) {
  return map_unary(unary_op_name(op), x, to_cuda(op));
}

Tensor CudaBackend::leaky_relu(const Tensor& x, double negative_slope) {
  cuda::UnaryParams p;
  p.negative_slope = static_cast<float>(negative_slope);
  return map_unary("leaky_relu", x, cuda::UnaryOp::leaky_relu, p);
}

Tensor CudaBackend::clamp(const Tensor& x, std::optional<double> min, std::optional<double> max) {
  STOKE_CHECK(min || max, "clamp", "expected at least one of min and max");
  cuda::UnaryParams p;
  if (min) p.min = static_cast<float>(*min);
  if (max) p.max = static_cast<float>(*max);
  return map_unary("clamp", x, cuda::UnaryOp::clamp, p);
}

Tensor CudaBackend::relu_backward(const Tensor& grad_in, const Tensor& out_in) {
  check_same_dtype("relu_backward", grad_in, "grad", out_in, "output");
  check_float_dtype("relu_backward", grad_in);
  check_shape("relu_backward", grad_in, "grad", out_in.shape());
  const Tensor g = grad_in.detach().contiguous(), y = out_in.detach().contiguous();
  Tensor dx = empty_on(y.shape(), y.dtype(), y.device());
  cuda::unary_backward(cuda::UnaryBackwardOp::relu, y.dtype(), g.data_ptr(), y.data_ptr(),
                       dx.data_ptr(), y.numel(), launch_stream());
  return dx;
}

// --- composed: the CPU fuses these; here they are the methods above -----------------------------

void CudaBackend::addcmul_(const Tensor& t, const Tensor& a, const Tensor& b, double value) {
  // two launches: the product, then the scaled in-place add
  binary_(BinaryOp::add, t, binary(BinaryOp::mul, a, b), value);
}

void CudaBackend::addcdiv_(const Tensor& t, const Tensor& a, const Tensor& b, double value) {
  // two launches: the quotient, then the scaled in-place add
  binary_(BinaryOp::add, t, binary(BinaryOp::div, a, b), value);
}

void CudaBackend::zero_(const Tensor& t) {
  fill(t, 0.0);
}

}  // namespace stoke::ops::cuda_glue
