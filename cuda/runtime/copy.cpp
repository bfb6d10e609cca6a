#include "cuda/runtime/copy.h"

#include <cstring>
#include <iterator>

#include "core/allocator.h"
#include "core/enum_name.h"
#include "core/error.h"
#include "core/profiler.h"
#include "core/sync_debug.h"
#include "cuda/runtime/caching_allocator.h"
#include "cuda/runtime/deferred_checks.h"
#include "cuda/runtime/device.h"
#include "cuda/runtime/graph.h"
#include "cuda/runtime/pinned.h"
#include "cuda/runtime/stream.h"

namespace stoke::cuda {
namespace {

cudaMemcpyKind to_cuda_kind(CopyKind kind) {
  static constexpr cudaMemcpyKind kinds[] = {cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost,
                                             cudaMemcpyDeviceToDevice, cudaMemcpyHostToHost};
  static_assert(std::size(kinds) == enum_count(CopyKind::host_to_host));
  return enum_table(kind, kinds, cudaMemcpyHostToHost);
}

// The tensor's storage is used by work on `stream`: tell the allocator that owns it, so that
// freeing the tensor before the stream gets there cannot hand the memory to someone else.
void record_use(const Tensor& t, cudaStream_t stream) {
  void* base = t.storage()->data();
  if (!base) return;
  if (t.device().is_cuda()) {
    if (&allocator_for(t.device()) == &caching_allocator()) {
      caching_allocator().record_stream(base, stream);
    }
  } else if (pinned_allocator().is_pinned(base)) {
    pinned_allocator().record_stream(base, stream);
  }
}

void check_operand(const Tensor& t, const char* which) {
  STOKE_CHECK(t.defined(), "cuda::copy_tensor", "expected a defined ", which, " tensor");
  STOKE_CHECK(t.is_contiguous(), "cuda::copy_tensor", "expected a contiguous ", which,
              " tensor, got shape ", t.shape(), " with strides ", t.strides(), " on ", t.device());
}

}  // namespace

void copy_bytes(void* dst, const void* src, size_t nbytes, CopyKind kind) {
  if (nbytes == 0) return;
  STOKE_NVTX_RANGE("stoke::cuda::copy_bytes");
  const profiler::Range profiler_range("copy_bytes", profiler::Category::copy);
  // On the current stream, then waited for: cudaMemcpy would run on the legacy default stream,
  // which does not wait for the current stream's kernels (it is created non-blocking), so a
  // read-back could see the data before they wrote it.
  cudaStream_t stream = current_stream();
  refuse_host_copy_in_capture("a blocking copy");
  STOKE_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, to_cuda_kind(kind), stream));
  STOKE_CUDA_CHECK(cudaStreamSynchronize(stream));
  note_device_sync(kind == CopyKind::device_to_host ? "a blocking device-to-host copy"
                                                    : "a blocking copy");
  // A synchronization point: the checks the device made since the last one are read now.
  check_deferred_errors();
}

void copy_bytes_async(void* dst, const void* src, size_t nbytes, CopyKind kind,
                      cudaStream_t stream) {
  if (nbytes == 0) return;
  STOKE_NVTX_RANGE("stoke::cuda::copy_bytes_async");
  const profiler::Range profiler_range("copy_bytes_async", profiler::Category::copy);
  STOKE_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, to_cuda_kind(kind), stream));
}

void copy_peer_async(void* dst, int dst_device, const void* src, int src_device, size_t nbytes,
                     cudaStream_t stream) {
  if (nbytes == 0) return;
  STOKE_NVTX_RANGE("stoke::cuda::copy_peer_async");
  const profiler::Range profiler_range("copy_peer_async", profiler::Category::copy);
#ifdef STOKE_CUDA_EMU
  (void)dst_device;
  (void)src_device;
  STOKE_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, stream));
#else
  if (dst_device == src_device) {
    STOKE_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, stream));
  } else {
    STOKE_CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_device, src, src_device, nbytes, stream));
  }
#endif
}

void copy_tensor(const Tensor& dst, const Tensor& src, bool non_blocking) {
  check_operand(dst, "destination");
  check_operand(src, "source");
  STOKE_CHECK(dst.shape() == src.shape(), "cuda::copy_tensor", "shapes differ: destination ",
              dst.shape(), ", source ", src.shape());
  STOKE_CHECK(dst.dtype() == src.dtype(), "cuda::copy_tensor", "dtypes differ: destination ",
              dst.dtype(), ", source ", src.dtype(), " (convert on one side first)");
  const size_t nbytes = static_cast<size_t>(src.numel()) * src.element_size();
  if (nbytes == 0) return;
  const Device d = dst.device(), s = src.device();
  if (d.is_cpu() && s.is_cpu()) {
    std::memcpy(dst.data_ptr(), src.data_ptr(), nbytes);
    return;
  }
  STOKE_NVTX_RANGE("stoke::cuda::copy_tensor");
  const profiler::Range profiler_range("copy_tensor", profiler::Category::copy);
  // The device whose current stream runs the copy.
  const int device = s.is_cuda() ? s.index : d.index;
  DeviceGuard guard(device);
  cudaStream_t stream = current_stream(device);
  if (d.is_cuda() && s.is_cuda()) {
    cudaStream_t dst_stream = current_stream(d.index);
    const bool cross = d.index != s.index || dst_stream != stream;
    Event before(EventOptions{.timing = false});
    if (cross) {
      // The copy must not overtake work already queued on the destination's stream.
      DeviceGuard on_dst(d.index);
      Event dst_ready(EventOptions{.timing = false});
      dst_ready.record(dst_stream);
      STOKE_CUDA_CHECK(cudaStreamWaitEvent(stream, dst_ready.handle(), 0));
    }
    copy_peer_async(dst.data_ptr(), d.index, src.data_ptr(), s.index, nbytes, stream);
    if (cross) {
      before.record(stream);  // later work on the destination's stream sees the copied data
      STOKE_CUDA_CHECK(cudaStreamWaitEvent(dst_stream, before.handle(), 0));
    }
  } else {
    const CopyKind kind = d.is_cuda() ? CopyKind::host_to_device : CopyKind::device_to_host;
    copy_bytes_async(dst.data_ptr(), src.data_ptr(), nbytes, kind, stream);
  }
  if (non_blocking) {
    record_use(dst, stream);
    record_use(src, stream);
  } else {
    STOKE_CUDA_CHECK(cudaStreamSynchronize(stream));
    note_device_sync(d.is_cpu() ? "a blocking device-to-host tensor copy"
                                : "a blocking tensor copy (non_blocking = false)");
  }
}

Tensor to_device(const Tensor& src, Device device, bool non_blocking) {
  STOKE_CHECK(src.defined(), "cuda::to_device", "expected a defined tensor");
  if (src.device() == device && src.is_contiguous()) return src;
  Tensor s = src;
  if (!s.is_contiguous()) {
    STOKE_CHECK(s.device().is_cpu(), "cuda::to_device", "expected a contiguous tensor on ",
                s.device(), ", got shape ", s.shape(), " with strides ", s.strides(),
                " (strided device copies are not supported)");
    s = s.contiguous();
  }
  if (device.is_cpu() && s.device().is_cpu()) return s;
  Tensor out;
  {
    // core's allocator interface allocates on the current device.
    DeviceGuard guard(device.is_cuda() ? device.index : -1);
    out = empty(s.shape(), {.dtype = s.dtype(), .device = device});
  }
  copy_tensor(out, s, non_blocking);
  return out;
}

}  // namespace stoke::cuda
