// conv2d on cuda tensors. Two implementations behind one switch (backend.h, ConvImpl):
//  - cudnn (real builds, the default there): cuda/vendor/cudnn_conv.h, f32/f16/bf16, the
//    algorithm chosen once per shape and cached, workspaces from our allocator; NHWC kernels for
//    a channels_last input, NCHW ones otherwise;
//  - stoke (the only one in the emulated build): the implicit-GEMM forward kernel, and for the
//    backward cuda::conv2d_backward (cuda/kernels/conv2d_backward.h: im2col + SGEMM for the weight
//    gradient, SGEMM + col2im for the input gradient), a chunk of samples at a time so the column
//    matrix stays under column_budget() floats. The GEMM is f32:
//    f16/bf16 operands are cast to f32 on the device first and the results cast back.
#include <cstdlib>
#include <cstring>
#include <utility>

#include "cuda/kernels/conv2d_backward.h"
#include "cuda/kernels/conv2d_implicit_gemm.h"
#include "ops/conv2d.h"
#include "ops/creation.h"
#include "ops/cuda/backend.h"
#include "ops/elementwise.h"
#include "ops/math_mode.h"
#include "ops/reduce.h"
#ifndef STOKE_CUDA_EMU
#include "cuda/vendor/cudnn_conv.h"
#endif

namespace stoke::ops::cuda_glue {
namespace {

// Floats of column matrix one step of the stoke backward may hold (64 MiB by default).
int64_t& column_budget() {
  static int64_t floats = cuda::kConv2dBackwardColumnBudget;
  return floats;
}

ConvImpl initial_impl() {
#ifdef STOKE_CUDA_EMU
  return ConvImpl::stoke;
#else
  const char* env = std::getenv("STOKE_CUDA_CONV");
  return env && std::strcmp(env, "stoke") == 0 ? ConvImpl::stoke : ConvImpl::cudnn;
#endif
}

ConvImpl& impl_setting() {
  static ConvImpl impl = initial_impl();
  return impl;
}

struct Geometry {
  int64_t N, C, H, W, K, kh, kw, OH, OW, groups;
  Conv2dOptions o;
};

Geometry geometry_of(const Tensor& x, const Tensor& w, const Conv2dOptions& o) {
  const auto out = conv2d_output_size({x.size(2), x.size(3)}, {w.size(2), w.size(3)}, o);
  return {x.size(0), x.size(1), x.size(2), x.size(3), w.size(0), w.size(2),
          w.size(3), out[0],    out[1],    o.groups,  o};
}

Tensor contiguous_f32(const Tensor& t) {
  return t.dtype() == DType::f32 ? t.contiguous() : t.to(DType::f32).contiguous();
}

// The launchers' geometry of this convolution.
cuda::Conv2dGeometry kernel_geometry(const Geometry& g) {
  return {.batch = g.N,
          .channels = g.C,
          .height = g.H,
          .width = g.W,
          .out_channels = g.K,
          .kernel_h = g.kh,
          .kernel_w = g.kw,
          .stride_h = g.o.stride[0],
          .stride_w = g.o.stride[1],
          .pad_h = g.o.padding[0],
          .pad_w = g.o.padding[1],
          .dilation_h = g.o.dilation[0],
          .dilation_w = g.o.dilation[1],
          .groups = g.groups};
}

Tensor stoke_forward(const Geometry& g, const Tensor& x, const Tensor& w, const Tensor& bias) {
  const Tensor xf = contiguous_f32(x), wf = contiguous_f32(w);
  const Tensor bf = bias.defined() ? contiguous_f32(bias) : Tensor();
  Tensor y = empty_on({g.N, g.K, g.OH, g.OW}, DType::f32, x.device());
  cuda::conv2d_implicit_gemm_forward(kernel_geometry(g), typed<float>(xf), typed<float>(wf),
                                     bf.defined() ? typed<float>(bf) : nullptr, typed<float>(y),
                                     launch_stream());
  return x.dtype() == DType::f32 ? y : y.to(x.dtype());
}

// grad_input and/or grad_weight (f32) by cuda::conv2d_backward (im2col / col2im and SGEMM), a
// chunk of samples at a time under the column budget.
void stoke_backward(const Geometry& g, const Tensor& gy_in, const Tensor& x_in, const Tensor& w_in,
                    Tensor* grad_input, Tensor* grad_weight) {
  const Tensor gy = contiguous_f32(gy_in), x = contiguous_f32(x_in), w = contiguous_f32(w_in);
  const Device dev = x.device();
  if (grad_input) *grad_input = empty_on(x.shape(), DType::f32, dev);
  if (grad_weight) *grad_weight = empty_on(w.shape(), DType::f32, dev);
  const cuda::Conv2dGeometry kg = kernel_geometry(g);
  const int64_t chunk = cuda::conv2d_backward_chunk(kg, column_budget());
  Tensor workspace = empty_on({cuda::conv2d_backward_workspace_floats(kg, chunk)}, DType::f32, dev);
  cuda::conv2d_backward(kg, typed<float>(gy), typed<float>(x), typed<float>(w),
                        grad_input ? typed<float>(*grad_input) : nullptr,
                        grad_weight ? typed<float>(*grad_weight) : nullptr, typed<float>(workspace),
                        chunk, launch_stream());
}

#ifndef STOKE_CUDA_EMU
// A new (n, c, h, w) tensor laid out in `format` (NHWC strides for channels_last).
Tensor empty_in(MemoryFormat format, int64_t n, int64_t c, int64_t h, int64_t w, DType dtype,
                Device device) {
  if (format == MemoryFormat::contiguous) return empty_on({n, c, h, w}, dtype, device);
  return empty_on({n, h, w, c}, dtype, device).permute({0, 3, 1, 2});
}

// The geometry cuDNN's forward and backward calls take. A channels_last input runs cuDNN's NHWC
// kernels (the tensor-core ones for f16/bf16): x, y and dy in NHWC, the weight and dw in KRSC
// (the weight's own channels_last copy), with no transposes around the call.
cuda::ConvGeometry cudnn_geometry(const Geometry& g, const Conv2dOptions& o, DType dtype,
                                  MemoryFormat format) {
  cuda::ConvGeometry c;
  c.n = g.N, c.c = g.C, c.h = g.H, c.w = g.W, c.k = g.K, c.r = g.kh, c.s = g.kw;
  c.stride = o.stride;
  c.padding = o.padding;
  c.dilation = o.dilation;
  c.groups = o.groups;
  c.dtype = dtype;
  c.allow_tf32 = allow_tf32();
  c.channels_last = format == MemoryFormat::channels_last;
  return c;
}
#endif

}  // namespace

int64_t set_conv_column_budget(int64_t floats) {
  STOKE_CHECK(floats > 0, "set_conv_column_budget", "expected a positive number of floats, got ",
              floats);
  return std::exchange(column_budget(), floats);
}

void set_conv_impl(ConvImpl impl) {
#ifdef STOKE_CUDA_EMU
  STOKE_CHECK(impl == ConvImpl::stoke, "set_conv_impl",
              "this build has no cuDNN (the emulated CUDA backend runs stoke's kernels only)");
#endif
  impl_setting() = impl;
}

ConvImpl conv_impl() {
  return impl_setting();
}

Tensor CudaBackend::conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias,
                           const Conv2dOptions& options) {
  check_float_dtype("conv2d", input);
  const Geometry g = geometry_of(input, weight, options);
  if (g.N == 0) return empty_on({0, g.K, g.OH, g.OW}, input.dtype(), input.device());
#ifndef STOKE_CUDA_EMU
  if (conv_impl() == ConvImpl::cudnn) {
    const MemoryFormat f = input.suggest_memory_format();
    const Tensor x = input.detach().contiguous(f), w = weight.detach().contiguous(f);
    const cuda::ConvGeometry c = cudnn_geometry(g, options, x.dtype(), f);
    Tensor y = empty_in(f, g.N, g.K, g.OH, g.OW, x.dtype(), x.device());
    cuda::conv2d_forward(c, x.data_ptr(), w.data_ptr(), y.data_ptr(), launch_stream());
    if (bias.defined()) add_(y, bias.detach().view({1, g.K, 1, 1}));
    return y;
  }
#endif
  return stoke_forward(g, input.detach(), weight.detach(), bias.defined() ? bias.detach() : bias);
}

