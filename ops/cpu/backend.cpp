#include "ops/cpu/backend.h"

namespace stoke::ops {

Backend& cpu_backend() {
  static cpu::CpuBackend backend;  // no state: a function-local static needs no registration order
  return backend;
}

}  // namespace stoke::ops
