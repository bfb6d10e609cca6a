// The CPU backend of ops/: ops::Backend (ops/backend.h) implemented with the project's own kernels
// (OpenBLAS for GEMM, the thread pool for parallel loops), a peer of the CUDA glue in ops/cuda/.
// A method of family F is defined in ops/cpu/F.cpp (the list: ops/backend_methods.h). Internal
// header: users call ops:: entry points, which check their arguments and dispatch here for CPU
// tensors.
#pragma once

#include "ops/backend.h"

namespace stoke::ops::cpu {

class CpuBackend final : public Backend {
 public:
  Device::Type type() const override { return Device::Type::cpu; }
  void use_device(const char*, Device) const override {}
  STOKE_BACKEND_METHODS(STOKE_BACKEND_OVERRIDE)
};

}  // namespace stoke::ops::cpu
