#include "core/allocator.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <new>
#include <set>

#include "core/error.h"

namespace stoke {
namespace {

std::atomic<bool>& poison_flag() {
  static std::atomic<bool> on{[] {
    const char* v = std::getenv("STOKE_ALLOC_POISON");
    return v != nullptr && std::strcmp(v, "") != 0 && std::strcmp(v, "0") != 0;
  }()};
  return on;
}

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
    if (alloc_poison()) return allocate_guarded(size, nbytes);
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
    if (release_guarded(ptr, size, nbytes)) return;
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
  // Poison mode (alloc_poison): every block comes straight from the system, filled with
  // kAllocPoisonByte, between guard bytes: kGuardBytes before it and from the requested size to
  // kGuardBytes past the rounded size after it. Freeing checks the guards, so a write out of
  // bounds (including AVX-512 masked stores, which AddressSanitizer does not see) aborts naming
  // the block instead of corrupting a neighbour; no caching, so every block is checked.
  static constexpr size_t kGuardBytes = 4096;
  static constexpr unsigned char kGuardByte = 0xA5;

  void* allocate_guarded(size_t size, size_t nbytes) {
    auto* raw =
        static_cast<unsigned char*>(std::aligned_alloc(kCpuAlignment, size + 2 * kGuardBytes));
    if (!raw)
      STOKE_FAIL("cpu allocator", "out of memory allocating ", nbytes, " bytes (poison mode)");
    unsigned char* p = raw + kGuardBytes;
    std::memset(raw, kGuardByte, kGuardBytes);
    std::memset(p, kAllocPoisonByte, nbytes);
    std::memset(p + nbytes, kGuardByte, size - nbytes + kGuardBytes);
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.allocated_bytes += size;
    stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
    ++stats_.live_blocks;
    ++stats_.system_allocs;
    guarded_.insert(p);
    return p;
  }

  // Frees `ptr` when it is a guarded block (false otherwise), after checking its guards.
  bool release_guarded(void* ptr, size_t size, size_t nbytes) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (guarded_.erase(ptr) == 0) return false;
      stats_.allocated_bytes -= size;
      --stats_.live_blocks;
    }
    auto* p = static_cast<unsigned char*>(ptr);
    unsigned char* raw = p - kGuardBytes;
    for (size_t i = 0; i < kGuardBytes; ++i)
      if (raw[i] != kGuardByte) guard_broken(p, nbytes, -static_cast<long>(kGuardBytes - i));
    for (size_t i = nbytes; i < size + kGuardBytes; ++i)
      if (p[i] != kGuardByte) guard_broken(p, nbytes, static_cast<long>(i));
    std::free(raw);
    return true;
  }

  [[noreturn]] static void guard_broken(const void* p, size_t nbytes, long offset) {
    std::fprintf(stderr,
                 "stoke: cpu allocator (STOKE_ALLOC_POISON): the block of %zu bytes at %p was "
                 "written out of bounds: byte %ld (relative to its start) changed\n",
                 nbytes, p, offset);
    std::abort();
  }

  mutable std::mutex mutex_;
  std::set<void*> guarded_;
  std::multimap<size_t, void*> free_;
  AllocatorStats stats_;
};

std::array<DeviceAllocator*, 2>& registry() {
  static std::array<DeviceAllocator*, 2> r{&cpu_allocator(), nullptr};
  return r;
}

}  // namespace

bool alloc_poison() {
  return poison_flag().load(std::memory_order_relaxed);
}

void set_alloc_poison(bool on) {
  poison_flag().store(on, std::memory_order_relaxed);
}

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

size_t device_system_allocs() {
  size_t n = 0;
  const auto& r = registry();
  for (size_t i = 0; i < r.size(); ++i)
    if (i != static_cast<size_t>(Device::Type::cpu) && r[i]) n += r[i]->stats().system_allocs;
  return n;
}

}  // namespace stoke
