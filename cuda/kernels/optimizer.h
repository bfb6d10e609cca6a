// CUDA optimizer updates: torch.optim's SGD and Adam/AdamW rules as one fused elementwise kernel
// each, on f32 parameters and state (master weights; optimizers refuse f16/bf16 parameters). The
// arithmetic is the CPU's (ops/cpu/optimizer.cpp) operation for operation in f32, with the scalars
// converted from the same f64 values, so the devices agree up to the compiler's contractions.
#pragma once

#include <cstdint>

#include "cuda/compat.h"

namespace stoke::cuda {

// SGD's scalars as the CPU takes them (ops::SgdStepOptions): d = g + weight_decay * p (when
// weight_decay != 0); with momentum != 0, buf = first_step ? d : momentum * buf +
// (1 - dampening) * d and d = nesterov ? d + momentum * buf : buf; then p -= lr * d.
struct SgdStepArgs {
  double lr = 0;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
  bool first_step = false;
};

// One SGD step over n contiguous floats; momentum_buffer is unused (may be null) when momentum is
// 0. None of the arrays may overlap another.
void sgd_step(float* param, const float* grad, float* momentum_buffer, int64_t n,
              const SgdStepArgs& args, cudaStream_t stream);

// Adam's scalars: step_size = lr / (1 - beta1^t) and bias2_sqrt = sqrt(1 - beta2^t) computed in
// f64 by the caller (ops::adam_step_scalars). decoupled (AdamW): p *= 1 - lr * weight_decay;
// else d = g + weight_decay * p (when weight_decay != 0).
struct AdamStepArgs {
  double lr = 0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
  bool decoupled = false;
  double step_size = 0;
  double bias2_sqrt = 1;
};

// One Adam step over n contiguous floats (param, exp_avg and exp_avg_sq updated in place).
void adam_step(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
               const AdamStepArgs& args, cudaStream_t stream);

}  // namespace stoke::cuda
