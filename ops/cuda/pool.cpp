// Pooling on cuda tensors: the ops/pool.h entry points translated to cuda/kernels/pool.h. The
// entry points have already checked the geometry (ops/pool.cpp); here the dtype is checked
// and the geometry rebuilt for the kernels. Both builds use our kernels: cuDNN pooling
// (cuda/vendor/cudnn_pool.h) is exercised by stoke-gpu-selftest, and which one the dispatch uses
// is to be chosen by measurement on a GPU (bench/ops_cuda puts them side by side). A channels_last
// input runs the kernels' channels-last instances in place (cuda/kernels/pool.h).
#include "cuda/kernels/pool.h"
#include "cuda/kernels/elementwise_util.h"
#include "ops/cuda/backend.h"
#include "ops/memory_format.h"
#include "ops/pool.h"

namespace stoke::ops::cuda_glue {
namespace {

// (planes, H, W) of a (C, H, W) or (N, C, H, W) shape.
cuda::Pool2dGeometry planes_of(const Shape& in) {
  cuda::Pool2dGeometry g;
  const size_t nd = in.size();
  g.height = in[nd - 2];
  g.width = in[nd - 1];
  g.planes = g.height * g.width == 0 ? 0 : in.numel() / (g.height * g.width);
  return g;
}

// g in `format` (shape: the 4-d input's, when channels_last).
cuda::Pool2dGeometry in_layout(cuda::Pool2dGeometry g, const Shape& shape, MemoryFormat format) {
  if (format == MemoryFormat::channels_last) {
    g.channels_last = true;
    g.channels = shape[1];
  }
  return g;
}

// The window geometry of max/avg pooling (options already validated by the entry point).
cuda::Pool2dGeometry window_of(const Shape& in, const Pool2dOptions& o) {
  cuda::Pool2dGeometry g = planes_of(in);
  g.kernel_h = o.kernel_size[0];
  g.kernel_w = o.kernel_size[1];
  g.stride_h = o.stride[0] == 0 ? g.kernel_h : o.stride[0];
  g.stride_w = o.stride[1] == 0 ? g.kernel_w : o.stride[1];
  g.pad_h = o.padding[0];
  g.pad_w = o.padding[1];
  g.out_h = pool_output_size(g.height, g.kernel_h, g.stride_h, g.pad_h, o.ceil_mode);
  g.out_w = pool_output_size(g.width, g.kernel_w, g.stride_w, g.pad_w, o.ceil_mode);
  g.count_include_pad = o.count_include_pad;
  return g;
}

Shape with_spatial(Shape s, int64_t h, int64_t w) {
  s[s.size() - 2] = h;
  s[s.size() - 1] = w;
  return s;
}

// The frame of the launchers with one source and one destination of its dtype: the destination
// of `dst_shape` in `format`, then launch(src, dst) with pointers of the dtype; nothing is launched
// for an empty destination. `src` is laid out in `format`.
template <class Launch>
Tensor launch_floating(const char* op, const Tensor& src, const Shape& dst_shape,
                       MemoryFormat format, Launch launch) {
  Tensor dst = empty_in_format(dst_shape, {.dtype = src.dtype(), .device = src.device()}, format);
  if (dst.numel() == 0) return dst;
  cuda::ew::dispatch_floating(src.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    launch(typed<T>(src), typed<T>(dst));
  });
  return dst;
}

}  // namespace

Tensor CudaBackend::max_pool2d(const Tensor& input, const Pool2dOptions& options) {
  // One kernel computes both; the indices are dropped.
  return max_pool2d_with_indices(input, options).output;
}

MaxPool2dResult CudaBackend::max_pool2d_with_indices(const Tensor& input,
                                                     const Pool2dOptions& options) {
  const char* op = "max_pool2d";
  check_float_dtype(op, input);
  const MemoryFormat format = kernel_format(input);
  const Tensor x = input.contiguous(format);
  const cuda::Pool2dGeometry g = in_layout(window_of(x.shape(), options), x.shape(), format);
  const Shape out_shape = with_spatial(x.shape(), g.out_h, g.out_w);
  MaxPool2dResult r{
      empty_in_format(out_shape, {.dtype = x.dtype(), .device = x.device()}, format),
      empty_in_format(out_shape, {.dtype = DType::i64, .device = x.device()}, format)};
  if (g.planes == 0) return r;
  cuda::ew::dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    cuda::max_pool2d_forward(g, typed<T>(x), typed<T>(r.output), typed<int64_t>(r.indices),
                             launch_stream());
  });
  return r;
}

