// Dropout kernels (no autograd). The keep mask comes from Philox: element i (in row-major order)
// uses block offset + i / 4, output i % 4, of a reservation from the generator, so the mask depends
// only on the generator state and the element count, never on the thread count or dtype.
#pragma once

#include "core/random.h"
#include "core/tensor.h"

namespace stoke::ops {

// Output and keep mask (u8, 1 = kept, the input's shape) of one training-mode dropout.
struct DropoutResult {
  Tensor output;
  Tensor mask;
};

// Zeroes each element with probability p and scales the kept ones by 1 / (1 - p); 0 < p < 1.
// Draws from `generator` (the default generator if null).
DropoutResult dropout_with_mask(const Tensor& input, double p, Generator* generator = nullptr);

// dropout(x, 0.5, training): the identity (x itself) when !training or p == 0, zeros when p == 1,
// else dropout_with_mask(...).output. p outside [0, 1] is an error.
Tensor dropout(const Tensor& input, double p, bool training, Generator* generator = nullptr);

// grad_output * mask / (1 - p): the gradient of dropout_with_mask.
Tensor dropout_backward(const Tensor& grad_output, const Tensor& mask, double p);

}  // namespace stoke::ops
