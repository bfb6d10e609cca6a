// im2col / col2im on the GPU: the column matrix of a 2-D convolution for a run of samples and one
// group, and its adjoint. With cuda::sgemm they make conv2d's backward (and a forward for any
// dtype) from stoke's own kernels: the path the emulated build runs and the real build can select
// instead of cuDNN (ops/cuda/conv2d.cpp). f32 only (the GEMM is f32).
#pragma once

#include <cstdint>

#include "cuda/compat.h"

namespace stoke::cuda {

// One group of one convolution over `samples` consecutive samples. The input of sample n, group
// g starts at x + n * sample_stride (the caller offsets x by the group's first channel).
struct Im2colGeometry {
  int64_t samples = 1;
  int64_t channels = 1;       // input channels of the group (C / groups)
  int64_t sample_stride = 0;  // elements between samples of x (C * H * W)
  int64_t height = 1, width = 1;
  int64_t kernel_h = 1, kernel_w = 1;
  int64_t out_h = 1, out_w = 1;
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t dilation_h = 1, dilation_w = 1;
  int64_t rows() const { return channels * kernel_h * kernel_w; }
  int64_t cols() const { return samples * out_h * out_w; }
};

// col (rows, cols), row-major: row (c * kernel_h + i) * kernel_w + j, column n * OH * OW + oh * OW
// + ow holds x[n][c][oh * stride_h - pad_h + i * dilation_h][ow * stride_w - pad_w + j *
// dilation_w], 0 in the padding. One thread per column element.
void im2col(const Im2colGeometry& g, const float* x, float* col, cudaStream_t stream);

// The adjoint: x[n][c][h][w] = the sum of the col entries im2col would read from there. One thread
// per input element gathers from the windows that cover it (no atomics, deterministic) and
// assigns (x need not be zeroed).
void col2im(const Im2colGeometry& g, const float* col, float* x, cudaStream_t stream);

}  // namespace stoke::cuda
