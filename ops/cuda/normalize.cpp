// ops::normalize_u8_nhwc (data::normalize) on cuda: the u8 batch crossed the bus as bytes; one
// fused kernel turns it into normalized NCHW floats on the device (cuda/kernels/normalize.h).
#include "cuda/kernels/normalize.h"
#include "ops/cuda/backend.h"

namespace stoke::ops::cuda_glue {

void CudaBackend::normalize_u8_nhwc(const Tensor& images, const Tensor& out,
                                    const std::vector<float>& mean, const std::vector<float>& std) {
  cuda::normalize_u8_nhwc(typed<uint8_t>(images), out.dtype(), out.data_ptr(), images.size(0),
                          images.size(1), images.size(2), images.size(3), mean.data(), std.data(),
                          launch_stream());
}

}  // namespace stoke::ops::cuda_glue
