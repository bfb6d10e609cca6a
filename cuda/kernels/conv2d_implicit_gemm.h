// 2-D convolution forward (cross-correlation, NCHW, f32) as an implicit GEMM:
// the im2col matrix is never materialized; each block gathers its tile of it
// straight from the input into shared memory. stoke's own kernel, to study and
// to compare with cuDNN (bench/kernels/ stoke-kernel-conv2d);
// cuda/kernels/conv2d_implicit_gemm.cu explains the mapping.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "cuda/compat.h"

namespace stoke::cuda {

// Geometry of one convolution: input (batch, channels, height, width), weight
// (out_channels, channels / groups, kernel_h, kernel_w). Pairs follow PyTorch's
// Conv2d arguments.
struct Conv2dGeometry {
  int64_t batch = 0, channels = 0, height = 0, width = 0;
  int64_t out_channels = 0, kernel_h = 0, kernel_w = 0;
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t dilation_h = 1, dilation_w = 1;
  int64_t groups = 1;
};

// Output (height, width) of the convolution; throws naming the geometry when it
// would be empty or the geometry is invalid (channels or out_channels not
// divisible by groups, sizes < 1).
std::array<int64_t, 2> conv2d_implicit_gemm_output_size(const Conv2dGeometry& geometry);

// The square GEMM tiles (output pixels x output channels per 256-thread block)
// the kernel is compiled for, default first: the benchmark's sweep.
std::vector<int> conv2d_implicit_gemm_tile_sizes();

// y (batch, out_channels, OH, OW) = conv2d(x, w) + bias, all contiguous f32
// (bias may be null). `tile` is one of conv2d_implicit_gemm_tile_sizes() or 0
// for the default. Asynchronous on `stream`; throws stoke::Error on bad
// arguments or a launch error.
void conv2d_implicit_gemm_forward(const Conv2dGeometry& geometry, const float* x, const float* w,
                                  const float* bias, float* y, cudaStream_t stream, int tile = 0);

}  // namespace stoke::cuda
