#include "cuda/runtime/caching_allocator.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <mutex>
#include <set>
#include <sstream>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "cuda/runtime/device.h"
#include "cuda/runtime/stream.h"

namespace stoke::cuda {
namespace {

constexpr size_t kMinBlockSize = 512;                // rounding granularity and alignment
constexpr size_t kSmallSize = size_t{1} << 20;       // requests up to this use the small pool
constexpr size_t kSmallBuffer = size_t{2} << 20;     // segment size of the small pool
constexpr size_t kMinLargeAlloc = size_t{10} << 20;  // requests below this share a ...
constexpr size_t kLargeBuffer = size_t{20} << 20;    // ... 20 MiB segment
constexpr size_t kRoundLarge = size_t{2} << 20;      // larger segments round to 2 MiB

struct Block {
  int device = 0;
  cudaStream_t stream = nullptr;
  size_t size = 0;
  char* ptr = nullptr;
  bool small = false;
  bool allocated = false;  // handed out, or freed but waiting for cross-stream events
  int pending_events = 0;  // events still to complete before the block is really free
  Block* prev = nullptr;   // neighbours inside the same segment
  Block* next = nullptr;
  std::vector<cudaStream_t> stream_uses;  // other streams the block was used on
};

// Free blocks ordered by (stream, size, address): lower_bound gives the best fit on a stream.
struct BlockLess {
  bool operator()(const Block* a, const Block* b) const {
    const auto sa = reinterpret_cast<uintptr_t>(a->stream);
    const auto sb = reinterpret_cast<uintptr_t>(b->stream);
    return std::tie(sa, a->size, a->ptr) < std::tie(sb, b->size, b->ptr);
  }
};
using Pool = std::set<Block*, BlockLess>;

struct DeviceState {
  Pool small_pool;
  Pool large_pool;
  std::unordered_map<void*, Block*> active;
  std::deque<std::pair<cudaEvent_t, Block*>> pending;  // cross-stream uses not yet complete
  std::vector<Block*> untracked;  // freed with a stream use no event could track: never reused
  CachingAllocatorStats stats;
};

}  // namespace

size_t round_allocation_size(size_t nbytes) {
  if (nbytes < kMinBlockSize) return kMinBlockSize;
  return (nbytes + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
}

size_t segment_size_for(size_t rounded_bytes) {
  if (rounded_bytes <= kSmallSize) return kSmallBuffer;
  if (rounded_bytes < kMinLargeAlloc) return kLargeBuffer;
  return (rounded_bytes + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

std::string format_bytes(size_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int unit = 0;
  while (v >= 1024.0 && unit < 4) {
    v /= 1024.0;
    ++unit;
  }
  std::ostringstream os;
  if (unit == 0) {
    os << bytes << " B";
  } else {
    os.setf(std::ios::fixed);
    os.precision(2);
    os << v << ' ' << kUnits[unit];
  }
  return os.str();
}

struct CachingAllocator::Impl {
  // One lock for all devices: allocation is not a hot path compared with the kernels it feeds,
  // and cudaMalloc (which happens under it) serializes anyway.
  mutable std::mutex mutex;
  std::vector<std::unique_ptr<DeviceState>> devices;

  // A local allocator (tests, a user's own) gives back what it holds: after waiting for pending
  // stream uses, every block not handed out is freed and its wholly free segments cudaFree'd.
  // Blocks still live belong to their Storage. The process-wide allocator is never destroyed.
  ~Impl() {
    for (size_t d = 0; d < devices.size(); ++d) {
      if (!devices[d]) continue;
      DeviceState& s = *devices[d];
      try {
        process_events(s, /*wait=*/true);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "stoke: cuda::caching_allocator: at destruction: %s\n", e.what());
      }
      std::vector<Block*> owned;
      for (auto& [event, block] : s.pending) {
        (void)cudaEventDestroy(event);
        owned.push_back(block);
      }
      s.pending.clear();
      owned.insert(owned.end(), s.untracked.begin(), s.untracked.end());
      s.untracked.clear();
      std::sort(owned.begin(), owned.end());
      owned.erase(std::unique(owned.begin(), owned.end()), owned.end());
      for (Block* b : owned) {
        b->pending_events = 0;
        free_block(s, b);
      }
      try {
        release_cached(s, static_cast<int>(d));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "stoke: cuda::caching_allocator: at destruction: %s\n", e.what());
      }
    }
  }

  DeviceState& state(int device) {
    STOKE_CHECK(device >= 0, "cuda::caching_allocator", "expected a device index >= 0, got ",
                device);
    if (static_cast<size_t>(device) >= devices.size()) devices.resize(device + 1);
    auto& s = devices[static_cast<size_t>(device)];
    if (!s) s = std::make_unique<DeviceState>();
    return *s;
  }

  static Pool& pool_of(DeviceState& s, const Block* b) {
    return b->small ? s.small_pool : s.large_pool;
  }

  // Frees a block for reuse: merges it with free neighbours of its segment and caches it.
  static void free_block(DeviceState& s, Block* b) {
    b->allocated = false;
    b->stream_uses.clear();
    Pool& pool = pool_of(s, b);
    for (Block* n : {b->prev, b->next}) {
      if (!n || n->allocated) continue;
      pool.erase(n);
      if (n == b->prev) {
        b->ptr = n->ptr;
        b->prev = n->prev;
        if (b->prev) b->prev->next = b;
      } else {
        b->next = n->next;
        if (b->next) b->next->prev = b;
      }
      b->size += n->size;
      delete n;
    }
    pool.insert(b);
  }

  // Releases the blocks whose cross-stream events have completed (all of them when `wait`).
  static void process_events(DeviceState& s, bool wait) {
    while (!s.pending.empty()) {
      auto [event, block] = s.pending.front();
      // Events complete in roughly queue order; look again at the next call.
      if (!event_completed(event, wait)) break;
      (void)cudaEventDestroy(event);
      s.pending.pop_front();
      if (--block->pending_events == 0) free_block(s, block);
    }
  }

  // cudaFrees every cached segment that is wholly free (a block without neighbours).
  static void release_cached(DeviceState& s, int device) {
    DeviceGuard guard(device);
    for (Pool* pool : {&s.small_pool, &s.large_pool}) {
      for (auto it = pool->begin(); it != pool->end();) {
        Block* b = *it;
        if (b->prev || b->next) {
          ++it;
          continue;
        }
        STOKE_CUDA_CHECK(cudaFree(b->ptr));
        ++s.stats.cuda_free_calls;
        s.stats.reserved_bytes -= b->size;
        it = pool->erase(it);
        delete b;
      }
    }
  }

  static std::string summary(const CachingAllocatorStats& st) {
    std::ostringstream os;
    os << "allocated " << format_bytes(st.allocated_bytes) << " (peak "
       << format_bytes(st.peak_allocated_bytes) << ") in " << st.live_blocks << " blocks, reserved "
       << format_bytes(st.reserved_bytes) << " (peak " << format_bytes(st.peak_reserved_bytes)
       << "), cudaMalloc calls " << st.cuda_malloc_calls << ", cudaFree calls "
       << st.cuda_free_calls;
    return os.str();
  }

  [[noreturn]] void out_of_memory(DeviceState& s, int device, size_t nbytes, size_t segment,
                                  cudaError_t err) {
    ++s.stats.ooms;
    size_t free_bytes = 0, total_bytes = 0;
    std::string device_memory;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
      device_memory = ::stoke::detail::str_cat("; the device has ", format_bytes(free_bytes),
                                               " free of ", format_bytes(total_bytes));
    }
    (void)cudaGetLastError();
    STOKE_FAIL("cuda::caching_allocator", "out of memory: cannot allocate ", format_bytes(nbytes),
               " (", nbytes, " bytes) on cuda:", device, ": cudaMalloc of a ",
               format_bytes(segment), " segment failed (", cudaGetErrorString(err),
               ") after freeing the cache and retrying; ", summary(s.stats), device_memory);
  }

  void* allocate(size_t nbytes, int device, cudaStream_t stream) {
    if (nbytes == 0) return nullptr;
    const int count = device_count();
    STOKE_CHECK(device >= 0 && device < count, "cuda::caching_allocator", "cannot allocate ",
                nbytes, " bytes on cuda:", device, ": expected a device index in [0, ", count, ")",
                count == 0 ? " (no CUDA device: " : "",
                count == 0 ? device_unavailable_reason() : std::string(), count == 0 ? ")" : "");
    std::lock_guard<std::mutex> lock(mutex);
    DeviceState& s = state(device);
    process_events(s, /*wait=*/false);
    const size_t size = round_allocation_size(nbytes);
    const bool small = size <= kSmallSize;
    Pool& pool = small ? s.small_pool : s.large_pool;

    Block key;
    key.stream = stream;
    key.size = size;
    Block* block = nullptr;
    auto it = pool.lower_bound(&key);
    if (it != pool.end() && (*it)->stream == stream) {
      block = *it;
      pool.erase(it);
    } else {
      block = new_segment(s, device, stream, size, small, nbytes);
    }

    // Split off the rest when it is worth keeping as a block of its own: any remainder in the
    // small pool; in the large pool only one that is itself a large request, so that small
    // requests never fragment large segments.
    const size_t rest = block->size - size;
    if (small ? rest >= kMinBlockSize : rest > kSmallSize) {
      Block* r = new Block(*block);
      r->ptr = block->ptr + size;
      r->size = rest;
      r->prev = block;
      r->next = block->next;
      if (r->next) r->next->prev = r;
      block->next = r;
      block->size = size;
      pool.insert(r);
    }
    block->allocated = true;
    s.active.emplace(block->ptr, block);
    s.stats.allocated_bytes += block->size;
    s.stats.peak_allocated_bytes = std::max(s.stats.peak_allocated_bytes, s.stats.allocated_bytes);
    ++s.stats.live_blocks;
    if (alloc_poison()) {
      // Ordered on the block's stream, so it lands before any kernel that uses the block.
      DeviceGuard guard(device);
      STOKE_CUDA_CHECK(cudaMemsetAsync(block->ptr, kAllocPoisonByte, block->size, stream));
    }
    return block->ptr;
  }

  Block* new_segment(DeviceState& s, int device, cudaStream_t stream, size_t size, bool small,
                     size_t nbytes) {
    const size_t segment = segment_size_for(size);
    DeviceGuard guard(device);
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, segment);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // cudaMalloc's failure must not surface in a later check
      ++s.stats.alloc_retries;
      process_events(s, /*wait=*/true);
      release_cached(s, device);
      err = cudaMalloc(&p, segment);
    }
    if (err == cudaErrorMemoryAllocation) out_of_memory(s, device, nbytes, segment, err);
    STOKE_CUDA_CHECK(err);
    ++s.stats.cuda_malloc_calls;
    s.stats.reserved_bytes += segment;
    s.stats.peak_reserved_bytes = std::max(s.stats.peak_reserved_bytes, s.stats.reserved_bytes);
    Block* b = new Block();
    b->device = device;
    b->stream = stream;
    b->size = segment;
    b->ptr = static_cast<char*>(p);
    b->small = small;
    return b;
  }

  // The device whose active map holds `ptr`, and the block.
  std::pair<DeviceState*, Block*> find(void* ptr) {
    for (auto& s : devices) {
      if (!s) continue;
      auto it = s->active.find(ptr);
      if (it != s->active.end()) return {s.get(), it->second};
    }
    return {nullptr, nullptr};
  }

  void free(void* ptr) {
    if (!ptr) return;
    std::lock_guard<std::mutex> lock(mutex);
    auto [s, b] = find(ptr);
    STOKE_CHECK(b != nullptr, "cuda::caching_allocator::free", "pointer ", ptr,
                " was not allocated by the caching allocator (or was already freed)");
    s->active.erase(ptr);
    s->stats.allocated_bytes -= b->size;
    --s->stats.live_blocks;
    if (b->stream_uses.empty()) {
      free_block(*s, b);
      return;
    }
    int previous = b->device;
    (void)cudaGetDevice(&previous);
    if (previous != b->device) (void)cudaSetDevice(b->device);
    for (cudaStream_t use : b->stream_uses) {
      cudaEvent_t event = record_pending_use(use, "cuda::caching_allocator::free");
      // A use that cannot be tracked keeps the block out of circulation: one pending event that
      // never completes.
      ++b->pending_events;
      if (event) {
        s->pending.emplace_back(event, b);
      } else {
        s->untracked.push_back(b);
      }
    }
    if (previous != b->device) (void)cudaSetDevice(previous);
  }

  void record_stream(void* ptr, cudaStream_t stream) {
    std::lock_guard<std::mutex> lock(mutex);
    auto [s, b] = find(ptr);
    STOKE_CHECK(b != nullptr, "cuda::caching_allocator::record_stream", "pointer ", ptr,
                " was not allocated by the caching allocator (or was already freed)");
    if (stream == b->stream) return;
    if (std::find(b->stream_uses.begin(), b->stream_uses.end(), stream) == b->stream_uses.end()) {
      b->stream_uses.push_back(stream);
    }
  }

  void empty_cache() {
    std::lock_guard<std::mutex> lock(mutex);
    for (size_t d = 0; d < devices.size(); ++d) {
      if (!devices[d]) continue;
      process_events(*devices[d], /*wait=*/true);
      release_cached(*devices[d], static_cast<int>(d));
    }
  }
};

