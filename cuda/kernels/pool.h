// 2-D pooling on the GPU: max pooling (with argmax indices for the backward),
// average pooling and adaptive average pooling, forward and backward, with the
// semantics of ops/pool.h (PyTorch's window placement, ceil_mode output sizes,
// count_include_pad, tie and NaN rules). Inputs are contiguous (planes, H, W)
// with planes = N * C, or (N, H, W, C) (Pool2dGeometry::channels_last); f32, f16 and bf16 (math in
// f32). The backward kernels gather (one thread per input element sums the outputs whose window
// holds it), so they need no atomics and are deterministic.
#pragma once

#include <cstdint>

#include "cuda/compat.h"

namespace stoke::cuda {

// The window geometry after defaults are applied: the caller computes
// out_h/out_w with ops::pool_output_size (ceil_mode lives there) and passes
// stride = kernel for torch's default.
struct Pool2dGeometry {
  int64_t planes = 0;  // N * C
  int64_t height = 0, width = 0;
  int64_t out_h = 0, out_w = 0;
  int64_t kernel_h = 0, kernel_w = 0;
  int64_t stride_h = 0, stride_w = 0;
  int64_t pad_h = 0, pad_w = 0;   // <= kernel / 2
  bool count_include_pad = true;  // avg only: padded positions count in the divisor
  // Channels-last memory: every tensor of the call is (N, H, W, C) (out_h, out_w for the
  // outputs) with planes = N * C; max pooling's indices are still h * W + w. The results equal
  // the NCHW layout's bit for bit (each window is taken in the same order).
  bool channels_last = false;
  int64_t channels = 0;  // C, when channels_last
};

// Max pooling: y (planes, out_h, out_w); indices (same shape, may be null)
// receive the flat index h * W + w of each maximum inside its plane. The first
// maximum in window order wins ties, NaN propagates (the last NaN's index is
// kept, as on the CPU).
void max_pool2d_forward(const Pool2dGeometry& g, const float* x, float* y, int64_t* indices,
                        cudaStream_t stream);
void max_pool2d_forward(const Pool2dGeometry& g, const __half* x, __half* y, int64_t* indices,
                        cudaStream_t stream);
void max_pool2d_forward(const Pool2dGeometry& g, const __nv_bfloat16* x, __nv_bfloat16* y,
                        int64_t* indices, cudaStream_t stream);

// grad_x (planes, height, width) = the sum of grad_y at the outputs whose index
// points there.
void max_pool2d_backward(const Pool2dGeometry& g, const float* grad_y, const int64_t* indices,
                         float* grad_x, cudaStream_t stream);
void max_pool2d_backward(const Pool2dGeometry& g, const __half* grad_y, const int64_t* indices,
                         __half* grad_x, cudaStream_t stream);
void max_pool2d_backward(const Pool2dGeometry& g, const __nv_bfloat16* grad_y,
                         const int64_t* indices, __nv_bfloat16* grad_x, cudaStream_t stream);

// Average pooling; the divisor follows count_include_pad as in ops::avg_pool2d.
void avg_pool2d_forward(const Pool2dGeometry& g, const float* x, float* y, cudaStream_t stream);
void avg_pool2d_forward(const Pool2dGeometry& g, const __half* x, __half* y, cudaStream_t stream);
void avg_pool2d_forward(const Pool2dGeometry& g, const __nv_bfloat16* x, __nv_bfloat16* y,
                        cudaStream_t stream);

// Gradient of avg_pool2d: grad_x (planes, height, width) from grad_y (planes,
// out_h, out_w).
void avg_pool2d_backward(const Pool2dGeometry& g, const float* grad_y, float* grad_x,
                         cudaStream_t stream);
void avg_pool2d_backward(const Pool2dGeometry& g, const __half* grad_y, __half* grad_x,
                         cudaStream_t stream);
void avg_pool2d_backward(const Pool2dGeometry& g, const __nv_bfloat16* grad_y,
                         __nv_bfloat16* grad_x, cudaStream_t stream);

// Adaptive average pooling of (planes, height, width) to (planes, out_h,
// out_w): output (i, j) averages rows [floor(i * H / OH), ceil((i + 1) * H /
// OH)) and likewise columns. Only `planes`, `height`, `width`, `out_h` and
// `out_w` of the geometry are used.
void adaptive_avg_pool2d_forward(const Pool2dGeometry& g, const float* x, float* y,
                                 cudaStream_t stream);
void adaptive_avg_pool2d_forward(const Pool2dGeometry& g, const __half* x, __half* y,
                                 cudaStream_t stream);
void adaptive_avg_pool2d_forward(const Pool2dGeometry& g, const __nv_bfloat16* x, __nv_bfloat16* y,
                                 cudaStream_t stream);

// Gradient of adaptive_avg_pool2d with respect to its (planes, height, width)
// input.
void adaptive_avg_pool2d_backward(const Pool2dGeometry& g, const float* grad_y, float* grad_x,
                                  cudaStream_t stream);
void adaptive_avg_pool2d_backward(const Pool2dGeometry& g, const __half* grad_y, __half* grad_x,
                                  cudaStream_t stream);
void adaptive_avg_pool2d_backward(const Pool2dGeometry& g, const __nv_bfloat16* grad_y,
                                  __nv_bfloat16* grad_x, cudaStream_t stream);

}  // namespace stoke::cuda
