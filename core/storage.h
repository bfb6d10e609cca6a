// A block of device memory shared by a tensor and its views.
#pragma once

#include <cstddef>
#include <memory>

#include "core/allocator.h"
#include "core/device.h"

namespace stoke {

class Storage {
 public:
  // Allocates `nbytes` on `device` (uninitialized).
  Storage(size_t nbytes, Device device);
  // Allocates `nbytes` from `allocator` for memory that lives on `device` (for host memory with
  // other properties than the CPU allocator's: the CUDA backend's pinned batches). The allocator
  // must outlive the storage.
  Storage(size_t nbytes, Device device, DeviceAllocator& allocator);
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage();

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  DeviceAllocator* allocator_ = nullptr;
};

}  // namespace stoke
