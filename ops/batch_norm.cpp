// Batch norm entry points: the device-independent checks (one message on every device), then the
// backend of the tensors' device (ops/cpu/batch_norm.cpp, ops/cuda/batch_norm.cpp). The
// per-channel tensors' dtype rule differs by device (cuda takes f32 statistics for f16/bf16
// inputs), so the backends check those tensors.
#include "ops/batch_norm.h"

#include "ops/backend.h"
#include "ops/check.h"
#include "ops/memory_format.h"

namespace stoke::ops {
namespace {

// A per-channel tensor (running statistics, weight, bias, saved statistics): (C) or undefined.
void check_channels(const char* op, const Tensor& t, const char* name, const Tensor& input) {
  if (t.defined()) check_shape(op, t, name, {input.size(1)});
}

}  // namespace

BatchNormForward batch_norm_forward(const Tensor& input, const Tensor& running_mean,
                                    const Tensor& running_var, const Tensor& weight,
                                    const Tensor& bias, const BatchNormOptions& options) {
  const char* op = "batch_norm";
  STOKE_CHECK(input.defined(), op, "expected a defined input tensor");
  STOKE_CHECK(input.dim() >= 2, op, "expected input with at least 2 dims (N, C, ...), got shape ",
              input.shape());
  check_channels(op, running_mean, "running_mean", input);
  check_channels(op, running_var, "running_var", input);
  check_channels(op, weight, "weight", input);
  check_channels(op, bias, "bias", input);
  STOKE_CHECK(running_mean.defined() == running_var.defined(), op,
              "expected running_mean and running_var both defined or both undefined");
  STOKE_CHECK(options.eps >= 0, op, "expected eps >= 0, got ", options.eps);
  // Batch statistics need two values per channel: N times the spatial size.
  const bool use_batch = options.training || !running_mean.defined();
  int64_t per_channel = input.size(0);
  for (int64_t d = 2; d < input.dim(); ++d) per_channel *= input.size(d);
  STOKE_CHECK(
      !use_batch || per_channel > 1, op,
      "expected more than 1 value per channel when using batch statistics, got input shape ",
      input.shape());
  BatchNormForward r =
      dispatch(op, {&input, &running_mean, &running_var, &weight, &bias})
          .batch_norm_forward(input, running_mean, running_var, weight, bias, options);
  r.output = in_format(r.output, input.suggest_memory_format());
  return r;
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
  check_same_dtype(op, input, "input", grad_output, "grad_output");
  check_shape(op, grad_output, "grad_output", input.shape());
  check_channels(op, weight, "weight", input);
  check_channels(op, save_mean, "save_mean", input);
  check_channels(op, save_invstd, "save_invstd", input);
  if (relu_output.defined()) {
    STOKE_CHECK(relu_output.shape() == input.shape() && relu_output.dtype() == input.dtype(), op,
                "expected relu_output of the input's shape and dtype ", input.dtype(), " ",
                input.shape(), ", got ", relu_output.dtype(), " ", relu_output.shape());
  }
  BatchNormGrads r =
      dispatch(op, {&grad_output, &input, &weight, &save_mean, &save_invstd, &relu_output})
          .batch_norm_backward(grad_output, input, weight, save_mean, save_invstd, training,
                               output_mask, relu_output);
  r.grad_input = in_format(r.grad_input, input.suggest_memory_format());
  return r;
}

}  // namespace stoke::ops
