// Batch norm on cuda tensors: ops/batch_norm.h translated to cuda/kernels/batch_norm.h (our kernels
// in both builds; cuDNN's batch norm in cuda/vendor is exercised by stoke-gpu-selftest, and which
// one the dispatch uses is to be chosen by measurement on a GPU).
//
// Dtypes: an f32 input takes f32 per-channel tensors, as on the CPU. An f16 or bf16 input takes
// f32 per-channel tensors (weight, bias, running and saved statistics), as cuDNN's and PyTorch's
// mixed-precision batch norm do: the statistics of half values need f32 to stay accurate.
//
// Layouts: a channels_last input runs the kernels' NHWC layout in place (equal to NCHW bit for
// bit, cuda/kernels/batch_norm.cu), with no copy to NCHW and back.
#include "cuda/kernels/batch_norm.h"
#include "cuda/kernels/elementwise_util.h"
#include "ops/batch_norm.h"
#include "ops/check.h"
#include "ops/creation.h"
#include "ops/cuda/backend.h"
#include "ops/cuda/glue_util.h"
#include "ops/memory_format.h"

namespace stoke::ops::cuda_glue {
namespace {

cuda::BatchNormLayout layout_of(const Tensor& x) {
  cuda::BatchNormLayout l;
  l.batch = x.size(0);
  l.channels = x.size(1);
  for (int64_t d = 2; d < x.dim(); ++d) l.spatial *= x.size(d);
  l.channels_last = kernel_format(x) == MemoryFormat::channels_last;
  return l;
}

// The f32 per-channel tensors the kernels update in place must be contiguous: a strided one is
// worked on through a contiguous copy that is written back.
struct ContiguousInOut {
  Tensor original, work;
  explicit ContiguousInOut(const Tensor& t)
      : original(t), work(t.defined() && !t.is_contiguous() ? t.contiguous() : t) {}
  float* data() const { return work.defined() ? typed<float>(work) : nullptr; }
  void write_back() const {
    if (work.defined() && work.data_ptr() != original.data_ptr()) Tensor(original).copy_(work);
  }
};

}  // namespace

BatchNormForward CudaBackend::batch_norm_forward(const Tensor& input, const Tensor& running_mean,
                                                 const Tensor& running_var, const Tensor& weight,
                                                 const Tensor& bias,
                                                 const BatchNormOptions& options) {
  const char* op = "batch_norm";
  check_float_dtype(op, input);
  check_f32_per_channel(op, running_mean, "running_mean", input);
  check_f32_per_channel(op, running_var, "running_var", input);
  check_f32_per_channel(op, weight, "weight", input);
  check_f32_per_channel(op, bias, "bias", input);
  // running_mean/var together, eps and the values per channel: ops/batch_norm.cpp.
  const bool use_batch = options.training || !running_mean.defined();
  const MemoryFormat format = kernel_format(input);
  const Tensor x = input.contiguous(format);
  const cuda::BatchNormLayout l = layout_of(x);
  const Device dev = x.device();
  BatchNormForward r{empty_in_format(x.shape(), {.dtype = x.dtype(), .device = dev}, format),
                     empty_on({l.channels}, DType::f32, dev),
                     empty_on({l.channels}, DType::f32, dev)};
  const Tensor w = weight.defined() ? weight.contiguous() : Tensor();
  const Tensor b = bias.defined() ? bias.contiguous() : Tensor();
  if (x.numel() == 0) return r;
  cuda::ew::dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    if (use_batch) {
      // Running statistics are buffers updated in place (only in training with them defined).
      const bool update = options.training && running_mean.defined();
      const ContiguousInOut rm(update ? running_mean : Tensor()),
          rv(update ? running_var : Tensor());
      cuda::batch_norm_forward_training(
          l, typed<T>(x), typed<T>(r.output), f32_or_null(w), f32_or_null(b), rm.data(), rv.data(),
          static_cast<float>(options.momentum), static_cast<float>(options.eps),
          typed<float>(r.save_mean), typed<float>(r.save_invstd), launch_stream(), options.relu);
      rm.write_back();
      rv.write_back();
    } else {
      const Tensor rm = running_mean.contiguous(), rv = running_var.contiguous();
      cuda::batch_norm_forward_eval(l, typed<T>(x), typed<T>(r.output), f32_or_null(w),
                                    f32_or_null(b), typed<float>(rm), typed<float>(rv),
                                    static_cast<float>(options.eps), typed<float>(r.save_mean),
                                    typed<float>(r.save_invstd), launch_stream(), options.relu);
    }
  });
  return r;
}

BatchNormGrads CudaBackend::batch_norm_backward(const Tensor& grad_output, const Tensor& input,
                                                const Tensor& weight, const Tensor& save_mean,
                                                const Tensor& save_invstd, bool training,
                                                std::array<bool, 3> output_mask,
                                                const Tensor& relu_output) {
  const char* op = "batch_norm_backward";
  check_float_dtype(op, input);
  check_f32_per_channel(op, weight, "weight", input);
  check_f32_per_channel(op, save_mean, "save_mean", input);
  check_f32_per_channel(op, save_invstd, "save_invstd", input);
  const MemoryFormat format = kernel_format(input);
  const Tensor x = input.contiguous(format), dy = grad_output.contiguous(format);
  const Tensor relu_y = relu_output.defined() ? relu_output.contiguous(format) : Tensor();
  const Tensor w = weight.defined() ? weight.contiguous() : Tensor();
  const Tensor mean = save_mean.contiguous(), invstd = save_invstd.contiguous();
  const cuda::BatchNormLayout l = layout_of(x);
  const Device dev = x.device();
  const DType channel_dtype = DType::f32;
  BatchNormGrads g;
  if (output_mask[0])
    g.grad_input = empty_in_format(x.shape(), {.dtype = x.dtype(), .device = dev}, format);
  if (output_mask[1]) g.grad_weight = empty_on({l.channels}, channel_dtype, dev);
  if (output_mask[2]) g.grad_bias = empty_on({l.channels}, channel_dtype, dev);
  if (!output_mask[0] && !output_mask[1] && !output_mask[2]) return g;
  if (x.numel() == 0) {
    // No values: zero parameter gradients, an empty input gradient (as the CPU's sums give).
    if (g.grad_weight.defined()) fill_(g.grad_weight, 0);
    if (g.grad_bias.defined()) fill_(g.grad_bias, 0);
    return g;
  }
  const Tensor workspace =
      empty_on({cuda::batch_norm_backward_workspace_floats(l.channels)}, DType::f32, dev);
  cuda::ew::dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    cuda::batch_norm_backward(
        l, typed<T>(dy), typed<T>(x), f32_or_null(w), typed<float>(mean), typed<float>(invstd),
        training, g.grad_input.defined() ? typed<T>(g.grad_input) : nullptr,
        g.grad_weight.defined() ? typed<float>(g.grad_weight) : nullptr,
        g.grad_bias.defined() ? typed<float>(g.grad_bias) : nullptr, typed<float>(workspace),
        launch_stream(), relu_y.defined() ? typed<T>(relu_y) : nullptr);
  });
  return g;
}

}  // namespace stoke::ops::cuda_glue
