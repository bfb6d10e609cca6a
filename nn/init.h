// Parameter initialization with PyTorch's defaults, drawn from a stoke::Generator.
#pragma once

#include "core/random.h"
#include "core/tensor.h"

namespace stoke::nn::init {

// fan_in of a weight: dim 1 times the receptive field (product of dims 2..).
int64_t fan_in(const Tensor& weight);
// U(low, high) in place.
void uniform_(const Tensor& t, double low, double high, Generator* gen = nullptr);
// PyTorch's kaiming_uniform_(w, a): bound = sqrt(6 / ((1 + a^2) * fan_in)). Conv and Linear use
// a = sqrt(5), i.e. bound = 1 / sqrt(fan_in).
void kaiming_uniform_(const Tensor& weight, double a, Generator* gen = nullptr);
void kaiming_normal_(const Tensor& weight, double a = 0, Generator* gen = nullptr);
// 0 in place.
void zeros_(const Tensor& t);
// fan_out of a weight: dim 0 times the receptive field (torch's mode="fan_out").
int64_t fan_out(const Tensor& weight);
// PyTorch's kaiming_normal_(w, mode="fan_out", nonlinearity="relu"): N(0, 2 / fan_out), as
// torchvision's EfficientNet and MobileNet initialize their convolutions.
void kaiming_normal_fan_out_(const Tensor& weight, Generator* gen = nullptr);
// PyTorch's trunc_normal_(t, std=std, a=-2, b=2): N(0, std^2) redrawn outside [a, b] (absolute
// bounds, as torch's), as ConvNeXt initializes its convolutions and linear layers.
void trunc_normal_(const Tensor& t, double std, double a = -2, double b = 2,
                   Generator* gen = nullptr);

}  // namespace stoke::nn::init
