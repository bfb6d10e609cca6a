// Memory for tensors. The CPU allocator returns 64-byte aligned blocks and caches large ones:
// big temporaries (im2col buffers, activations) are reused instead of being returned to the OS
// and page-faulted in again on every call. Other devices register their own allocator.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/device.h"

namespace stoke {

struct AllocatorStats {
  size_t allocated_bytes = 0;       // bytes in live blocks (as requested, rounded)
  size_t peak_allocated_bytes = 0;  // high-water mark of allocated_bytes
  size_t cached_bytes = 0;          // bytes held in the cache, free for reuse
  size_t system_allocs = 0;         // calls that went to the system allocator
  size_t live_blocks = 0;
};

class DeviceAllocator {
 public:
  virtual ~DeviceAllocator() = default;
  virtual void* allocate(size_t nbytes) = 0;
  // A block on `device` (its index selects among devices of one type: cuda:1's memory comes from
  // device 1 whichever device is current). The default ignores the device: one memory space.
  virtual void* allocate_on(size_t nbytes, Device device) {
    (void)device;
    return allocate(nbytes);
  }
  virtual void deallocate(void* ptr, size_t nbytes) = 0;
  virtual AllocatorStats stats() const = 0;
  virtual void empty_cache() = 0;
};

constexpr size_t kCpuAlignment = 64;

// The allocator for a device type; throws if none is registered (e.g. cuda without the backend).
DeviceAllocator& allocator_for(Device device);
// Registers the allocator for a device type (called by backends at start-up).
void register_allocator(Device::Type type, DeviceAllocator* allocator);

DeviceAllocator& cpu_allocator();

// System allocations (cudaMalloc calls) of every registered device allocator but the CPU's, so
// far: what the profiler counts per step.
size_t device_system_allocs();

// Debug mode: every block an allocator hands out (the CPU's, and the CUDA caching allocator's,
// emulated or real) is first filled with 0xFF bytes: NaN in every float dtype (f32, f64, f16,
// bf16), -1 in the signed integers, 255 in u8, true in bool. A kernel that reads memory it did not
// write then poisons its result instead of silently reusing a stale value, as a cache hands the
// same block from one call to the next: the CPU counterpart of compute-sanitizer's initcheck,
// which AddressSanitizer cannot give for memory the cache reuses. On when the environment sets
// STOKE_ALLOC_POISON=1 (read once, at the first allocation); set_alloc_poison overrides it.
bool alloc_poison();
void set_alloc_poison(bool on);
constexpr unsigned char kAllocPoisonByte = 0xFF;

}  // namespace stoke
