// Group / layer norm on cuda tensors: ops/group_norm.h translated to cuda/kernels/group_norm.h.
// Dtypes as batch norm's (ops/cuda/batch_norm.cpp): an f32 input takes f32 weight / bias; an f16
// or bf16 input takes f32 weight / bias and gets f32 saved statistics and weight / bias
// gradients, the statistics of half values needing f32.
#include <cmath>

#include "cuda/kernels/elementwise_util.h"
#include "cuda/kernels/group_norm.h"
#include "ops/check.h"
#include "ops/creation.h"
#include "ops/cuda/backend.h"
#include "ops/cuda/glue_util.h"
#include "ops/group_norm.h"

namespace stoke::ops::cuda_glue {
namespace {

cuda::GroupNormLayout kernel_layout(const GroupNormLayout& l) {
  return {.batch = l.batch,
          .groups = l.groups,
          .channels_per_group = l.channels_per_group,
          .spatial = l.spatial};
}

}  // namespace

GroupNormForward CudaBackend::group_norm_forward(const Tensor& input, const Tensor& weight,
                                                 const Tensor& bias, const GroupNormLayout& l,
                                                 double eps) {
  const char* op = "group_norm";
  check_float_dtype(op, input);
  const int64_t rows = l.batch * l.groups;
  check_f32_per_channel(op, weight, "weight", input);
  check_f32_per_channel(op, bias, "bias", input);
  const Tensor x = input.contiguous();
  const Tensor w = weight.defined() ? weight.contiguous() : Tensor();
  const Tensor b = bias.defined() ? bias.contiguous() : Tensor();
  const Device dev = x.device();
  GroupNormForward r{empty_on(x.shape(), x.dtype(), dev), empty_on({rows}, DType::f32, dev),
                     empty_on({rows}, DType::f32, dev)};
  if (x.numel() == 0) {
    // Rows of no values (a zero-size spatial dim): mean 0, variance 0, as the CPU's sums give.
    if (rows > 0) {
      fill_(r.save_mean, 0);
      fill_(r.save_rstd, 1 / std::sqrt(eps));
    }
    return r;
  }
  cuda::ew::dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    cuda::group_norm_forward(kernel_layout(l), typed<T>(x), typed<T>(r.output), f32_or_null(w),
                             f32_or_null(b), static_cast<float>(eps), typed<float>(r.save_mean),
                             typed<float>(r.save_rstd), launch_stream());
  });
  return r;
}

GroupNormGrads CudaBackend::group_norm_backward(const Tensor& grad_output, const Tensor& input,
                                                const Tensor& weight, const Tensor& save_mean,
                                                const Tensor& save_rstd, const GroupNormLayout& l,
                                                std::array<bool, 3> output_mask) {
  const char* op = "group_norm_backward";
  check_float_dtype(op, input);
  check_same_dtype(op, input, "input", grad_output, "grad_output");
  const int64_t C = l.groups * l.channels_per_group;
  check_f32_per_channel(op, weight, "weight", input);
  check_f32_per_channel(op, save_mean, "save_mean", input);
  check_f32_per_channel(op, save_rstd, "save_rstd", input);
  const Tensor x = input.contiguous(), dy = grad_output.contiguous();
  const Tensor w = weight.defined() ? weight.contiguous() : Tensor();
  const Tensor mean = save_mean.contiguous(), rstd = save_rstd.contiguous();
  const Device dev = x.device();
  GroupNormGrads g;
  if (output_mask[0]) g.grad_input = empty_on(x.shape(), x.dtype(), dev);
  if (output_mask[1] && w.defined()) g.grad_weight = empty_on({C}, DType::f32, dev);
  if (output_mask[2]) g.grad_bias = empty_on({C}, DType::f32, dev);
  if (x.numel() == 0) {
    if (g.grad_weight.defined()) fill_(g.grad_weight, 0);
    if (g.grad_bias.defined()) fill_(g.grad_bias, 0);
    return g;
  }
  cuda::ew::dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    cuda::group_norm_backward(
        kernel_layout(l), typed<T>(dy), typed<T>(x), f32_or_null(w), typed<float>(mean),
        typed<float>(rstd), g.grad_input.defined() ? typed<T>(g.grad_input) : nullptr,
        g.grad_weight.defined() ? typed<float>(g.grad_weight) : nullptr,
        g.grad_bias.defined() ? typed<float>(g.grad_bias) : nullptr, launch_stream());
  });
  return g;
}

}  // namespace stoke::ops::cuda_glue
