// conv2d_backward: the composition described in conv2d_backward.h. It has no kernel of its own: it
// launches the strided cast, im2col/col2im and SGEMM kernels, each tested on its own in cuda/emu.
#include "cuda/kernels/conv2d_backward.h"

#include <algorithm>

#include "core/error.h"
#include "cuda/kernels/conv2d_im2col.h"
#include "cuda/kernels/creation.h"
#include "cuda/kernels/sgemm.h"

namespace stoke::cuda {
namespace {

int64_t column_rows(const Conv2dGeometry& g) {
  return g.channels / g.groups * g.kernel_h * g.kernel_w;
}

int64_t output_pixels(const Conv2dGeometry& g) {
  const auto out = conv2d_implicit_gemm_output_size(g);
  return out[0] * out[1];
}

}  // namespace

int64_t conv2d_backward_chunk(const Conv2dGeometry& g, int64_t column_budget) {
  STOKE_CHECK(column_budget > 0, "cuda::conv2d_backward_chunk",
              "expected a positive column budget, got ", column_budget);
  const int64_t per_sample = std::max<int64_t>(1, column_rows(g) * output_pixels(g));
  return std::clamp<int64_t>(column_budget / per_sample, 1, std::max<int64_t>(1, g.batch));
}

namespace {

// The k-slices of dW_g's split-K SGEMM for a chunk of `samples` (sgemm.h): dW is (K / groups,
// C / groups * kh * kw), often a single tile, while k = samples * output pixels runs to 100,000s.
int64_t weight_grad_slices(const Conv2dGeometry& g, int64_t samples) {
  return sgemm_split_k_slices(g.out_channels / g.groups, column_rows(g),
                              samples * output_pixels(g));
}

}  // namespace

int64_t conv2d_backward_workspace_floats(const Conv2dGeometry& g, int64_t chunk) {
  return (column_rows(g) + g.out_channels) * chunk * output_pixels(g) +
         sgemm_split_k_workspace_floats(g.out_channels / g.groups, column_rows(g),
                                        weight_grad_slices(g, chunk));
}

void conv2d_backward(const Conv2dGeometry& g, const float* dy, const float* x, const float* w,
                     float* dx, float* dw, float* workspace, int64_t chunk, cudaStream_t s) {
  STOKE_NVTX_RANGE("stoke::cuda::conv2d_backward");
  const auto out = conv2d_implicit_gemm_output_size(g);  // checks the geometry
  STOKE_CHECK(chunk >= 1, "cuda::conv2d_backward", "expected a chunk of at least 1 sample, got ",
              chunk);
  const int64_t R = column_rows(g), P = out[0] * out[1], K = g.out_channels;
  const int64_t Cg = g.channels / g.groups, Kg = K / g.groups;
  const int64_t plane = g.height * g.width, ld = chunk * P;
  // The column matrix of a chunk of nb samples is (R, nb * P) with row stride nb * P (im2col and
  // col2im write and read it packed), so the GEMMs take cols = nb * P as its leading dimension:
  // the last chunk may be shorter than the buffer's rows.
  float* col = workspace;
  // dY of a chunk with the channels first, (K, nb * P) in a (K, chunk * P) buffer: the GEMMs'
  // operand layout.
  float* dy_t = workspace + R * ld;
  // The split-K partials of dW_g, after both (sgemm_split_k's workspace; unused for one slice).
  float* partials = dy_t + K * ld;
  Im2colGeometry cg;
  cg.channels = Cg;
  cg.sample_stride = g.channels * plane;
  cg.height = g.height;
  cg.width = g.width;
  cg.kernel_h = g.kernel_h;
  cg.kernel_w = g.kernel_w;
  cg.out_h = out[0];
  cg.out_w = out[1];
  cg.stride_h = g.stride_h;
  cg.stride_w = g.stride_w;
  cg.pad_h = g.pad_h;
  cg.pad_w = g.pad_w;
  cg.dilation_h = g.dilation_h;
  cg.dilation_w = g.dilation_w;
  for (int64_t n0 = 0; n0 < g.batch; n0 += chunk) {
    const int64_t nb = std::min(chunk, g.batch - n0), cols = nb * P;
    // dY (nb, K, P) -> (K, nb, P) inside the (K, chunk * P) buffer.
    const int64_t shape[3] = {K, nb, P};
    const int64_t dst_strides[3] = {ld, P, 1}, src_strides[3] = {P, K * P, 1};
    cast_strided(DType::f32, dy + n0 * K * P, DType::f32, dy_t,
                 make_cast_offsets(shape, 3, dst_strides, src_strides), K * nb * P, s);
    cg.samples = nb;
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      const int64_t first = (n0 * g.channels + grp * Cg) * plane;  // this group's first input
      const float* dy_g = dy_t + grp * Kg * ld;
      if (dw) {
        // dW_g (Kg, R) += dY_g (Kg, cols) * col^T (cols, R); the first chunk overwrites.
        im2col(cg, x + first, col, s);
        sgemm_split_k(false, true, Kg, R, cols, 1.f, dy_g, ld, col, cols, n0 == 0 ? 0.f : 1.f,
                      dw + grp * Kg * R, R, weight_grad_slices(g, nb), partials, s);
      }
      if (dx) {
        // col (R, cols) = W_g^T (R, Kg) * dY_g (Kg, cols), scattered back by col2im.
        sgemm(true, false, R, cols, Kg, 1.f, w + grp * Kg * R, R, dy_g, ld, 0.f, col, cols, s);
        col2im(cg, col, dx + first, s);
      }
    }
  }
}

}  // namespace stoke::cuda
