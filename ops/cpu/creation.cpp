// The creation family on the CPU: fill and the strided copy (core's, which converts dtypes).
#include "ops/creation.h"
#include "ops/cpu/backend.h"

namespace stoke::ops::cpu {

void CpuBackend::fill(const Tensor& t, double value) {
  // A 0-dim f64 source expanded to t's shape: one strided copy converts and writes every element.
  Tensor v = empty({}, {.dtype = DType::f64});
  *v.data<double>() = value;
  stoke::copy_strided(t, v.expand(t.shape()));
}

void CpuBackend::copy_strided(const Tensor& dst, const Tensor& src) {
  stoke::copy_strided(dst, src);
}

}  // namespace stoke::ops::cpu
