// Registration of the CUDA backend with core (allocator, copies) and ops (kernels), and the
// helpers every glue file shares. The copy and fill kernels are in ops/cuda/creation.cpp.
#include "ops/cuda/backend.h"

#include <cstring>

#include "core/device_copy.h"
#include "cuda/runtime/caching_allocator.h"
#include "cuda/runtime/copy.h"
#include "cuda/runtime/device.h"
#include "cuda/runtime/graph.h"
#include "cuda/runtime/pinned.h"
#include "cuda/runtime/profiler_timer.h"
#include "cuda/runtime/stream.h"
#include "ops/check.h"
#include "ops/creation.h"

namespace stoke::ops {
namespace cuda_glue {
namespace {

class CudaCopier final : public DeviceCopier {
 public:
  static constexpr size_t kMaxStagedUpload = size_t{1} << 20;
  void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes,
            bool non_blocking) override {
    using cuda::CopyKind;
    const CopyKind kind = dst_device.is_cuda() ? (src_device.is_cuda() ? CopyKind::device_to_device
                                                                       : CopyKind::host_to_device)
                                               : CopyKind::device_to_host;
    if (kind != CopyKind::device_to_device)
      cuda::refuse_host_copy_in_capture("a copy between the host and the device");
    // A host source is copied asynchronously from pinned memory, whose block the pinned
    // allocator then keeps from reuse until the copy is done (record_stream).
    void* block = kind == CopyKind::host_to_device && non_blocking
                      ? cuda::pinned_allocator().pinned_block_containing(src)
                      : nullptr;
    if (kind == CopyKind::host_to_device && non_blocking && !block && nbytes <= kMaxStagedUpload) {
      // A small pageable source (arange's values, a creation op's constants) is staged through a
      // cached pinned block, so that the copy stays asynchronous (no host wait in a step) and
      // `src` may be freed at once. Larger ones are copied synchronously, as CUDA would stage them.
      void* staging = cuda::pinned_allocator().allocate(nbytes);
      std::memcpy(staging, src, nbytes);
      cuda::copy_bytes_async(dst, staging, nbytes, kind, cuda::current_stream());
      cuda::pinned_allocator().record_stream(staging, cuda::current_stream());
      cuda::pinned_allocator().free(staging);
      return;
    }
    const bool async = non_blocking && (kind != CopyKind::host_to_device || block != nullptr);
    if (block) cuda::pinned_allocator().record_stream(block, cuda::current_stream());
    if (async)
      cuda::copy_bytes_async(dst, src, nbytes, kind, cuda::current_stream());
    else
      cuda::copy_bytes(dst, src, nbytes, kind);
  }
  void copy_strided(const Tensor& dst, const Tensor& src) override {
    backend_for("copy", dst.device()).copy_strided(dst, src);
  }
};

}  // namespace

void check_float_dtype(const char* op, const Tensor& t) {
  const DType d = t.dtype();
  STOKE_CHECK(d == DType::f32 || d == DType::f16 || d == DType::bf16, op,
              "expected an f32, f16 or bf16 tensor on cuda, got ", d);
}

cudaStream_t launch_stream() {
  return cuda::current_stream();
}

Tensor empty_on(const Shape& shape, DType dtype, Device device) {
  return empty(shape, {.dtype = dtype, .device = device});
}

Split split_at(const Tensor& t, int64_t dim) {
  Split s{1, t.size(dim), 1};
  for (int64_t i = 0; i < dim; ++i) s.outer *= t.size(i);
  for (int64_t i = dim + 1; i < t.dim(); ++i) s.inner *= t.size(i);
  return s;
}

void CudaBackend::use_device(const char* op, Device device) const {
  const int count = cuda::device_count();
  if (device.index >= 0 && device.index < count) {
    // One thread-local read when the device is already current (the common case).
    if (cuda::current_device() != device.index) cuda::set_device(device.index);
    return;
  }
  if (count == 0)
    STOKE_FAIL(op, "got a tensor on ", device, ", but there is no CUDA device (",
               cuda::device_unavailable_reason(), ")");
  STOKE_FAIL(op, "got a tensor on ", device, ", but there are only ", count, " CUDA devices");
}

bool CudaBackend::stream_capturing() const {
  return cuda::current_stream_capturing();
}

}  // namespace cuda_glue

namespace {

bool register_cuda_backend() {
  static cuda_glue::CudaCopier copier;
  static cuda_glue::CudaBackend kernels;
  cuda::register_cuda_allocator();
  cuda::register_profiler_timer();
  register_device_copier(Device::Type::cuda, &copier);
  register_backend(Device::Type::cuda, &kernels);
  return true;
}

}  // namespace

// Referenced from stoke/stoke.h so that the registration is linked into every program.
extern const bool cuda_backend_registered;
const bool cuda_backend_registered = register_cuda_backend();

}  // namespace stoke::ops