Tensor CudaBackend::max_pool2d_backward(const Tensor& grad_output, const Tensor& indices,
                                        const Shape& input_shape, const Pool2dOptions& options) {
  const char* op = "max_pool2d_backward";
  check_float_dtype(op, grad_output);
  const MemoryFormat format = kernel_format(grad_output);  // its dims are the input's
  const Tensor gy = grad_output.contiguous(format), ind = indices.contiguous(format);
  cuda::Pool2dGeometry g;
  if (options.kernel_size[0] > 0 && options.kernel_size[1] > 0) {
    g = window_of(input_shape, options);
    STOKE_CHECK(g.out_h == gy.size(-2) && g.out_w == gy.size(-1), op, "expected grad_output of ",
                g.out_h, "x", g.out_w, " for the window of the options, got shape ", gy.shape());
  } else {
    // Window unknown: one that covers the whole plane from every output (pad = extent, kernel =
    // 2 extent + 1, stride 1), so each input element checks every output's index. Correct for
    // any forward window, quadratic in the plane size: pass the options to avoid it.
    g = planes_of(input_shape);
    g.out_h = gy.size(-2);
    g.out_w = gy.size(-1);
    const int64_t eh = std::max(g.height, g.out_h), ew = std::max(g.width, g.out_w);
    g.kernel_h = 2 * eh + 1;
    g.kernel_w = 2 * ew + 1;
    g.pad_h = eh;
    g.pad_w = ew;
    g.stride_h = g.stride_w = 1;
  }
  g = in_layout(g, input_shape, format);
  Tensor gx = empty_in_format(input_shape, {.dtype = gy.dtype(), .device = gy.device()}, format);
  if (gx.numel() == 0) return gx;
  cuda::ew::dispatch_floating(gy.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    cuda::max_pool2d_backward(g, typed<T>(gy), typed<int64_t>(ind), typed<T>(gx), launch_stream());
  });
  return gx;
}

Tensor CudaBackend::avg_pool2d(const Tensor& input, const Pool2dOptions& options) {
  const char* op = "avg_pool2d";
  check_float_dtype(op, input);
  const MemoryFormat format = kernel_format(input);
  const Tensor x = input.contiguous(format);
  const cuda::Pool2dGeometry g = in_layout(window_of(x.shape(), options), x.shape(), format);
  return launch_floating(
      op, x, with_spatial(x.shape(), g.out_h, g.out_w), format,
      [&](auto src, auto dst) { cuda::avg_pool2d_forward(g, src, dst, launch_stream()); });
}

Tensor CudaBackend::avg_pool2d_backward(const Tensor& grad_output, const Shape& input_shape,
                                        const Pool2dOptions& options) {
  const char* op = "avg_pool2d_backward";
  check_float_dtype(op, grad_output);
  const MemoryFormat format = kernel_format(grad_output);  // its dims are the input's
  const Tensor gy = grad_output.contiguous(format);
  const cuda::Pool2dGeometry g = in_layout(window_of(input_shape, options), input_shape, format);
  return launch_floating(op, gy, input_shape, format, [&](auto src, auto dst) {
    cuda::avg_pool2d_backward(g, src, dst, launch_stream());
  });
}

Tensor CudaBackend::adaptive_avg_pool2d(const Tensor& input, std::array<int64_t, 2> output_size) {
  const char* op = "adaptive_avg_pool2d";
  check_float_dtype(op, input);
  const MemoryFormat format = kernel_format(input);
  const Tensor x = input.contiguous(format);
  cuda::Pool2dGeometry g = in_layout(planes_of(x.shape()), x.shape(), format);
  g.out_h = output_size[0];
  g.out_w = output_size[1];
  return launch_floating(
      op, x, with_spatial(x.shape(), g.out_h, g.out_w), format,
      [&](auto src, auto dst) { cuda::adaptive_avg_pool2d_forward(g, src, dst, launch_stream()); });
}

Tensor CudaBackend::adaptive_avg_pool2d_backward(const Tensor& grad_output,
                                                 const Shape& input_shape) {
  const char* op = "adaptive_avg_pool2d_backward";
  check_float_dtype(op, grad_output);
  const MemoryFormat format = kernel_format(grad_output);  // its dims are the input's
  const Tensor gy = grad_output.contiguous(format);
  cuda::Pool2dGeometry g = in_layout(planes_of(input_shape), input_shape, format);
  g.out_h = gy.size(-2);
  g.out_w = gy.size(-1);
  return launch_floating(op, gy, input_shape, format, [&](auto src, auto dst) {
    cuda::adaptive_avg_pool2d_backward(g, src, dst, launch_stream());
  });
}

}  // namespace stoke::ops::cuda_glue
