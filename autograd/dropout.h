// Differentiable dropout: stoke::dropout (see ops/dropout.h for how the mask is drawn).
#pragma once

#include "core/random.h"
#include "core/tensor.h"
#include "ops/dropout.h"

namespace stoke {

// In training, zeroes each element with probability p and scales the rest by 1 / (1 - p); the
// backward multiplies by the same mask. Returns `input` itself when !training or p == 0.
Tensor dropout(const Tensor& input, double p, bool training, Generator* generator = nullptr);

// Stochastic depth per sample and channel dropout (see ops/dropout.h): input * noise, the noise
// (0 or 1 / (1 - p) per sample, or per (sample, channel)) a constant of the graph, so the
// backward multiplies by the forward's noise. Return `input` itself when !training or p == 0.
Tensor drop_path(const Tensor& input, double p, bool training, Generator* generator = nullptr);
Tensor dropout2d(const Tensor& input, double p, bool training, Generator* generator = nullptr);

}  // namespace stoke
