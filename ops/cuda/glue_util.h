// Small helpers shared by several files of the CUDA glue (ops/cuda/); the shared declarations
// every glue file uses are in ops/cuda/backend.h.
#pragma once

#include "core/dtype.h"
#include "core/tensor.h"
#include "ops/check.h"

namespace stoke::ops::cuda_glue {

// Integer tensors (i32, i64, u8) take cuda/kernels/elementwise_integer.h; the floating ones
// elementwise.h.
inline bool is_integer(DType d) {
  return d == DType::i32 || d == DType::i64 || d == DType::u8;
}

// cuda's dtype rule for a per-channel tensor of batch, group and layer norm (weight, bias, running
// and saved statistics): the input's dtype for an f32 input, else f32 (per-channel values stay
// f32, as in cuDNN and torch's AMP). Undefined tensors pass; shapes are the entry points' checks.
inline void check_f32_per_channel(const char* op, const Tensor& t, const char* name,
                                  const Tensor& x) {
  if (!t.defined()) return;
  if (x.dtype() == DType::f32)
    check_same_dtype(op, x, "input", t, name);
  else
    STOKE_CHECK(t.dtype() == DType::f32, op, "expected ", name, " of dtype f32 for an ", x.dtype(),
                " input on cuda (per-channel values stay f32), got ", t.dtype());
}

// Defines `To to_cuda(From op)`, mapping ops' op kind to the kernels' enumerator of the same name.
// Both enums are declared from LIST (core/elementwise_ops.h), so each entry of the list is one
// case; To may have more enumerators than From. STOKE_FAIL (ops/check.h) names `what` for a value
// outside the list.
#define STOKE_DEFINE_TO_CUDA(To, From, LIST, what)         \
  To to_cuda(From op) {                                    \
    using ToEnum = To;                                     \
    using FromEnum = From;                                 \
    switch (op) { LIST(STOKE_TO_CUDA_CASE) }               \
    STOKE_FAIL(what, "unknown op ", static_cast<int>(op)); \
  }
#define STOKE_TO_CUDA_CASE(name) \
  case FromEnum::name:           \
    return ToEnum::name;

}  // namespace stoke::ops::cuda_glue
