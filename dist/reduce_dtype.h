// Internal to dist/: the floating dtypes a reduction takes, and the element type each is summed
// through (f16/bf16 are read as stoke's Half/BFloat16 and accumulated in f32 by the callers).
#pragma once

#include <string>

#include "core/dtype.h"
#include "core/error.h"
#include "core/half.h"

namespace stoke::dist::internal {

// Calls f(T{}) with the storage type of dtype; other dtypes are refused naming `label`.
template <class F>
void visit_floating(DType dtype, const std::string& label, F&& f) {
  switch (dtype) {
    case DType::f32:
      return f(float{});
    case DType::f64:
      return f(double{});
    case DType::f16:
      return f(Half{});
    case DType::bf16:
      return f(BFloat16{});
    default:
      STOKE_FAIL(label.c_str(), "reductions take f32, f64, f16 or bf16 tensors, got ", dtype);
  }
}

}  // namespace stoke::dist::internal
