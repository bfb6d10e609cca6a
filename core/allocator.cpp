#include "core/allocator.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <iterator>
#include <map>
#include <mutex>
#include <new>

#include "core/error.h"

namespace stoke {
namespace {

// Blocks of at least this size are cached; smaller ones go straight to malloc, which is fast for
// them and does not page-fault.
constexpr size_t kCacheMinBytes = size_t{256} << 10;
// The cache never holds more than this much free memory.
constexpr size_t kCacheMaxBytes = size_t{2} << 30;

// Rounds a large request up to a quarter step of its power of two, so that slightly different
// sizes share blocks.
size_t round_size(size_t n) {
  if (n < kCacheMinBytes) return (n + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
  size_t p = size_t{1} << (63 - __builtin_clzll(n));
  size_t step = p / 4;
  return (n + step - 1) / step * step;
}

class CpuAllocator final : public DeviceAllocator {
 public:
  ~CpuAllocator() override { empty_cache(); }

  void* allocate(size_t nbytes) override {
    const size_t size = round_size(std::max<size_t>(nbytes, 1));
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stats_.allocated_bytes += size;
      stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
      ++stats_.live_blocks;
      if (size >= kCacheMinBytes) {
        // The block freed last (the end of the equal range): it is the one most likely still in
        // the caches. multimap::find would return the oldest, cycling through every cached block
        // of a size, so that an op's output landed in cold memory each call (memory-bound ops
        // ran at half the speed).
        auto it = free_.upper_bound(size);
        if (it != free_.begin() && std::prev(it)->first == size) {
          --it;
          void* p = it->second;
          free_.erase(it);
          stats_.cached_bytes -= size;
          return p;
        }
      }
      ++stats_.system_allocs;
    }
    void* p = std::aligned_alloc(kCpuAlignment, size);
    if (!p) {
      empty_cache();
      p = std::aligned_alloc(kCpuAlignment, size);
    }
    if (!p) {
      std::lock_guard<std::mutex> lock(mutex_);
      stats_.allocated_bytes -= size;
      --stats_.live_blocks;
      STOKE_FAIL("cpu allocator", "out of memory allocating ", nbytes, " bytes (",
                 stats_.allocated_bytes, " bytes in use)");
    }
    return p;
  }

  void deallocate(void* ptr, size_t nbytes) override {
    if (!ptr) return;
    const size_t size = round_size(std::max<size_t>(nbytes, 1));
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stats_.allocated_bytes -= size;
      --stats_.live_blocks;
      if (size >= kCacheMinBytes && stats_.cached_bytes + size <= kCacheMaxBytes) {
        free_.emplace(size, ptr);
        stats_.cached_bytes += size;
        return;
      }
    }
    std::free(ptr);
  }

  AllocatorStats stats() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

  void empty_cache() override {
    std::multimap<size_t, void*> blocks;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      blocks.swap(free_);
      stats_.cached_bytes = 0;
    }
    for (auto& [size, p] : blocks) std::free(p);
  }

 private:
  mutable std::mutex mutex_;
  std::multimap<size_t, void*> free_;
  AllocatorStats stats_;
};

std::array<DeviceAllocator*, 2>& registry() {
  static std::array<DeviceAllocator*, 2> r{&cpu_allocator(), nullptr};
  return r;
}

}  // namespace

DeviceAllocator& cpu_allocator() {
  // Never destroyed: tensors in static storage may be freed after main returns.
  static CpuAllocator* a = new CpuAllocator();
  return *a;
}

DeviceAllocator& allocator_for(Device device) {
  DeviceAllocator* a = registry()[static_cast<size_t>(device.type)];
  STOKE_CHECK(a != nullptr, "allocate", "no allocator for device ", device,
              ": stoke was built without its backend, or no such device is present");
  return *a;
}

void register_allocator(Device::Type type, DeviceAllocator* allocator) {
  registry()[static_cast<size_t>(type)] = allocator;
}

}  // namespace stoke
