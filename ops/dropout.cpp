// Dropout entry points: the checks, the generator reservation (made here, the same on every
// device, so that one seed gives one mask on cpu and cuda), then the backend of the tensors'
// device (ops/cpu/dropout.cpp, ops/cuda/dropout.cpp).
#include "ops/dropout.h"

#include "ops/backend.h"
#include "ops/check.h"
#include "ops/creation.h"
#include "ops/elementwise.h"
#include "ops/memory_format.h"

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
  // The mask is drawn in NCHW order on every layout; output and mask keep the input's layout.
  DropoutResult r = backend.dropout_with_mask(input, p, st);
  r.output = in_format(r.output, input.suggest_memory_format());
  r.mask = in_format(r.mask, input.suggest_memory_format());
  return r;
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

Tensor dropout_noise(const Tensor& input, const Shape& noise_shape, double p,
                     Generator* generator) {
  const char* op = "dropout_noise";
  STOKE_CHECK(input.defined(), op, "expected a defined input tensor");
  STOKE_CHECK(p > 0 && p <= 1, op, "expected 0 < p <= 1, got ", p);
  if (input.device().is_cpu()) check_float(op, input, "input");
  const TensorOptions o{.dtype = input.dtype(), .device = input.device()};
  if (p == 1) return zeros(noise_shape, o);
  return dropout_with_mask(ones(noise_shape, o), p, generator).output;
}

namespace {

// The structured dropouts: x * noise, the noise of noise_shape drawn per sample or channel.
Tensor noise_dropout(const Tensor& input, const Shape& noise_shape, double p, bool training,
                     Generator* generator) {
  if (!training || p == 0) return input;
  return mul(input, dropout_noise(input, noise_shape, p, generator));
}

}  // namespace

Shape drop_path_noise_shape(const char* op, const Tensor& input, double p) {
  STOKE_CHECK(input.defined(), op, "expected a defined input tensor");
  check_p(op, p);
  STOKE_CHECK(input.dim() >= 1, op, "expected an input with a batch dim, got a 0-dim tensor");
  Shape s(std::vector<int64_t>(static_cast<size_t>(input.dim()), 1));
  s[0] = input.size(0);
  return s;
}

Shape dropout2d_noise_shape(const char* op, const Tensor& input, double p) {
  STOKE_CHECK(input.defined(), op, "expected a defined input tensor");
  check_p(op, p);
  STOKE_CHECK(input.dim() == 3 || input.dim() == 4, op,
              "expected an (N, C, H, W) or (C, H, W) input, got shape ", input.shape());
  Shape s = input.shape();
  for (int64_t d = input.dim() - 2; d < input.dim(); ++d) s[static_cast<size_t>(d)] = 1;
  return s;
}

Tensor drop_path(const Tensor& input, double p, bool training, Generator* generator) {
  const char* op = "drop_path";
  return noise_dropout(input, drop_path_noise_shape(op, input, p), p, training, generator);
}

Tensor dropout2d(const Tensor& input, double p, bool training, Generator* generator) {
  const char* op = "dropout2d";
  return noise_dropout(input, dropout2d_noise_shape(op, input, p), p, training, generator);
}

Tensor dropout_backward(const Tensor& grad_output, const Tensor& mask, double p) {
  const char* op = "dropout_backward";
  STOKE_CHECK(grad_output.defined() && mask.defined(), op, "expected defined grad_output and mask");
  check_p(op, p);
  STOKE_CHECK(mask.dtype() == DType::u8, op, "expected a mask of dtype u8, got ", mask.dtype());
  check_shape(op, mask, "mask", grad_output.shape());
  return in_format(dispatch(op, {&grad_output, &mask}).dropout_backward(grad_output, mask, p),
                   grad_output.suggest_memory_format());
}

}  // namespace stoke::ops