Conv2dGrads CudaBackend::conv2d_backward(const Tensor& grad_out, const Tensor& input,
                                         const Tensor& weight, const Conv2dOptions& options,
                                         bool need_input, bool need_weight, bool need_bias) {
  check_float_dtype("conv2d_backward", input);
  const Geometry g = geometry_of(input, weight, options);
  const Tensor gy = grad_out.detach(), x = input.detach(), w = weight.detach();
  Conv2dGrads r;
  if (need_bias) r.grad_bias = ops::conv2d_backward_bias(gy);
  if (!need_input && !need_weight) return r;
  if (g.N == 0) {
    if (need_input) r.grad_input = empty_on(x.shape(), x.dtype(), x.device());
    if (need_weight) r.grad_weight = zeros(w.shape(), {.dtype = w.dtype(), .device = w.device()});
    return r;
  }
#ifndef STOKE_CUDA_EMU
  if (conv_impl() == ConvImpl::cudnn) {
    const MemoryFormat f = x.suggest_memory_format();
    const Tensor gyc = gy.contiguous(f), xc = x.contiguous(f), wc = w.contiguous(f);
    const cuda::ConvGeometry c = cudnn_geometry(g, options, x.dtype(), f);
    if (need_input) {
      r.grad_input = empty_in(f, g.N, g.C, g.H, g.W, x.dtype(), x.device());
      cuda::conv2d_backward_data(c, gyc.data_ptr(), wc.data_ptr(), r.grad_input.data_ptr(),
                                 launch_stream());
    }
    if (need_weight) {
      // cuDNN writes dw in the weight descriptor's layout (KRSC for NHWC); the parameter's
      // gradient takes the parameter's own layout.
      Tensor gw = empty_in(f, w.size(0), w.size(1), w.size(2), w.size(3), w.dtype(), w.device());
      cuda::conv2d_backward_filter(c, xc.data_ptr(), gyc.data_ptr(), gw.data_ptr(),
                                   launch_stream());
      r.grad_weight = gw.contiguous(w.suggest_memory_format());
    }
    return r;
  }
#endif
  Tensor gi, gw;
  stoke_backward(g, gy, x, w, need_input ? &gi : nullptr, need_weight ? &gw : nullptr);
  if (need_input) r.grad_input = x.dtype() == DType::f32 ? gi : gi.to(x.dtype());
  if (need_weight) r.grad_weight = w.dtype() == DType::f32 ? gw : gw.to(w.dtype());
  return r;
}

Tensor CudaBackend::conv2d_backward_bias(const Tensor& grad_out) {
  // The sum over (N, OH, OW) with the reduction kernel.
  return ops::sum(grad_out.detach(), {0, 2, 3});
}

}  // namespace stoke::ops::cuda_glue
