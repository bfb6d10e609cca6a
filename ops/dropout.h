// The kernels behind stoke::dropout, drop_path and dropout2d (autograd/dropout.h, documented
// there): the ops:: functions of the same names take the same arguments and compute the same
// results without recording autograd. Documented here is what only ops:: has: the mask and noise
// draws and the backward. The keep mask comes from Philox: element i (in row-major order) uses
// block offset + i / 4, output i % 4, of a reservation from the generator, so the mask depends
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

// dropout_with_mask(...).output in training.
Tensor dropout(const Tensor& input, double p, bool training, Generator* generator = nullptr);

// The noise of a structured dropout on `input`'s device and dtype: a tensor of `noise_shape`
// (which broadcasts to input's shape) holding 0 with probability p, else 1 / (1 - p); all zeros
// when p == 1. Drawn by dropout_with_mask on a tensor of ones, so one generator state gives one
// noise on every device. 0 < p <= 1.
Tensor dropout_noise(const Tensor& input, const Shape& noise_shape, double p,
                     Generator* generator = nullptr);

// input * dropout_noise(...) in training.
Tensor drop_path(const Tensor& input, double p, bool training, Generator* generator = nullptr);
Tensor dropout2d(const Tensor& input, double p, bool training, Generator* generator = nullptr);

// The noise shapes of drop_path ((N, 1, ..., 1)) and dropout2d ((N, C, 1, 1) or (C, 1, 1)) after
// checking p and the input's shape, messages naming `op`.
Shape drop_path_noise_shape(const char* op, const Tensor& input, double p);
Shape dropout2d_noise_shape(const char* op, const Tensor& input, double p);

// grad_output * mask / (1 - p): the gradient of dropout_with_mask.
Tensor dropout_backward(const Tensor& grad_output, const Tensor& mask, double p);

}  // namespace stoke::ops
