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

}  // namespace stoke::nn::init
