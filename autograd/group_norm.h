// Differentiable group and layer normalization: stoke::group_norm and stoke::layer_norm, with
// PyTorch's semantics: statistics per sample (and group) with the biased variance, no running
// statistics, an elementwise affine weight / bias (1 and 0 when undefined). Input, weight and
// bias are differentiated. The options are NormOptions (ops/group_norm.h).
#pragma once

#include "core/tensor.h"
#include "ops/group_norm.h"

namespace stoke {

// group_norm(x, 32, gn.weight, gn.bias): x is (N, C, ...) with C divisible by num_groups;
// statistics per (sample, group), weight / bias (C) optional (F.group_norm).
Tensor group_norm(const Tensor& input, int64_t num_groups, const Tensor& weight = {},
                  const Tensor& bias = {}, const NormOptions& options = {});

// layer_norm(x, {768}, ln.weight, ln.bias): statistics over the last normalized_shape.size()
// dims of x, which must equal normalized_shape; weight / bias of normalized_shape optional
// (F.layer_norm).
Tensor layer_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight = {},
                  const Tensor& bias = {}, const NormOptions& options = {});

}  // namespace stoke
