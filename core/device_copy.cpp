#include "core/device_copy.h"

#include <array>

namespace stoke {
namespace {

std::array<DeviceCopier*, 2>& copiers() {
  static std::array<DeviceCopier*, 2> r{};
  return r;
}

}  // namespace

void register_device_copier(Device::Type type, DeviceCopier* copier) {
  copiers()[static_cast<size_t>(type)] = copier;
}

DeviceCopier* device_copier(Device::Type type) {
  return copiers()[static_cast<size_t>(type)];
}

}  // namespace stoke
