// How tensors move between devices. core knows only the CPU; a device backend (cuda/) registers a
// DeviceCopier for its device type at start-up, and Tensor::to(Device) / copy_() call it with raw
// byte ranges. Kept in core (not cuda/) because Tensor::to is a core method and core may not
// depend on the layers above it — the same arrangement as the allocator registry.
#pragma once

#include <cstddef>

#include "core/device.h"

namespace stoke {

class Tensor;

class DeviceCopier {
 public:
  virtual ~DeviceCopier() = default;
  // Copies `nbytes` from `src` (on `src_device`) to `dst` (on `dst_device`); one side is this
  // backend's device type, the other the CPU or the same type. With non_blocking the copy may
  // still be in flight when this returns (ordered on the backend's current stream, like
  // PyTorch's non_blocking=True); otherwise it has completed.
  virtual void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes,
                    bool non_blocking) = 0;
  // dst <- src, both on this backend's device with the same shape: a strided copy converting the
  // dtype (what contiguous(), clone() and to(dtype) need). Stream-ordered.
  virtual void copy_strided(const Tensor& dst, const Tensor& src) = 0;
};

// Registers the copier for a device type (called by backends at start-up; null unregisters).
void register_device_copier(Device::Type type, DeviceCopier* copier);
// The copier for a device type, or null when none is registered.
DeviceCopier* device_copier(Device::Type type);

}  // namespace stoke
