// Half-precision parameters for mixed-precision training with f32 master weights elsewhere
// (dist::ZeroOptimizer's shards): the convolutions' and linear layers' parameters in f16 or bf16,
// the normalization layers' left in f32, as apex's O2 keeps batch norm in f32 (their statistics
// and small affine parameters gain nothing from half precision and lose accuracy to it).
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "nn/module.h"

namespace stoke::nn::amp {

// Casts, in place (handles stay valid, as Module::to), the parameters of every Conv2d,
// ConvTranspose2d and Linear module under `root` to `dtype` (f16 or bf16); returns how many
// elements it cast. Run the model inside an autocast region of that dtype afterwards: ops the
// autocast keeps in f32 take the half parameters cast up.
int64_t half_precision_parameters(Module& root, DType dtype);

}  // namespace stoke::nn::amp
