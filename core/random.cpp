#include "core/random.h"

#include "core/philox.h"

namespace stoke {

std::array<uint32_t, 4> philox4x32(uint64_t counter_lo, uint64_t counter_hi, uint64_t key) {
  uint32_t c0 = static_cast<uint32_t>(counter_lo), c1 = static_cast<uint32_t>(counter_lo >> 32);
  uint32_t c2 = static_cast<uint32_t>(counter_hi), c3 = static_cast<uint32_t>(counter_hi >> 32);
  philox4x32_10(c0, c1, c2, c3, key);
  return {c0, c1, c2, c3};
}

void Generator::manual_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(mutex_);
  state_ = {seed, 0};
}

GeneratorState Generator::state() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return state_;
}

void Generator::set_state(GeneratorState s) {
  std::lock_guard<std::mutex> lock(mutex_);
  state_ = s;
}

GeneratorState Generator::reserve(uint64_t blocks) {
  std::lock_guard<std::mutex> lock(mutex_);
  GeneratorState s = state_;
  state_.offset += blocks;
  return s;
}

Generator& default_generator() {
  static Generator g(0);
  return g;
}

}  // namespace stoke
