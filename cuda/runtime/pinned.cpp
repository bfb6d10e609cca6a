#include "cuda/runtime/pinned.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "cuda/runtime/device.h"
#include "cuda/runtime/stream.h"

namespace stoke::cuda {
namespace {

struct HostBlock {
  void* ptr = nullptr;
  size_t size = 0;
  bool pinned = false;     // false: the no-device fallback (aligned_alloc)
  int pending_events = 0;  // stream uses still running after the block was freed
  std::vector<cudaStream_t> stream_uses;
};

size_t round_host_size(size_t nbytes) {
  // Powers of two (at least 4 KiB, a page) so that the varying last batch of an epoch reuses the
  // block of a full one.
  return std::bit_ceil(std::max<size_t>(nbytes, 4096));
}

}  // namespace

struct PinnedAllocator::Impl {
  mutable std::mutex mutex;
  std::map<void*, HostBlock*> live;  // ordered: block_containing() looks up by address
  std::multimap<size_t, HostBlock*> free_blocks;
  std::deque<std::pair<cudaEvent_t, HostBlock*>> pending;
  std::vector<HostBlock*> untracked;  // freed with a stream use no event could track: never reused
  PinnedStats stats;

  // A local allocator (tests, a user's own) gives back what it holds: cached blocks, blocks whose
  // stream uses are still pending (after waiting for them) and untracked ones. Blocks still live
  // belong to their Storage. The process-wide allocator is never destroyed.
  ~Impl() {
    try {
      process_events(/*wait=*/true);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "stoke: cuda::pinned_allocator: at destruction: %s\n", e.what());
    }
    std::vector<HostBlock*> owned;
    for (auto& [event, block] : pending) {
      (void)cudaEventDestroy(event);
      owned.push_back(block);
    }
    for (auto& [size, block] : free_blocks) owned.push_back(block);
    owned.insert(owned.end(), untracked.begin(), untracked.end());
    std::sort(owned.begin(), owned.end());
    owned.erase(std::unique(owned.begin(), owned.end()), owned.end());
    for (HostBlock* b : owned) {
      try {
        release(b);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "stoke: cuda::pinned_allocator: at destruction: %s\n", e.what());
      }
    }
  }

  void cache(HostBlock* b) {
    b->stream_uses.clear();
    free_blocks.emplace(b->size, b);
  }

  void process_events(bool wait) {
    while (!pending.empty()) {
      auto [event, block] = pending.front();
      if (!event_completed(event, wait)) break;
      (void)cudaEventDestroy(event);
      pending.pop_front();
      if (--block->pending_events == 0) cache(block);
    }
  }

  void release(HostBlock* b) {
    if (b->pinned) {
      STOKE_CUDA_CHECK(cudaFreeHost(b->ptr));
    } else {
      std::free(b->ptr);
    }
    ++stats.host_free_calls;
    stats.reserved_bytes -= b->size;
    delete b;
  }
};

PinnedAllocator::PinnedAllocator() : impl_(std::make_unique<Impl>()) {}

PinnedAllocator::~PinnedAllocator() = default;

void* PinnedAllocator::allocate(size_t nbytes) {
  if (nbytes == 0) return nullptr;
  const size_t size = round_host_size(nbytes);
  std::lock_guard<std::mutex> lock(impl_->mutex);
  Impl& m = *impl_;
  m.process_events(/*wait=*/false);
  HostBlock* b = nullptr;
  auto it = m.free_blocks.find(size);
  if (it != m.free_blocks.end()) {
    b = it->second;
    m.free_blocks.erase(it);
  } else {
    b = new HostBlock();
    b->size = size;
    if (is_available()) {
      const cudaError_t err = cudaHostAlloc(&b->ptr, size, cudaHostAllocDefault);
      if (err != cudaSuccess) {
        (void)cudaGetLastError();
        delete b;
        STOKE_FAIL("cuda::pinned_allocator", "cudaHostAlloc of ", size, " bytes (request ", nbytes,
                   ") failed: ", cudaGetErrorString(err), "; ", m.stats.reserved_bytes,
                   " bytes of pinned memory reserved in ", m.stats.live_blocks, " live blocks");
      }
      b->pinned = true;
    } else {
      b->ptr = std::aligned_alloc(kCpuAlignment, size);
      if (!b->ptr) {
        delete b;
        STOKE_FAIL("cuda::pinned_allocator", "out of host memory allocating ", size, " bytes");
      }
    }
    ++m.stats.host_alloc_calls;
    m.stats.reserved_bytes += size;
  }
  m.live.emplace(b->ptr, b);
  m.stats.allocated_bytes += size;
  m.stats.peak_allocated_bytes = std::max(m.stats.peak_allocated_bytes, m.stats.allocated_bytes);
  ++m.stats.live_blocks;
  return b->ptr;
}

