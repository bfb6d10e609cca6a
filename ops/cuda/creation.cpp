// The creation family on cuda: fill and the strided copy with dtype conversion that core's Tensor
// methods (to, contiguous, copy_) reach through the device copier.
#include "cuda/kernels/creation.h"
#include "cuda/runtime/stream.h"
#include "ops/cuda/backend.h"

namespace stoke::ops::cuda_glue {

void CudaBackend::copy_strided(const Tensor& dst, const Tensor& src) {
  STOKE_CHECK(dst.shape() == src.shape(), "copy", "shapes differ: destination ", dst.shape(),
              ", source ", src.shape());
  if (dst.numel() == 0) return;
  const int ndim = static_cast<int>(dst.dim());
  const auto offsets =
      cuda::make_cast_offsets(dst.shape().data(), ndim, dst.strides().data(), src.strides().data());
  cuda::cast_strided(src.dtype(), src.data_ptr(), dst.dtype(), dst.data_ptr(), offsets, dst.numel(),
                     cuda::current_stream());
}

void CudaBackend::fill(const Tensor& t, double value) {
  if (t.numel() == 0) return;
  // One launch, the value a kernel argument: no pageable host-to-device copy per fill.
  const auto offsets =
      cuda::make_fill_offsets(t.shape().data(), static_cast<int>(t.dim()), t.strides().data());
  cuda::fill(t.dtype(), t.data_ptr(), offsets, t.numel(), value, cuda::current_stream());
}

}  // namespace stoke::ops::cuda_glue
