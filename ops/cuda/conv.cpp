// conv2d on cuda tensors. Two implementations behind one switch (backend.h, ConvImpl):
//  - cudnn (real builds, the default there): cuda/vendor/cudnn_conv.h, f32/f16/bf16, the
//    algorithm chosen once per shape and cached, workspaces from our allocator;
//  - stoke (the only one in the emulated build): the implicit-GEMM forward kernel, and for the
//    backward im2col + SGEMM (weight gradient) and SGEMM + col2im (input gradient), a chunk of
//    samples at a time so the column matrix stays under kColumnBudget floats. The GEMM is f32:
//    f16/bf16 operands are cast to f32 on the device first and the results cast back.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "cuda/kernels/conv2d_implicit_gemm.h"
#include "cuda/kernels/im2col.h"
#include "cuda/kernels/sgemm.h"
#include "ops/conv.h"
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
  static int64_t floats = int64_t{16} << 20;
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
  int64_t Cg() const { return C / groups; }
  int64_t Kg() const { return K / groups; }
  int64_t P() const { return OH * OW; }
};

Geometry geometry_of(const Tensor& x, const Tensor& w, const Conv2dOptions& o) {
  const auto out = conv2d_output_size({x.size(2), x.size(3)}, {w.size(2), w.size(3)}, o);
  return {x.size(0), x.size(1), x.size(2), x.size(3), w.size(0), w.size(2),
          w.size(3), out[0],    out[1],    o.groups,  o};
}

// The im2col geometry of `samples` samples of one group.
cuda::Im2colGeometry columns_of(const Geometry& g, int64_t samples) {
  cuda::Im2colGeometry c;
  c.samples = samples;
  c.channels = g.Cg();
  c.sample_stride = g.C * g.H * g.W;
  c.height = g.H;
  c.width = g.W;
  c.kernel_h = g.kh;
  c.kernel_w = g.kw;
  c.out_h = g.OH;
  c.out_w = g.OW;
  c.stride_h = g.o.stride[0];
  c.stride_w = g.o.stride[1];
  c.pad_h = g.o.padding[0];
  c.pad_w = g.o.padding[1];
  c.dilation_h = g.o.dilation[0];
  c.dilation_w = g.o.dilation[1];
  return c;
}

// Samples per step so that one group's column matrix fits kColumnBudget (at least one).
int64_t chunk_of(const Geometry& g) {
  const int64_t per_sample = std::max<int64_t>(1, g.Cg() * g.kh * g.kw * g.P());
  return std::clamp<int64_t>(column_budget() / per_sample, 1, std::max<int64_t>(1, g.N));
}

Tensor as_f32(const Tensor& t) {
  return t.dtype() == DType::f32 ? t.contiguous() : t.to(DType::f32).contiguous();
}

Tensor stoke_forward(const Geometry& g, const Tensor& x, const Tensor& w, const Tensor& bias) {
  const Tensor xf = as_f32(x), wf = as_f32(w);
  const Tensor bf = bias.defined() ? as_f32(bias) : Tensor();
  Tensor y = empty_on({g.N, g.K, g.OH, g.OW}, DType::f32, x.device());
  cuda::Conv2dGeometry c;
  c.batch = g.N;
  c.channels = g.C;
  c.height = g.H;
  c.width = g.W;
  c.out_channels = g.K;
  c.kernel_h = g.kh;
  c.kernel_w = g.kw;
  c.stride_h = g.o.stride[0];
  c.stride_w = g.o.stride[1];
  c.pad_h = g.o.padding[0];
  c.pad_w = g.o.padding[1];
  c.dilation_h = g.o.dilation[0];
  c.dilation_w = g.o.dilation[1];
  c.groups = g.groups;
  cuda::conv2d_implicit_gemm_forward(c, typed<float>(xf), typed<float>(wf),
                                     bf.defined() ? typed<float>(bf) : nullptr, typed<float>(y),
                                     launch_stream());
  return x.dtype() == DType::f32 ? y : y.to(x.dtype());
}

