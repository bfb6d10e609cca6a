// softmax and log_softmax: the backend of the tensors' device does the checks and the work
// (ops/cpu/softmax.cpp, ops/cuda/softmax.cpp).
#include "ops/softmax.h"

#include "ops/backend.h"

namespace stoke::ops {

Tensor softmax(const Tensor& x, int64_t dim) {
  return dispatch("softmax", {&x}).softmax(x, dim, false);
}
Tensor log_softmax(const Tensor& x, int64_t dim) {
  return dispatch("log_softmax", {&x}).softmax(x, dim, true);
}
Tensor softmax_backward(const Tensor& grad, const Tensor& output, int64_t dim) {
  return dispatch("softmax_backward", {&grad, &output}).softmax_backward(grad, output, dim, false);
}
Tensor log_softmax_backward(const Tensor& grad, const Tensor& output, int64_t dim) {
  return dispatch("log_softmax_backward", {&grad, &output})
      .softmax_backward(grad, output, dim, true);
}

}  // namespace stoke::ops
