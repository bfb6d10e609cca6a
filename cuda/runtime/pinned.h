// A caching allocator of pinned (page-locked) host memory, after PyTorch's CachingHostAllocator.
// Host-to-device copies from pinned memory run asynchronously at full PCIe/NVLink speed, so the
// data loader fills its batches here and the trainer uploads them with copy_async. cudaHostAlloc
// is slow (it maps the pages for the device), so blocks are kept and reused: sizes round up to a
// power of two, and a freed block that async copies still read (record_stream) is only reused
// once events recorded on those streams at free time have completed.
//
// Without a CUDA device the same calls return ordinary 64-byte aligned host memory, so a loader
// can always ask for pinned batches.
#pragma once

#include <cstddef>
#include <memory>

#include "core/allocator.h"
#include "core/storage.h"
#include "cuda/compat.h"

namespace stoke::cuda {

// Counters of the pinned allocator.
struct PinnedStats {
  size_t allocated_bytes = 0;  // in blocks handed out (rounded sizes)
  size_t peak_allocated_bytes = 0;
  size_t reserved_bytes = 0;  // held from cudaHostAlloc (handed out or cached)
  size_t live_blocks = 0;
  size_t host_alloc_calls = 0;  // cudaHostAlloc (or fallback allocation) calls
  size_t host_free_calls = 0;
};

class PinnedAllocator final : public DeviceAllocator {
 public:
  PinnedAllocator();
  ~PinnedAllocator() override;

  // nbytes == 0 gives nullptr. Page-locked when a CUDA device is present.
  void* allocate(size_t nbytes) override;
  void deallocate(void* ptr, size_t nbytes) override;
  // Returns a block from allocate(); nullptr is ignored; an unknown pointer throws.
  void free(void* ptr);
  // Work queued on `stream` (an async copy) reads or writes `ptr`: a freed block is not reused
  // before that work completes.
  void record_stream(void* ptr, cudaStream_t stream);
  // True for the start of a live block from this allocator that is really page-locked.
  bool is_pinned(const void* ptr) const;
  // The start of the live page-locked block that holds `ptr` (a view into a batch buffer), or
  // nullptr.
  void* pinned_block_containing(const void* ptr) const;

  AllocatorStats stats() const override;
  PinnedStats pinned_stats() const;
  // Waits for pending stream uses, then frees every cached block.
  void empty_cache() override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The process-wide instance (never destroyed).
PinnedAllocator& pinned_allocator();

// A CPU Storage of `nbytes` from the pinned allocator: what the data loader's batch allocator
// returns when batches go to a GPU (LoaderOptions::allocator = cuda::pinned_storage), so that
// Tensor::to(cuda, non_blocking = true) copies them asynchronously.
std::shared_ptr<Storage> pinned_storage(size_t nbytes);

}  // namespace stoke::cuda