void PinnedAllocator::deallocate(void* ptr, size_t /*nbytes: the block knows its size*/) {
  // Called from Storage's destructor: report and continue rather than terminate.
  try {
    free(ptr);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stoke: %s\n", e.what());
  }
}

void PinnedAllocator::free(void* ptr) {
  if (!ptr) return;
  std::lock_guard<std::mutex> lock(impl_->mutex);
  Impl& m = *impl_;
  auto it = m.live.find(ptr);
  STOKE_CHECK(it != m.live.end(), "cuda::pinned_allocator::free", "pointer ", ptr,
              " was not allocated by the pinned allocator (or was already freed)");
  HostBlock* b = it->second;
  m.live.erase(it);
  m.stats.allocated_bytes -= b->size;
  --m.stats.live_blocks;
  if (b->stream_uses.empty()) {
    m.cache(b);
    return;
  }
  for (cudaStream_t s : b->stream_uses) {
    cudaEvent_t event = record_pending_use(s, "cuda::pinned_allocator::free");
    ++b->pending_events;  // never completes without an event: the block is not reused
    if (event) {
      m.pending.emplace_back(event, b);
    } else {
      m.untracked.push_back(b);
    }
  }
}

void PinnedAllocator::record_stream(void* ptr, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  auto it = impl_->live.find(ptr);
  STOKE_CHECK(it != impl_->live.end(), "cuda::pinned_allocator::record_stream", "pointer ", ptr,
              " was not allocated by the pinned allocator (or was already freed)");
  HostBlock* b = it->second;
  if (!b->pinned) return;  // fallback memory: no device work can be using it
  auto& uses = b->stream_uses;
  if (std::find(uses.begin(), uses.end(), stream) == uses.end()) uses.push_back(stream);
}

std::shared_ptr<Storage> pinned_storage(size_t nbytes) {
  return std::make_shared<Storage>(nbytes, Device::cpu(), pinned_allocator());
}

void* PinnedAllocator::pinned_block_containing(const void* ptr) const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  auto it = impl_->live.upper_bound(const_cast<void*>(ptr));
  if (it == impl_->live.begin()) return nullptr;
  --it;
  const HostBlock* b = it->second;
  const auto* start = static_cast<const char*>(b->ptr);
  const auto* p = static_cast<const char*>(ptr);
  return b->pinned && p >= start && p < start + b->size ? b->ptr : nullptr;
}

bool PinnedAllocator::is_pinned(const void* ptr) const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  auto it = impl_->live.find(const_cast<void*>(ptr));
  return it != impl_->live.end() && it->second->pinned;
}

AllocatorStats PinnedAllocator::stats() const {
  const PinnedStats p = pinned_stats();
  AllocatorStats s;
  s.allocated_bytes = p.allocated_bytes;
  s.peak_allocated_bytes = p.peak_allocated_bytes;
  s.cached_bytes = p.reserved_bytes - p.allocated_bytes;
  s.system_allocs = p.host_alloc_calls;
  s.live_blocks = p.live_blocks;
  return s;
}

PinnedStats PinnedAllocator::pinned_stats() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->stats;
}

void PinnedAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  Impl& m = *impl_;
  m.process_events(/*wait=*/true);
  for (auto& [size, b] : m.free_blocks) m.release(b);
  m.free_blocks.clear();
}

PinnedAllocator& pinned_allocator() {
  static PinnedAllocator* a = new PinnedAllocator();
  return *a;
}

}  // namespace stoke::cuda
