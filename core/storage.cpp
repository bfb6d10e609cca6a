#include "core/storage.h"

namespace stoke {

Storage::Storage(size_t nbytes, Device device)
    : nbytes_(nbytes), device_(device), allocator_(&allocator_for(device)) {
  data_ = allocator_->allocate_on(nbytes, device);
}

Storage::Storage(size_t nbytes, Device device, DeviceAllocator& allocator)
    : nbytes_(nbytes), device_(device), allocator_(&allocator) {
  data_ = allocator_->allocate_on(nbytes, device);
}

Storage::~Storage() {
  allocator_->deallocate(data_, nbytes_);
}

}  // namespace stoke
