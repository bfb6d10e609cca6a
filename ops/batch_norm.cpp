// Batch norm entry points: the device-independent checks, then the backend of the tensors' device
// (ops/cpu/batch_norm.cpp, ops/cuda/batch_norm.cpp). The per-channel tensors' dtype rule differs
// by device (cuda takes f32 statistics for f16/bf16 inputs), so the backends check them.
#include "ops/batch_norm.h"

#include "ops/backend.h"

namespace stoke::ops {

BatchNormForward batch_norm_forward(const Tensor& input, const Tensor& running_mean,
                                    const Tensor& running_var, const Tensor& weight,
                                    const Tensor& bias, const BatchNormOptions& options) {
  const char* op = "batch_norm";
  STOKE_CHECK(input.defined(), op, "expected a defined input tensor");
  STOKE_CHECK(input.dim() >= 2, op, "expected input with at least 2 dims (N, C, ...), got shape ",
              input.shape());
  return dispatch(op, {&input, &running_mean, &running_var, &weight, &bias})
      .batch_norm_forward(input, running_mean, running_var, weight, bias, options);
}

Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, const BatchNormOptions& options) {
  return batch_norm_forward(input, running_mean, running_var, weight, bias, options).output;
}

BatchNormGrads batch_norm_backward(const Tensor& grad_output, const Tensor& input,
                                   const Tensor& weight, const Tensor& save_mean,
                                   const Tensor& save_invstd, bool training,
                                   std::array<bool, 3> output_mask, const Tensor& relu_output) {
  const char* op = "batch_norm_backward";
  STOKE_CHECK(
      grad_output.defined() && input.defined() && save_mean.defined() && save_invstd.defined(), op,
      "expected defined grad_output, input, save_mean and save_invstd");
  STOKE_CHECK(input.dim() >= 2, op, "expected input with at least 2 dims (N, C, ...), got shape ",
              input.shape());
  if (relu_output.defined()) {
    STOKE_CHECK(relu_output.shape() == input.shape() && relu_output.dtype() == input.dtype(), op,
                "expected relu_output of the input's shape and dtype ", input.dtype(), " ",
                input.shape(), ", got ", relu_output.dtype(), " ", relu_output.shape());
  }
  return dispatch(op, {&grad_output, &input, &weight, &save_mean, &save_invstd, &relu_output})
      .batch_norm_backward(grad_output, input, weight, save_mean, save_invstd, training,
                           output_mask, relu_output);
}

}  // namespace stoke::ops
