// The optimizer family on cuda: the fused update kernels of cuda/kernels/optimizer.h on f32
// parameters (CUDA has no f64 kernels; the entry point has refused f16/bf16 parameters, as the
// optimizers do), on the current stream.
#include "cuda/kernels/optimizer.h"
#include "ops/cuda/backend.h"
#include "ops/optimizer.h"

namespace stoke::ops::cuda_glue {

namespace {

void check_f32(const char* op, const Tensor& param) {
  STOKE_CHECK(param.dtype() == DType::f32, op, "expected f32 parameters on cuda, got ",
              param.dtype());
}

}  // namespace

void CudaBackend::sgd_step_(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer,
                            const SgdStepOptions& o) {
  check_f32("sgd_step_", param);
  if (param.numel() == 0) return;
  const bool momentum = o.momentum != 0;
  cuda::sgd_step(typed<float>(param), typed<float>(grad),
                 momentum ? typed<float>(momentum_buffer) : nullptr, param.numel(),
                 {.lr = o.lr,
                  .momentum = o.momentum,
                  .dampening = o.dampening,
                  .weight_decay = o.weight_decay,
                  .nesterov = o.nesterov,
                  .first_step = o.first_step},
                 launch_stream());
}

void CudaBackend::adam_step_(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                             const Tensor& exp_avg_sq, const AdamStepOptions& o) {
  check_f32("adam_step_", param);
  if (param.numel() == 0) return;
  const AdamStepScalars s = adam_step_scalars(o);
  cuda::adam_step(typed<float>(param), typed<float>(grad), typed<float>(exp_avg),
                  typed<float>(exp_avg_sq), param.numel(),
                  {.lr = o.lr,
                   .beta1 = o.beta1,
                   .beta2 = o.beta2,
                   .eps = o.eps,
                   .weight_decay = o.weight_decay,
                   .decoupled = o.decoupled,
                   .step_size = s.step_size,
                   .bias2_sqrt = s.bias2_sqrt},
                  launch_stream());
}

}  // namespace stoke::ops::cuda_glue
