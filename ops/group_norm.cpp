// Group / layer norm entry points: the device-independent checks and the (N, G, K, S) layout, then
// the backend's group_norm_forward / group_norm_backward (ops/cpu/group_norm.cpp,
// ops/cuda/group_norm.cpp), which check the dtypes (cuda takes f32 weights for f16 / bf16 inputs).
#include "ops/group_norm.h"

#include "ops/backend.h"
#include "ops/check.h"
#include "ops/memory_format.h"

namespace stoke::ops {
namespace {

GroupNormLayout group_layout(const char* op, const Tensor& input, int64_t num_groups) {
  STOKE_CHECK(input.defined(), op, "expected a defined input tensor");
  STOKE_CHECK(input.dim() >= 2, op, "expected input with at least 2 dims (N, C, ...), got shape ",
              input.shape());
  const int64_t C = input.size(1);
  STOKE_CHECK(num_groups >= 1 && C % num_groups == 0, op,
              "expected num_groups >= 1 dividing the number of channels ", C, ", got num_groups ",
              num_groups, " for input shape ", input.shape());
  GroupNormLayout l{
      .batch = input.size(0), .groups = num_groups, .channels_per_group = C / num_groups};
  for (int64_t d = 2; d < input.dim(); ++d) l.spatial *= input.size(d);
  return l;
}

GroupNormLayout layer_layout(const char* op, const Tensor& input, const Shape& normalized) {
  STOKE_CHECK(input.defined(), op, "expected a defined input tensor");
  const int64_t m = static_cast<int64_t>(normalized.size());
  bool ok = m >= 1 && m <= input.dim();
  for (int64_t i = 0; ok && i < m; ++i) ok = input.size(input.dim() - m + i) == normalized[i];
  STOKE_CHECK(ok, op, "expected input whose last dims equal normalized_shape ", normalized,
              ", got input shape ", input.shape());
  GroupNormLayout l{.batch = 1, .groups = 1, .channels_per_group = 1};
  for (int64_t d = 0; d < input.dim() - m; ++d) l.batch *= input.size(d);
  for (int64_t v : normalized) l.channels_per_group *= v;
  return l;
}

// weight / bias of `shape`, passed on flat (they index (g, k)).
Tensor flat_param(const char* op, const Tensor& t, const char* name, const Shape& shape) {
  if (!t.defined()) return t;
  STOKE_CHECK(t.shape() == shape, op, "expected ", name, " of shape ", shape, ", got ", t.shape());
  return t.dim() == 1 ? t : t.reshape({t.numel()});
}

// The CPU's dtype rule (f32 / f64, weight and bias of the input's dtype), checked here so that
// the message names the op the user called (the backend's says group_norm); cuda's backend
// checks its own rule (f32 weights for f16 / bf16 inputs).
void check_cpu_dtypes(const char* op, const Tensor& input,
                      std::initializer_list<const Tensor*> ts) {
  if (!input.device().is_cpu()) return;
  check_float(op, input, "input");
  const char* names[] = {"weight", "bias"};
  size_t i = 0;
  for (const Tensor* t : ts) {
    if (t->defined()) check_same_dtype(op, input, "input", *t, names[i]);
    ++i;
  }
}

void check_eps(const char* op, const NormOptions& o) {
  STOKE_CHECK(o.eps >= 0, op, "expected eps >= 0, got ", o.eps);
}

GroupNormForward forward(const char* op, const Tensor& input, const Tensor& weight,
                         const Tensor& bias, const Shape& param_shape, const GroupNormLayout& l,
                         const NormOptions& options) {
  check_eps(op, options);
  check_cpu_dtypes(op, input, {&weight, &bias});
  const Tensor w = flat_param(op, weight, "weight", param_shape);
  const Tensor b = flat_param(op, bias, "bias", param_shape);
  return dispatch(op, {&input, &weight, &bias}).group_norm_forward(input, w, b, l, options.eps);
}

GroupNormGrads backward(const char* op, const Tensor& grad_output, const Tensor& input,
                        const Tensor& weight, const Tensor& save_mean, const Tensor& save_rstd,
                        const Shape& param_shape, const GroupNormLayout& l,
                        std::array<bool, 3> mask) {
  STOKE_CHECK(grad_output.defined() && save_mean.defined() && save_rstd.defined(), op,
              "expected defined grad_output, save_mean and save_rstd");
  STOKE_CHECK(grad_output.shape() == input.shape(), op, "expected grad_output of shape ",
              input.shape(), ", got ", grad_output.shape());
  const int64_t rows = l.batch * l.groups;
  STOKE_CHECK(save_mean.shape() == Shape{rows} && save_rstd.shape() == Shape{rows}, op,
              "expected save_mean and save_rstd of shape (", rows, "), got ", save_mean.shape(),
              " and ", save_rstd.shape());
  const Tensor w = flat_param(op, weight, "weight", param_shape);
  GroupNormGrads g = dispatch(op, {&grad_output, &input, &weight, &save_mean, &save_rstd})
                         .group_norm_backward(grad_output, input, w, save_mean, save_rstd, l, mask);
  if (g.grad_weight.defined()) g.grad_weight = g.grad_weight.reshape(param_shape);
  if (g.grad_bias.defined()) g.grad_bias = g.grad_bias.reshape(param_shape);
  return g;
}

}  // namespace

GroupNormForward group_norm_forward(const Tensor& input, int64_t num_groups, const Tensor& weight,
                                    const Tensor& bias, const NormOptions& options) {
  const char* op = "group_norm";
  const GroupNormLayout l = group_layout(op, input, num_groups);
  GroupNormForward r = forward(op, input, weight, bias, {input.size(1)}, l, options);
  r.output = in_format(r.output, input.suggest_memory_format());  // ops/memory_format.h
  return r;
}

Tensor group_norm(const Tensor& input, int64_t num_groups, const Tensor& weight, const Tensor& bias,
                  const NormOptions& options) {
  return group_norm_forward(input, num_groups, weight, bias, options).output;
}

GroupNormGrads group_norm_backward(const Tensor& grad_output, const Tensor& input,
                                   int64_t num_groups, const Tensor& weight,
                                   const Tensor& save_mean, const Tensor& save_rstd,
                                   std::array<bool, 3> output_mask) {
  const char* op = "group_norm_backward";
  const GroupNormLayout l = group_layout(op, input, num_groups);
  GroupNormGrads r = backward(op, grad_output, input, weight, save_mean, save_rstd, {input.size(1)},
                              l, output_mask);
  r.grad_input = in_format(r.grad_input, input.suggest_memory_format());
  return r;
}

GroupNormForward layer_norm_forward(const Tensor& input, const Shape& normalized_shape,
                                    const Tensor& weight, const Tensor& bias,
                                    const NormOptions& options) {
  const char* op = "layer_norm";
  const GroupNormLayout l = layer_layout(op, input, normalized_shape);
  return forward(op, input, weight, bias, normalized_shape, l, options);
}

Tensor layer_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight,
                  const Tensor& bias, const NormOptions& options) {
  return layer_norm_forward(input, normalized_shape, weight, bias, options).output;
}

GroupNormGrads layer_norm_backward(const Tensor& grad_output, const Tensor& input,
                                   const Shape& normalized_shape, const Tensor& weight,
                                   const Tensor& save_mean, const Tensor& save_rstd,
                                   std::array<bool, 3> output_mask) {
  const char* op = "layer_norm_backward";
  const GroupNormLayout l = layer_layout(op, input, normalized_shape);
  return backward(op, grad_output, input, weight, save_mean, save_rstd, normalized_shape, l,
                  output_mask);
}

}  // namespace stoke::ops
