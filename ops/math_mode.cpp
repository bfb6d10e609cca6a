#include "ops/math_mode.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace stoke {
namespace {

std::atomic<bool>& tf32_setting() {
  static std::atomic<bool> on = [] {
    const char* env = std::getenv("STOKE_ALLOW_TF32");
    return env != nullptr && std::strcmp(env, "1") == 0;
  }();
  return on;
}

}  // namespace

void set_allow_tf32(bool on) {
  tf32_setting().store(on, std::memory_order_relaxed);
}

bool allow_tf32() {
  return tf32_setting().load(std::memory_order_relaxed);
}

}  // namespace stoke
