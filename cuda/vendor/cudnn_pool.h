// cuDNN 2-D pooling (real builds only) on NCHW tensors in f32, f16 or bf16: max (NaN propagates,
// as in PyTorch) and average (with or without the padding in the divisor). cuDNN computes output
// sizes with floor, so ceil_mode pooling is not offered here. Max-pool backward among tied maxima:
// cuDNN does not document which element gets the gradient (stoke's own kernels, which ops use,
// give it to the first, like the CPU), so results match the CPU only on tie-free windows; in bf16
// random inputs tie in most 3x3 windows, which is why stoke-gpu-selftest feeds this distinct
// values.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "cuda/compat.h"

namespace stoke::cuda {

enum class PoolMode { max, avg_include_pad, avg_exclude_pad };

// Input (n, c, h, w) and the window.
struct PoolGeometry {
  int64_t n = 1, c = 1, h = 1, w = 1;
  std::array<int64_t, 2> kernel{2, 2};
  std::array<int64_t, 2> stride{2, 2};
  std::array<int64_t, 2> padding{0, 0};
  PoolMode mode = PoolMode::max;
  DType dtype = DType::f32;

  int64_t out_h() const;
  int64_t out_w() const;
  std::string str() const;
};

// y (n, c, out_h, out_w) = pool(x). Runs on `stream` on the current device.
void pool2d_forward(const PoolGeometry& g, const void* x, void* y, cudaStream_t stream);
// dx = gradient of the input given y, dy and x (cuDNN recomputes the argmax from x and y).
void pool2d_backward(const PoolGeometry& g, const void* y, const void* dy, const void* x, void* dx,
                     cudaStream_t stream);

}  // namespace stoke::cuda
