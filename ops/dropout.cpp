// Dropout entry points: the checks, the generator reservation (made here, the same on every
// device, so that one seed gives one mask on cpu and cuda), then the backend of the tensors'
// device (ops/cpu/dropout.cpp, ops/cuda/dropout.cpp).
#include "ops/dropout.h"

#include "ops/backend.h"
#include "ops/check.h"
#include "ops/creation.h"

namespace stoke::ops {
namespace {

void check_p(const char* op, double p) {
  STOKE_CHECK(p >= 0 && p <= 1, op, "expected a probability p in [0, 1], got ", p);
}

}  // namespace

DropoutResult dropout_with_mask(const Tensor& input, double p, Generator* generator) {
  const char* op = "dropout";
  STOKE_CHECK(input.defined(), op, "expected a defined input tensor");
  check_p(op, p);
  STOKE_CHECK(p > 0 && p < 1, op, "dropout_with_mask needs 0 < p < 1, got ", p);
  Backend& backend = dispatch(op, {&input});
  // The CPU's dtype check comes before the reservation, so that a rejected input leaves the
  // generator as it was (the CPU kernel checks it again for direct callers).
  if (input.device().is_cpu()) check_float(op, input, "input");
  const uint64_t blocks = static_cast<uint64_t>((input.numel() + 3) / 4);
  Generator& gen = generator ? *generator : default_generator();
  // Reserved the same way on every device, so that one seed gives one mask on cpu and cuda.
  const GeneratorState st = gen.reserve(blocks);
  return backend.dropout_with_mask(input, p, st);
}

Tensor dropout(const Tensor& input, double p, bool training, Generator* generator) {
  const char* op = "dropout";
  check_p(op, p);
  STOKE_CHECK(input.defined(), op, "expected a defined input tensor");
  if (!training || p == 0) return input;
  if (p == 1) {
    if (input.device().is_cpu()) check_float(op, input, "input");
    return zeros(input.shape(), {.dtype = input.dtype(), .device = input.device()});
  }
  return dropout_with_mask(input, p, generator).output;
}

Tensor dropout_backward(const Tensor& grad_output, const Tensor& mask, double p) {
  const char* op = "dropout_backward";
  STOKE_CHECK(grad_output.defined() && mask.defined(), op, "expected defined grad_output and mask");
  check_p(op, p);
  STOKE_CHECK(mask.dtype() == DType::u8, op, "expected a mask of dtype u8, got ", mask.dtype());
  check_shape(op, mask, "mask", grad_output.shape());
  return dispatch(op, {&grad_output, &mask}).dropout_backward(grad_output, mask, p);
}

}  // namespace stoke::ops
