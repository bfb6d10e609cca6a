// cuDNN 2-D convolution (real builds only): forward, backward-data and backward-filter on NCHW
// (or, with ConvGeometry::channels_last, NHWC) tensors in f32, f16 or bf16 (f32 accumulation). The
// algorithm is chosen once per (direction, shape, dtype, math, device) — by cuDNN's heuristics
// (cudnnGet*_v7) or, with set_cudnn_benchmark(true), by timing every algorithm (cudnnFind*Ex) like
// torch.backends.cudnn.benchmark — and cached; workspaces come from the caching allocator. Every
// usable algorithm is kept in rank order: when one fails to launch (a status, or its workspace
// cannot be allocated) the next is tried, and the one that ran is used from then on
// (first_that_runs.h); only when all fail is it an error, naming each one's reason.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "core/tensor.h"
#include "cuda/compat.h"

namespace stoke::cuda {

// One convolution: input (n, c, h, w), weight (k, c / groups, r, s), PyTorch's semantics.
struct ConvGeometry {
  int64_t n = 1, c = 1, h = 1, w = 1;  // input
  int64_t k = 1, r = 1, s = 1;         // output channels, kernel height and width
  std::array<int64_t, 2> stride{1, 1};
  std::array<int64_t, 2> padding{0, 0};
  std::array<int64_t, 2> dilation{1, 1};
  int64_t groups = 1;
  DType dtype = DType::f32;
  bool allow_tf32 = false;  // f32 only: let cuDNN use TF32 tensor cores
  // x, y and dy in NHWC (channels_last) and the weight and dw in KRSC (k, r, s, c / groups), the
  // layout of cuDNN's fastest f16/bf16 tensor-core kernels; NCHW and KCRS when false.
  bool channels_last = false;

  int64_t out_h() const;
  int64_t out_w() const;
  // "n=128 c=64 h=32 w=32 k=64 r=3 s=3 stride=1x1 pad=1x1 dil=1x1 g=1 f32".
  std::string str() const;
};

// Timing every algorithm once per shape (true) or taking cuDNN's heuristic choice (false,
// default). Changing it does not evict algorithms already cached.
void set_cudnn_benchmark(bool on);
bool cudnn_benchmark();

// The algorithm chosen for a direction/shape ("fwd IMPLICIT_PRECOMP_GEMM, 0 B workspace"),
// choosing it if needed; for tables and logs.
std::string conv2d_algorithm(const ConvGeometry& g, int direction /*0 fwd, 1 data, 2 filter*/);

// y (n, k, out_h, out_w) = conv(x, w). Runs on `stream` on the current device.
void conv2d_forward(const ConvGeometry& g, const void* x, const void* w, void* y,
                    cudaStream_t stream);
// dx (n, c, h, w) = gradient of the input given dy.
void conv2d_backward_data(const ConvGeometry& g, const void* dy, const void* w, void* dx,
                          cudaStream_t stream);
// dw (k, c / groups, r, s) = gradient of the weight given x and dy.
void conv2d_backward_filter(const ConvGeometry& g, const void* x, const void* dy, void* dw,
                            cudaStream_t stream);

// Tensor forms (contiguous cuda tensors of one dtype; a new output on the current stream).
Tensor cudnn_conv2d(const Tensor& input, const Tensor& weight, std::array<int64_t, 2> stride,
                    std::array<int64_t, 2> padding, std::array<int64_t, 2> dilation = {1, 1},
                    int64_t groups = 1);

}  // namespace stoke::cuda
