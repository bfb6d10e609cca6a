// conv2d's backward from stoke's own kernels (no kernel of its own): per chunk of samples, dY is
// transposed to (K, samples * P) by a strided cast, then per group
//   dW_g (+)= dY_g col^T     with col = im2col(X)       (SGEMM NT, split-K)
//   dX      = col2im(col)    with col = W_g^T dY_g      (SGEMM TN)
// on f32 buffers. The one composition both ops/cuda/conv2d.cpp (the "stoke" conv path, and every
// conv backward in cuda/emu) and bench/ops_cuda_conv.cpp (which times it against cuDNN) run.
#pragma once

#include <cstdint>

#include "cuda/compat.h"
#include "cuda/kernels/conv2d_implicit_gemm.h"

namespace stoke::cuda {

// The column matrix floats one chunk holds by default (64 MiB): ops/cuda/conv2d.cpp's budget, which
// tests lower, and the benchmark's.
inline constexpr int64_t kConv2dBackwardColumnBudget = int64_t{16} << 20;

// Samples per chunk so that one group's column matrix holds at most `column_budget` floats (at
// least one sample, at most the batch).
int64_t conv2d_backward_chunk(const Conv2dGeometry& g, int64_t column_budget);

// Floats of workspace conv2d_backward needs for chunks of `chunk` samples: the column matrix
// (C / groups * kh * kw, chunk * P), the transposed dY (K, chunk * P) and the split-K partials of
// the weight gradient's SGEMM (sgemm.h's sgemm_split_k).
int64_t conv2d_backward_workspace_floats(const Conv2dGeometry& g, int64_t chunk);

// dx (batch, C, H, W) and/or dw (K, C / groups, kh, kw) of y = conv2d(x, w) from dy (batch, K, OH,
// OW), all contiguous f32; a null dx or dw is not computed (x is needed for dw, w for dx). dw is
// overwritten, dx assigned. Asynchronous on `stream`.
void conv2d_backward(const Conv2dGeometry& g, const float* dy, const float* x, const float* w,
                     float* dx, float* dw, float* workspace, int64_t chunk, cudaStream_t stream);

}  // namespace stoke::cuda
