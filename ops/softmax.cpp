// softmax and log_softmax entry points: the device-independent checks (dim in range, the
// backward's grad against the output), with one message on every device, then the backend of the
// tensors' device (ops/cpu/softmax.cpp, ops/cuda/softmax.cpp). The dtype rule differs by device
// (the CPU computes f32/f64; cuda f32, f16 and bf16), so the backends check it.
#include "ops/softmax.h"

#include "ops/backend.h"
#include "ops/check.h"

namespace stoke::ops {
namespace {

void check_forward(const char* op, const Tensor& x, int64_t dim) {
  STOKE_CHECK(x.defined(), op, "expected a defined input tensor");
  wrap_dim(dim, x.dim(), op);
}

void check_backward(const char* op, const Tensor& grad, const Tensor& output, int64_t dim) {
  STOKE_CHECK(grad.defined() && output.defined(), op, "expected defined grad and output tensors");
  check_same_dtype(op, grad, "grad", output, "output");
  check_shape(op, grad, "grad", output.shape());
  wrap_dim(dim, output.dim(), op);
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) {
  check_forward("softmax", x, dim);
  return dispatch("softmax", {&x}).softmax(x, dim, false);
}
Tensor log_softmax(const Tensor& x, int64_t dim) {
  check_forward("log_softmax", x, dim);
  return dispatch("log_softmax", {&x}).softmax(x, dim, true);
}
Tensor softmax_backward(const Tensor& grad, const Tensor& output, int64_t dim) {
  check_backward("softmax_backward", grad, output, dim);
  return dispatch("softmax_backward", {&grad, &output}).softmax_backward(grad, output, dim, false);
}
Tensor log_softmax_backward(const Tensor& grad, const Tensor& output, int64_t dim) {
  check_backward("log_softmax_backward", grad, output, dim);
  return dispatch("log_softmax_backward", {&grad, &output})
      .softmax_backward(grad, output, dim, true);
}

}  // namespace stoke::ops
