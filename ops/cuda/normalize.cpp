// ops::normalize_u8_nhwc (data::normalize) and crop_flip_normalize_u8_nhwc
// (data::crop_flip_normalize) on cuda: the u8 batch crossed the bus as bytes; one fused kernel
// turns it into (cropped, flipped) normalized NCHW floats on the device (cuda/kernels/normalize.h),
// or NHWC ones for a channels_last `out` (the entry point passes one of the two layouts).
#include "cuda/kernels/normalize.h"
#include "ops/cuda/backend.h"

namespace stoke::ops::cuda_glue {

void CudaBackend::normalize_u8_nhwc(const Tensor& images, const Tensor& out,
                                    const std::vector<float>& mean, const std::vector<float>& std) {
  cuda::normalize_u8_nhwc(typed<uint8_t>(images), out.dtype(), out.data_ptr(), images.size(0),
                          images.size(1), images.size(2), images.size(3), mean.data(), std.data(),
                          launch_stream(), !out.is_contiguous());
}

void CudaBackend::crop_flip_normalize_u8_nhwc(const Tensor& images, const Tensor& out,
                                              const Tensor& crops, const std::vector<float>& mean,
                                              const std::vector<float>& std) {
  cuda::crop_flip_normalize_u8_nhwc(typed<uint8_t>(images), typed<int32_t>(crops), out.dtype(),
                                    out.data_ptr(), images.size(0), images.size(1), images.size(2),
                                    images.size(3), out.size(2), out.size(3), mean.data(),
                                    std.data(), launch_stream(), !out.is_contiguous());
}

}  // namespace stoke::ops::cuda_glue
