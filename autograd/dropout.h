// Differentiable dropout: stoke::dropout, drop_path and dropout2d (see ops/dropout.h for how the
// mask is drawn).
#pragma once

#include "core/random.h"
#include "core/tensor.h"
#include "ops/dropout.h"

namespace stoke {

// dropout(x, 0.5, training): in training, zeroes each element with probability p and scales the
// rest by 1 / (1 - p); the backward multiplies by the same mask. Returns `input` itself when
// !training or p == 0, zeros when p == 1; p outside [0, 1] is an error. Draws from `generator`
// (the default generator if null).
Tensor dropout(const Tensor& input, double p, bool training, Generator* generator = nullptr);

// Stochastic depth, per sample (timm's drop_path, torchvision's stochastic_depth mode "row"): in
// training, each sample (index along dim 0) is zeroed with probability p and the others scaled
// by 1 / (1 - p). Channel dropout (F.dropout2d): in training, each channel of each sample of an
// (N, C, H, W) or unbatched (C, H, W) input is zeroed with probability p and the others scaled by
// 1 / (1 - p). Both are input * noise, the noise a constant of the graph, so the backward
// multiplies by the forward's noise; both return `input` itself when !training or p == 0.
Tensor drop_path(const Tensor& input, double p, bool training, Generator* generator = nullptr);
Tensor dropout2d(const Tensor& input, double p, bool training, Generator* generator = nullptr);

}  // namespace stoke
