// Pooling entry points: the device-independent checks (input rank, window, gradient shapes), then
// the backend of the tensors' device (ops/cpu/pool.cpp, ops/cuda/pool.cpp).
#include "ops/pool.h"

#include "ops/backend.h"
#include "ops/check.h"
#include "ops/memory_format.h"
#include "ops/pool_detail.h"

namespace stoke::ops {
namespace {

void check_pool_input(const char* op, const Tensor& x) {
  STOKE_CHECK(x.defined(), op, "expected a defined input tensor");
  STOKE_CHECK(x.dim() == 3 || x.dim() == 4, op,
              "expected input with 3 dims (C, H, W) or 4 dims (N, C, H, W), got shape ", x.shape());
  STOKE_CHECK(x.size(-1) > 0 && x.size(-2) > 0, op,
              "expected input with non-empty spatial dims, got shape ", x.shape());
}

// Checks a pooling gradient against the input shape it belongs to (any device, any dtype).
void checked_grad(const char* op, const Tensor& grad, const Shape& input_shape) {
  STOKE_CHECK(grad.defined(), op, "expected a defined grad_output");
  STOKE_CHECK((input_shape.size() == 3 || input_shape.size() == 4) &&
                  grad.dim() == static_cast<int64_t>(input_shape.size()),
              op, "expected grad_output and input shape with the same 3 or 4 dims, got ",
              grad.shape(), " and ", input_shape);
  for (size_t d = 0; d + 2 < input_shape.size(); ++d)
    STOKE_CHECK(grad.size(static_cast<int64_t>(d)) == input_shape[d], op,
                "expected grad_output with leading dims of input shape ", input_shape, ", got ",
                grad.shape());
}

// The backend of a windowed pooling forward (max_pool2d, avg_pool2d) after the checks every
// device shares: the input's rank and the window (pool_geometry, defined below).
Backend& window_pool_dispatch(const char* op, const Tensor& input, const Pool2dOptions& options) {
  check_pool_input(op, input);
  pool_geometry(op, input.shape(), options);
  return dispatch(op, {&input});
}

}  // namespace

PoolGeometry pool_geometry(const char* op, const Shape& in, const Pool2dOptions& o) {
  PoolGeometry g;
  const int64_t nd = static_cast<int64_t>(in.size());
  g.H = in[nd - 2];
  g.W = in[nd - 1];
  g.planes = g.H * g.W == 0 ? 0 : Shape(in).numel() / (g.H * g.W);
  g.kh = o.kernel_size[0];
  g.kw = o.kernel_size[1];
  STOKE_CHECK(g.kh > 0 && g.kw > 0, op, "expected kernel_size > 0, got ", g.kh, ",", g.kw);
  g.sh = o.stride[0] == 0 ? g.kh : o.stride[0];
  g.sw = o.stride[1] == 0 ? g.kw : o.stride[1];
  STOKE_CHECK(g.sh > 0 && g.sw > 0, op, "expected stride > 0 (or 0 for kernel_size), got ",
              o.stride[0], ",", o.stride[1]);
  g.ph = o.padding[0];
  g.pw = o.padding[1];
  STOKE_CHECK(g.ph >= 0 && g.pw >= 0 && g.ph <= g.kh / 2 && g.pw <= g.kw / 2, op,
              "expected padding >= 0 and at most half the kernel size (kernel ", g.kh, ",", g.kw,
              "), got padding ", g.ph, ",", g.pw);
  g.OH = pool_output_size(g.H, g.kh, g.sh, g.ph, o.ceil_mode);
  g.OW = pool_output_size(g.W, g.kw, g.sw, g.pw, o.ceil_mode);
  STOKE_CHECK(g.OH >= 1 && g.OW >= 1, op, "input of shape ", Shape(in), " is too small for kernel ",
              g.kh, ",", g.kw, " with padding ", g.ph, ",", g.pw, ": output size would be ", g.OH,
              "x", g.OW);
  g.out_shape = in;
  g.out_shape[nd - 2] = g.OH;
  g.out_shape[nd - 1] = g.OW;
  return g;
}

int64_t pool_output_size(int64_t input, int64_t kernel, int64_t stride, int64_t pad,
                         bool ceil_mode) {
  STOKE_CHECK(stride > 0, "pool_output_size", "expected stride > 0, got ", stride);
  const int64_t num = input + 2 * pad - (kernel - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  // Division rounding toward negative infinity, as PyTorch's div_rtn.
  int64_t q = num / stride;
  if ((num % stride != 0) && ((num < 0) != (stride < 0))) --q;
  int64_t out = q + 1;
  if (ceil_mode && (out - 1) * stride >= input + pad) --out;  // last window starts inside
  return out;
}

// Each output keeps its input's layout, each input gradient its output gradient's
// (ops/memory_format.h); the kernels may compute NCHW.
Tensor max_pool2d(const Tensor& input, const Pool2dOptions& options) {
  return in_format(window_pool_dispatch("max_pool2d", input, options).max_pool2d(input, options),
                   input.suggest_memory_format());
}

MaxPool2dResult max_pool2d_with_indices(const Tensor& input, const Pool2dOptions& options) {
  MaxPool2dResult r =
      window_pool_dispatch("max_pool2d", input, options).max_pool2d_with_indices(input, options);
  r.output = in_format(r.output, input.suggest_memory_format());
  r.indices = in_format(r.indices, input.suggest_memory_format());
  return r;
}

Tensor max_pool2d_backward(const Tensor& grad_output, const Tensor& indices,
                           const Shape& input_shape, const Pool2dOptions& options) {
  const char* op = "max_pool2d_backward";
  checked_grad(op, grad_output, input_shape);
  STOKE_CHECK(indices.defined() && indices.dtype() == DType::i64, op,
              "expected indices of dtype i64, got ",
              indices.defined() ? dtype_name(indices.dtype()) : "an undefined tensor");
  check_shape(op, indices, "indices", grad_output.shape());
  return in_format(dispatch(op, {&grad_output, &indices})
                       .max_pool2d_backward(grad_output, indices, input_shape, options),
                   grad_output.suggest_memory_format());
}

Tensor avg_pool2d(const Tensor& input, const Pool2dOptions& options) {
  return in_format(window_pool_dispatch("avg_pool2d", input, options).avg_pool2d(input, options),
                   input.suggest_memory_format());
}

Tensor avg_pool2d_backward(const Tensor& grad_output, const Shape& input_shape,
                           const Pool2dOptions& options) {
  const char* op = "avg_pool2d_backward";
  checked_grad(op, grad_output, input_shape);
  const PoolGeometry g = pool_geometry(op, input_shape, options);
  check_shape(op, grad_output, "grad_output", g.out_shape);
  return in_format(
      dispatch(op, {&grad_output}).avg_pool2d_backward(grad_output, input_shape, options),
      grad_output.suggest_memory_format());
}

Tensor adaptive_avg_pool2d(const Tensor& input, std::array<int64_t, 2> output_size) {
  const char* op = "adaptive_avg_pool2d";
  check_pool_input(op, input);
  STOKE_CHECK(output_size[0] > 0 && output_size[1] > 0, op, "expected output_size > 0, got ",
              output_size[0], ",", output_size[1]);
  return in_format(dispatch(op, {&input}).adaptive_avg_pool2d(input, output_size),
                   input.suggest_memory_format());
}

Tensor adaptive_avg_pool2d_backward(const Tensor& grad_output, const Shape& input_shape) {
  const char* op = "adaptive_avg_pool2d_backward";
  checked_grad(op, grad_output, input_shape);
  return in_format(
      dispatch(op, {&grad_output}).adaptive_avg_pool2d_backward(grad_output, input_shape),
      grad_output.suggest_memory_format());
}

}  // namespace stoke::ops