CachingAllocator::CachingAllocator() : impl_(std::make_unique<Impl>()) {}

CachingAllocator::~CachingAllocator() = default;

void* CachingAllocator::allocate(size_t nbytes) {
  if (nbytes == 0) return nullptr;
  const int device = is_available() ? current_device() : 0;  // 0: the check names the reason
  return impl_->allocate(nbytes, device, current_stream(device));
}

void* CachingAllocator::allocate_on(size_t nbytes, Device device) {
  if (device.index < 0 || nbytes == 0) return allocate(nbytes);
  // A bad index reaches the check in Impl::allocate, which names it (and the missing device).
  const bool valid = device.index < device_count();
  return impl_->allocate(nbytes, device.index, valid ? current_stream(device.index) : nullptr);
}

void* CachingAllocator::allocate(size_t nbytes, int device, cudaStream_t stream) {
  return impl_->allocate(nbytes, device, stream);
}

void CachingAllocator::deallocate(void* ptr, size_t /*nbytes: the block knows its size*/) {
  // Called from Storage's destructor: report and continue rather than terminate.
  try {
    impl_->free(ptr);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stoke: %s\n", e.what());
  }
}

void CachingAllocator::free(void* ptr) {
  impl_->free(ptr);
}

void CachingAllocator::record_stream(void* ptr, cudaStream_t stream) {
  impl_->record_stream(ptr, stream);
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  AllocatorStats out;
  for (const auto& s : impl_->devices) {
    if (!s) continue;
    out.allocated_bytes += s->stats.allocated_bytes;
    out.peak_allocated_bytes += s->stats.peak_allocated_bytes;
    out.cached_bytes += s->stats.reserved_bytes - s->stats.allocated_bytes;
    out.system_allocs += s->stats.cuda_malloc_calls;
    out.live_blocks += s->stats.live_blocks;
  }
  return out;
}

CachingAllocatorStats CachingAllocator::device_stats(int device) const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  if (device < 0 || static_cast<size_t>(device) >= impl_->devices.size() ||
      !impl_->devices[static_cast<size_t>(device)]) {
    return {};
  }
  return impl_->devices[static_cast<size_t>(device)]->stats;
}

void CachingAllocator::reset_peak_stats() {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  for (auto& s : impl_->devices) {
    if (!s) continue;
    s->stats.peak_allocated_bytes = s->stats.allocated_bytes;
    s->stats.peak_reserved_bytes = s->stats.reserved_bytes;
  }
}

void CachingAllocator::empty_cache() {
  impl_->empty_cache();
}

std::string CachingAllocator::summary(int device) const {
  return Impl::summary(device_stats(device));
}

CachingAllocator& caching_allocator() {
  static CachingAllocator* a = new CachingAllocator();
  return *a;
}

void register_cuda_allocator() {
  register_allocator(Device::Type::cuda, &caching_allocator());
}

}  // namespace stoke::cuda
