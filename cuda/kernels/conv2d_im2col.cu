// im2col / col2im kernels (see im2col.h). Both are index maps: im2col's threads walk the column
// matrix in row-major order (adjacent threads write adjacent columns: coalesced stores, reads of
// one input row at a stride); col2im's threads walk the input, each summing the at most
// ceil(kh / sh) * ceil(kw / sw) column entries that came from its element.
#include "cuda/kernels/conv2d_im2col.h"

#include "cuda/kernels/elementwise_util.h"

namespace stoke::cuda {
namespace {

// Kernel parameters as 32-bit ints where they are sizes of one image; int64 for totals.
struct Params {
  int64_t rows, cols, sample_stride;
  int C, H, W, kh, kw, OH, OW, sh, sw, ph, pw, dh, dw;
};

Params params_of(const Im2colGeometry& g) {
  return {g.rows(),
          g.cols(),
          g.sample_stride,
          static_cast<int>(g.channels),
          static_cast<int>(g.height),
          static_cast<int>(g.width),
          static_cast<int>(g.kernel_h),
          static_cast<int>(g.kernel_w),
          static_cast<int>(g.out_h),
          static_cast<int>(g.out_w),
          static_cast<int>(g.stride_h),
          static_cast<int>(g.stride_w),
          static_cast<int>(g.pad_h),
          static_cast<int>(g.pad_w),
          static_cast<int>(g.dilation_h),
          static_cast<int>(g.dilation_w)};
}

__global__ void __launch_bounds__(256)
    im2col_kernel(Params p, const float* __restrict__ x, float* __restrict__ col) {
  const int64_t total = p.rows * p.cols;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t plane = static_cast<int64_t>(p.OH) * p.OW;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += step) {
    const int64_t row = e / p.cols, column = e % p.cols;
    const int j = static_cast<int>(row % p.kw);
    const int i = static_cast<int>((row / p.kw) % p.kh);
    const int c = static_cast<int>(row / (static_cast<int64_t>(p.kw) * p.kh));
    const int64_t n = column / plane;
    const int o = static_cast<int>(column % plane);
    const int h = (o / p.OW) * p.sh - p.ph + i * p.dh;
    const int w = (o % p.OW) * p.sw - p.pw + j * p.dw;
    const bool inside = h >= 0 && h < p.H && w >= 0 && w < p.W;
    col[e] = inside ? x[n * p.sample_stride + (static_cast<int64_t>(c) * p.H + h) * p.W + w] : 0.f;
  }
}

// First output index whose window (offset `k` of the kernel) reaches input position `pos`, and
// whether one exists: out * stride - pad + k * dil == pos.
__device__ inline bool window_of(int pos, int k, int stride, int pad, int dil, int out_size,
                                 int& out) {
  const int t = pos + pad - k * dil;
  if (t < 0 || t % stride != 0) return false;
  out = t / stride;
  return out < out_size;
}

__global__ void __launch_bounds__(256)
    col2im_kernel(Params p, const float* __restrict__ col, float* __restrict__ x) {
  const int64_t image = static_cast<int64_t>(p.C) * p.H * p.W;
  const int64_t samples = p.cols / (static_cast<int64_t>(p.OH) * p.OW);
  const int64_t total = samples * image;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t plane = static_cast<int64_t>(p.OH) * p.OW;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += step) {
    const int64_t n = e / image;
    const int64_t r = e % image;
    const int w = static_cast<int>(r % p.W);
    const int h = static_cast<int>((r / p.W) % p.H);
    const int c = static_cast<int>(r / (static_cast<int64_t>(p.W) * p.H));
    float acc = 0.f;
    for (int i = 0; i < p.kh; ++i) {
      int oh;
      if (!window_of(h, i, p.sh, p.ph, p.dh, p.OH, oh)) continue;
      for (int j = 0; j < p.kw; ++j) {
        int ow;
        if (!window_of(w, j, p.sw, p.pw, p.dw, p.OW, ow)) continue;
        const int64_t row = (static_cast<int64_t>(c) * p.kh + i) * p.kw + j;
        acc += col[row * p.cols + n * plane + static_cast<int64_t>(oh) * p.OW + ow];
      }
    }
    x[n * p.sample_stride + r] = acc;
  }
}

void check_geometry(const char* op, const Im2colGeometry& g) {
  STOKE_CHECK(g.samples >= 0 && g.channels >= 1 && g.height >= 1 && g.width >= 1 &&
                  g.kernel_h >= 1 && g.kernel_w >= 1 && g.out_h >= 1 && g.out_w >= 1 &&
                  g.stride_h >= 1 && g.stride_w >= 1 && g.pad_h >= 0 && g.pad_w >= 0 &&
                  g.dilation_h >= 1 && g.dilation_w >= 1,
              op, "invalid geometry: samples ", g.samples, ", channels ", g.channels, ", input ",
              g.height, "x", g.width, ", kernel ", g.kernel_h, "x", g.kernel_w, ", output ",
              g.out_h, "x", g.out_w, ", stride ", g.stride_h, "x", g.stride_w, ", padding ",
              g.pad_h, "x", g.pad_w, ", dilation ", g.dilation_h, "x", g.dilation_w);
  STOKE_CHECK(g.sample_stride >= g.channels * g.height * g.width || g.samples <= 1, op,
              "expected sample_stride >= channels * height * width, got ", g.sample_stride);
}

}  // namespace

void im2col(const Im2colGeometry& g, const float* x, float* col, cudaStream_t stream) {
  STOKE_NVTX_RANGE("stoke::cuda::im2col");
  check_geometry("cuda::im2col", g);
  const int64_t total = g.rows() * g.cols();
  if (total == 0) return;
  STOKE_LAUNCH(im2col_kernel, ew::grid_for(total, 256), 256, 0, stream)(params_of(g), x, col);
  STOKE_CUDA_CHECK(cudaGetLastError());
}

void col2im(const Im2colGeometry& g, const float* col, float* x, cudaStream_t stream) {
  STOKE_NVTX_RANGE("stoke::cuda::col2im");
  check_geometry("cuda::col2im", g);
  const int64_t total = g.samples * g.channels * g.height * g.width;
  if (total == 0) return;
  STOKE_LAUNCH(col2im_kernel, ew::grid_for(total, 256), 256, 0, stream)(params_of(g), col, x);
  STOKE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace stoke::cuda
