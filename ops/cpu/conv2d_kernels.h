// Inner kernels of the CPU conv2d (ops/cpu/conv2d.cpp): im2col/col2im for one sample and group,
// and the direct depthwise kernels. Internal to ops/cpu.
#pragma once

#include <cstdint>

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

// Sum of n contiguous values with independent partial sums (vectorizes without -ffast-math).
template <class T>
T sum_contiguous(const T* p, int64_t n);

}  // namespace stoke::ops::cpu
