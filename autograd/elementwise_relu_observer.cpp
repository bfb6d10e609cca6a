#include "autograd/elementwise_relu_observer.h"

#include <atomic>
#include <utility>

namespace stoke {
namespace {

std::function<void(const Tensor&)>& observer() {
  static std::function<void(const Tensor&)> f;
  return f;
}
std::atomic<bool> installed{false};

}  // namespace

void set_relu_observer(std::function<void(const Tensor& output)> f) {
  installed.store(false, std::memory_order_release);
  observer() = std::move(f);
  installed.store(static_cast<bool>(observer()), std::memory_order_release);
}

void observe_relu(const Tensor& output) {
  if (installed.load(std::memory_order_acquire)) observer()(output);
}

}  // namespace stoke
