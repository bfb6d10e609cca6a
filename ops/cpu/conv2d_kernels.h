// Inner kernels of the CPU conv2d (ops/cpu/conv2d.cpp): im2col/col2im for one sample and group,
// and the direct depthwise kernels. Internal to ops/cpu.
#pragma once

#include <cstdint>

#include "ops/cpu/transpose.h"

namespace stoke::ops::cpu {

// The sizes of one convolution, all in elements.
struct ConvGeometry {
  int64_t N, C, H, W;  // input
  int64_t K, kh, kw;   // weight (K, C/groups, kh, kw)
  int64_t OH, OW;      // output
  int64_t sh, sw, ph, pw, dh, dw;
  int64_t groups;
  int64_t Cg() const { return C / groups; }
  int64_t Kg() const { return K / groups; }
  int64_t col_rows() const { return Cg() * kh * kw; }  // rows of the im2col matrix
  int64_t out_plane() const { return OH * OW; }
  int64_t in_plane() const { return H * W; }
};

// Whether a conv kernel family may run: not when its environment switch (STOKE_CONV_BLOCKED and
// the like) is "0", nor, for the AVX-512 ones, on a CPU without AVX-512F. Callers keep the answer
// in a function-local static (read once per process).
bool conv_kernel_enabled(const char* env_switch, bool needs_avx512);

// col (Cg*kh*kw, OH*OW) <- the patches of x (Cg, H, W), zeros where the window hangs over the
// padding. Row (c*kh + i)*kw + j holds input channel c shifted by kernel offset (i, j) and starts
// ld elements after the previous row (ld >= OH*OW: several samples' columns side by side form the
// batched column matrix of conv2d.cpp).
template <class T>
void im2col(const ConvGeometry& g, const T* x, T* col, int64_t ld);

// x (Cg, H, W) += the patches in col (rows ld apart) scattered back (the adjoint of im2col). x
// must be initialized (zeroed) by the caller. col is scratch: entries that fall into the padding
// may be overwritten (zeroed) on the way.
template <class T>
void col2im(const ConvGeometry& g, T* col, T* x, int64_t ld);

// Depthwise convolution (groups == C == K, weight (C, 1, kh, kw)) by direct loops, parallel over
// the N*C planes. bias may be null.
template <class T>
void depthwise_forward(const ConvGeometry& g, const T* x, const T* w, const T* bias, T* out);
template <class T>
void depthwise_backward_input(const ConvGeometry& g, const T* grad_out, const T* w, T* grad_in);
// Parallel over channels; each channel sums over the batch in order (deterministic).
template <class T>
void depthwise_backward_weight(const ConvGeometry& g, const T* grad_out, const T* x, T* grad_w);

// Direct convolution (ops/cpu/conv2d_direct.cpp): f32, stride 1 (forward and both gradients) or
// 2 (forward), dilation 1, one group, on CPUs with AVX-512 (checked at run time;
// STOKE_CONV_DIRECT=0 turns it off). No column matrix: the input is read in place through a
// zero-padded copy of each sample (split into phases for stride 2). Parallel over the batch. The
// _fits checks also say whether the shape is one where it beats im2col + GEMM.
bool direct_conv_forward_fits(const ConvGeometry& g);
bool direct_conv_backward_input_fits(const ConvGeometry& g);
bool direct_conv_backward_weight_fits(const ConvGeometry& g);
// out (N, K, OH, OW) = conv(x, w) + bias (bias may be null).
void direct_conv_forward(const ConvGeometry& g, const float* x, const float* w, const float* bias,
                         float* out);
// grad_in (N, C, H, W) = the input gradient, overwritten: a direct convolution of grad_out with
// the weight transposed and flipped.
void direct_conv_backward_input(const ConvGeometry& g, const float* grad_out, const float* w,
                                float* grad_in);
// grad_w (K, C, kh, kw) = the weight gradient summed over the batch, overwritten (deterministic).
void direct_conv_backward_weight(const ConvGeometry& g, const float* grad_out, const float* x,
                                 float* grad_w);

// Channel-blocked direct convolution (ops/cpu/conv2d_blocked.cpp): f32, stride 1 or 2, dilation
// 1, one group, on CPUs with AVX-512 (checked at run time; STOKE_CONV_BLOCKED=0 turns it off).
// Vectors run along the output channels (input channels for the input gradient) and input
// values are broadcast, so a stride costs no wasted multiplies. conv2d.cpp takes it for strided
// layers and for the forward and weight gradient of layers too thin for the direct kernels (fewer
// than 64 multiply-adds per output). Parallel over the batch (a batch of one runs on one thread).
bool blocked_conv_fits(const ConvGeometry& g);
// out (N, K, OH, OW) = conv(x, w) + bias (bias may be null).
void blocked_conv_forward(const ConvGeometry& g, const float* x, const float* w, const float* bias,
                          float* out);
// grad_in (N, C, H, W) = the input gradient, overwritten: per phase of the stride, a stride-1
// tile over grad_out with the taps of that phase.
void blocked_conv_backward_input(const ConvGeometry& g, const float* grad_out, const float* w,
                                 float* grad_in);
// grad_w (K, C, kh, kw) = the weight gradient summed over the batch, overwritten (deterministic
// for a given thread pool size).
void blocked_conv_backward_weight(const ConvGeometry& g, const float* grad_out, const float* x,
                                  float* grad_w);

// Row kernels for thin 3x3 convolutions (ops/cpu/conv2d_thin.cpp): f32, stride 1, dilation 1,
// one group, at most 7 input channels (the stems), on CPUs with AVX-512 (checked at run time;
// STOKE_CONV_THIN=0 turns them off). Tiles of 16 outputs of a row x up to 16 output channels,
// stored straight into the output; parallel over runs of output rows (a batch of one too).
bool thin_conv_fits(const ConvGeometry& g);
// out (N, K, OH, OW) = conv(x, w) + bias (bias may be null).
void thin_conv_forward(const ConvGeometry& g, const float* x, const float* w, const float* bias,
                       float* out);
// grad_w (K, C, 3, 3) = the weight gradient summed over the batch, overwritten (deterministic for
// a given thread pool size); parallel over the batch.
void thin_conv_backward_weight(const ConvGeometry& g, const float* grad_out, const float* x,
                               float* grad_w);

// Small output planes (ops/cpu/conv2d_positions.cpp): one GEMM per output position and kernel row
// over the batch, multiplying only the taps that meet the input there. For one group, dilation 1,
// planes of 2 to 16 positions where at most 80% of im2col's position-tap products are live (a 3x3
// kernel with padding 1 on a 3x3 plane: 60%); f32 and f64.
bool position_conv_fits(const ConvGeometry& g);
// out (N, K, OH, OW) = conv(x, w) + bias (bias may be null).
template <class T>
void position_conv_forward(const ConvGeometry& g, const T* x, const T* w, const T* bias, T* out);
// grad_in (N, C, H, W) and grad_w (K, C, kh, kw), either null when not wanted, overwritten.
template <class T>
void position_conv_backward(const ConvGeometry& g, const T* grad_out, const T* x, const T* w,
                            T* grad_in, T* grad_w);

// Winograd F(2x2, 3x3) (ops/cpu/conv2d_winograd.cpp): f32 3x3 convolutions with stride 1,
// dilation 1 and one group, 16 GEMMs over the transformed tiles; _fits also says whether the
// shape is one where it beats the direct kernels and im2col + GEMM (STOKE_CONV_WINOGRAD=0 turns it
// off).
bool winograd_conv_fits(const ConvGeometry& g);
// Whether the backward (winograd_conv_backward) beats the other kernels on g: from fewer channels
// than the forward.
bool winograd_conv_backward_fits(const ConvGeometry& g);
// out (N, K, OH, OW) = conv(x, w) + bias (bias may be null).
void winograd_conv_forward(const ConvGeometry& g, const float* x, const float* w, const float* bias,
                           float* out);
// grad_in (N, C, H, W) and grad_w (K, C, 3, 3), either null when not wanted, overwritten.
void winograd_conv_backward(const ConvGeometry& g, const float* grad_out, const float* x,
                            const float* w, float* grad_in, float* grad_w);

// dst (cols, rows) = src (rows, cols)ᵀ, src's rows ld_src apart, dst dense (the conv paths'
// layout changes: channels-last copies, transposed grad_out).
template <class T>
inline void transpose_into(const T* src, int64_t rows, int64_t cols, int64_t ld_src, T* dst) {
  transpose(src, rows, cols, ld_src, dst, rows);
}

// Sum of n contiguous values with independent partial sums (vectorizes without -ffast-math).
template <class T>
T sum_contiguous(const T* p, int64_t n);

}  // namespace stoke::ops::cpu
