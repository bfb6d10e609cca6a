// Copies between host and device memory and between devices: raw bytes (sync, or async on a
// stream) and whole contiguous tensors (what Tensor::to(device, non_blocking) will call once core
// has the hook, see copy_tensor / to_device).
#pragma once

#include <cstddef>

#include "core/tensor.h"
#include "cuda/compat.h"

namespace stoke::cuda {

// Where a raw copy goes.
enum class CopyKind { host_to_device, device_to_host, device_to_device, host_to_host };

// Copies nbytes and waits for the copy (and, for device copies, the work queued before it on the
// calling thread's current stream) to finish. Device pointers may be on any device of the same
// kind when kind is device_to_device only if dst_device/src_device say so (see copy_peer).
void copy_bytes(void* dst, const void* src, size_t nbytes, CopyKind kind);
// Queues the copy on `stream` and returns. The host side must stay alive (and unmodified) until
// the stream reaches the copy; it is truly asynchronous only when the host memory is pinned.
void copy_bytes_async(void* dst, const void* src, size_t nbytes, CopyKind kind,
                      cudaStream_t stream);
// Device-to-device copy across devices, queued on `stream` (a stream of src_device).
void copy_peer_async(void* dst, int dst_device, const void* src, int src_device, size_t nbytes,
                     cudaStream_t stream);

// Copies src into dst: same shape and dtype, both contiguous, each on the cpu or a cuda device.
// The copy runs on the current stream of the cuda side (of the source's device for cuda-to-cuda,
// with the destination's current stream ordered before and after it by events). Blocking unless
// non_blocking; non_blocking copies from or to pinned host memory overlap with the host. The
// caching allocator is told about cross-stream uses, so freeing either tensor early is safe.
void copy_tensor(const Tensor& dst, const Tensor& src, bool non_blocking = false);

// A contiguous copy of `src` on `device` (src itself when it is already there and contiguous).
// A non-contiguous cpu source is made contiguous first; a non-contiguous cuda source is refused.
Tensor to_device(const Tensor& src, Device device, bool non_blocking = false);

}  // namespace stoke::cuda
