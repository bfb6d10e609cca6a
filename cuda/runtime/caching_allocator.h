// The caching device allocator (after PyTorch's CUDACachingAllocator). cudaMalloc and cudaFree
// synchronize the device and cost tens of microseconds, so freed blocks are kept and reused:
//
//  - Requests are rounded up to 512 B, so near sizes share blocks and every block split off a
//    segment keeps cudaMalloc's 256-byte alignment (enough for any vector load).
//  - Requests up to 1 MiB are carved out of 2 MiB segments (the small pool), so many small
//    tensors cost one cudaMalloc; larger requests come from the large pool: a 20 MiB segment for
//    requests under 10 MiB, else a segment of the request rounded up to 2 MiB (the GPU's large
//    page size, which cudaMalloc rounds to anyway).
//  - Best fit by size among free blocks of the same device and stream; a bigger block is split
//    (the rest stays cached) and neighbours in a segment merge again when both are free.
//  - A block belongs to the stream it was allocated on: freeing it makes it reusable at once for
//    work queued later on that stream. A block also used on other streams (record_stream) is only
//    reused after events recorded on those streams at free time have completed.
//  - empty_cache() returns whole free segments to the driver. When cudaMalloc fails the cache is
//    emptied and the call retried once; if that fails too a stoke::Error gives the request and
//    the statistics.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "core/allocator.h"
#include "cuda/compat.h"

namespace stoke::cuda {

// Per-device counters of the caching allocator.
struct CachingAllocatorStats {
  size_t allocated_bytes = 0;       // in blocks handed out (rounded sizes)
  size_t peak_allocated_bytes = 0;  // high-water mark of allocated_bytes
  size_t reserved_bytes = 0;        // in segments obtained from cudaMalloc
  size_t peak_reserved_bytes = 0;
  size_t live_blocks = 0;  // blocks handed out and not yet freed
  size_t cuda_malloc_calls = 0;
  size_t cuda_free_calls = 0;
  size_t alloc_retries = 0;  // cudaMalloc failures that emptied the cache and tried again
  size_t ooms = 0;           // requests that failed after the retry
};

// Size a request is served with: at least 512 B, rounded up to a multiple of 512 B.
size_t round_allocation_size(size_t nbytes);
// Size of the segment cudaMalloc'ed when no cached block fits a (rounded) request.
size_t segment_size_for(size_t rounded_bytes);
// "1.50 GiB", "512 B": human-readable byte counts for messages and tables.
std::string format_bytes(size_t bytes);

class CachingAllocator final : public DeviceAllocator {
 public:
  CachingAllocator();
  ~CachingAllocator() override;

  // On the calling thread's current device and current stream (core's interface).
  void* allocate(size_t nbytes) override;
  // On device.index (the current device when the index is negative).
  void* allocate_on(size_t nbytes, Device device) override;
  // On `device` for use on `stream`. nbytes == 0 gives nullptr.
  void* allocate(size_t nbytes, int device, cudaStream_t stream);
  void deallocate(void* ptr, size_t nbytes) override;
  // Returns a block from allocate(); nullptr is ignored; an unknown pointer throws.
  void free(void* ptr);
  // `ptr` (a block from allocate) is also used by work on `stream`: when freed, it is not reused
  // before that work completes.
  void record_stream(void* ptr, cudaStream_t stream);

  // Summed over devices, in core's terms (system_allocs = cudaMalloc calls).
  AllocatorStats stats() const override;
  CachingAllocatorStats device_stats(int device) const;
  // Starts the peaks over from the current values.
  void reset_peak_stats();
  // Waits for pending cross-stream uses, then cudaFrees every cached segment that is wholly free.
  void empty_cache() override;
  // One line: "allocated 1.0 MiB (peak 3.0 MiB), reserved 20.0 MiB (peak 20.0 MiB), ...".
  std::string summary(int device) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The process-wide instance (never destroyed: tensors in static storage may outlive main).
CachingAllocator& caching_allocator();
// Registers caching_allocator() as core's allocator for Device::Type::cuda.
void register_cuda_allocator();

}  // namespace stoke::cuda