// grad_input and/or grad_weight (f32) by im2col / col2im and SGEMM, a chunk of samples at a time.
void stoke_backward(const Geometry& g, const Tensor& gy_in, const Tensor& x_in, const Tensor& w_in,
                    Tensor* grad_input, Tensor* grad_weight) {
  const Tensor gy = as_f32(gy_in), x = as_f32(x_in), w = as_f32(w_in);
  const Device dev = x.device();
  const cudaStream_t s = launch_stream();
  if (grad_input) *grad_input = empty_on(x.shape(), DType::f32, dev);
  if (grad_weight) *grad_weight = empty_on(w.shape(), DType::f32, dev);
  const int64_t R = g.Cg() * g.kh * g.kw, P = g.P(), chunk = chunk_of(g);
  // The column matrix of a chunk of nb samples is (R, nb * P) with row stride nb * P (im2col and
  // col2im write and read it packed), so the GEMMs take cols = nb * P as its leading dimension:
  // the last chunk may be shorter than the buffer's rows.
  Tensor col = empty_on({R, chunk * P}, DType::f32, dev);
  // dY of a chunk with the channels first, (K, nb * P): the GEMMs' operand layout.
  Tensor gy_t = empty_on({g.K, chunk * P}, DType::f32, dev);
  for (int64_t n0 = 0; n0 < g.N; n0 += chunk) {
    const int64_t nb = std::min(chunk, g.N - n0);
    const int64_t cols = nb * P;
    Tensor gy_chunk = gy_t.narrow(1, 0, cols).view({g.K, nb, P});
    gy_chunk.copy_(gy.narrow(0, n0, nb).view({nb, g.K, P}).permute({1, 0, 2}));
    const cuda::Im2colGeometry cg = columns_of(g, nb);
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      const float* x0 = typed<float>(x) + (n0 * g.C + grp * g.Cg()) * g.H * g.W;
      const float* dy = typed<float>(gy_t) + grp * g.Kg() * gy_t.size(1);
      const float* wg = typed<float>(w) + grp * g.Kg() * R;
      if (grad_weight) {
        // dW_g (Kg, R) += dY_g (Kg, cols) * col^T (cols, R); the first chunk overwrites.
        cuda::im2col(cg, x0, typed<float>(col), s);
        cuda::sgemm(false, true, g.Kg(), R, cols, 1.f, dy, gy_t.size(1), typed<float>(col), cols,
                    n0 == 0 ? 0.f : 1.f, typed<float>(*grad_weight) + grp * g.Kg() * R, R, s);
      }
      if (grad_input) {
        // col (R, cols) = W_g^T (R, Kg) * dY_g (Kg, cols), scattered back by col2im.
        cuda::sgemm(true, false, R, cols, g.Kg(), 1.f, wg, R, dy, gy_t.size(1), 0.f,
                    typed<float>(col), cols, s);
        float* dx0 = typed<float>(*grad_input) + (n0 * g.C + grp * g.Cg()) * g.H * g.W;
        cuda::col2im(cg, typed<float>(col), dx0, s);
      }
    }
  }
}

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

Tensor CudaKernels::conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias,
                           const Conv2dOptions& options) {
  check_float_dtype("conv2d", input);
  const Geometry g = geometry_of(input, weight, options);
  if (g.N == 0) return empty_on({0, g.K, g.OH, g.OW}, input.dtype(), input.device());
#ifndef STOKE_CUDA_EMU
  if (conv_impl() == ConvImpl::cudnn) {
    const Tensor x = input.detach().contiguous(), w = weight.detach().contiguous();
    cuda::ConvGeometry c;
    c.n = g.N, c.c = g.C, c.h = g.H, c.w = g.W, c.k = g.K, c.r = g.kh, c.s = g.kw;
    c.stride = options.stride;
    c.padding = options.padding;
    c.dilation = options.dilation;
    c.groups = options.groups;
    c.dtype = x.dtype();
    c.allow_tf32 = allow_tf32();
    Tensor y = empty_on({g.N, g.K, g.OH, g.OW}, x.dtype(), x.device());
    cuda::conv2d_forward(c, x.data_ptr(), w.data_ptr(), y.data_ptr(), launch_stream());
    if (bias.defined()) add_(y, bias.detach().view({1, g.K, 1, 1}));
    return y;
  }
#endif
  return stoke_forward(g, input.detach(), weight.detach(), bias.defined() ? bias.detach() : bias);
}

Conv2dGrads CudaKernels::conv2d_backward(const Tensor& grad_out, const Tensor& input,
                                         const Tensor& weight, const Conv2dOptions& options,
                                         bool need_input, bool need_weight, bool need_bias) {
  check_float_dtype("conv2d_backward", input);
  const Geometry g = geometry_of(input, weight, options);
  const Tensor gy = grad_out.detach(), x = input.detach(), w = weight.detach();
  Conv2dGrads r;
  if (need_bias) r.grad_bias = conv2d_backward_bias(gy);
  if (!need_input && !need_weight) return r;
  if (g.N == 0) {
    if (need_input) r.grad_input = empty_on(x.shape(), x.dtype(), x.device());
    if (need_weight) r.grad_weight = zeros(w.shape(), {.dtype = w.dtype(), .device = w.device()});
    return r;
  }
#ifndef STOKE_CUDA_EMU
  if (conv_impl() == ConvImpl::cudnn) {
    const Tensor gyc = gy.contiguous(), xc = x.contiguous(), wc = w.contiguous();
    cuda::ConvGeometry c;
    c.n = g.N, c.c = g.C, c.h = g.H, c.w = g.W, c.k = g.K, c.r = g.kh, c.s = g.kw;
    c.stride = options.stride;
    c.padding = options.padding;
    c.dilation = options.dilation;
    c.groups = options.groups;
    c.dtype = x.dtype();
    c.allow_tf32 = allow_tf32();
    if (need_input) {
      r.grad_input = empty_on(x.shape(), x.dtype(), x.device());
      cuda::conv2d_backward_data(c, gyc.data_ptr(), wc.data_ptr(), r.grad_input.data_ptr(),
                                 launch_stream());
    }
    if (need_weight) {
      r.grad_weight = empty_on(w.shape(), w.dtype(), w.device());
      cuda::conv2d_backward_filter(c, xc.data_ptr(), gyc.data_ptr(), r.grad_weight.data_ptr(),
                                   launch_stream());
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

}  // namespace stoke::ops::cuda_glue
