// The optimizer family on cuda: the multi-tensor kernels of cuda/kernels/optimizer.h on f32, f16
// or bf16 tensors (CUDA has no f64 kernels), on the current stream. Lists of several dtypes (the
// gradients of unscale and sum_of_squares) go as one list per dtype.
#include <algorithm>
#include <map>

#include "cuda/kernels/optimizer.h"
#include "ops/cuda/backend.h"
#include "ops/optimizer.h"
#include "ops/reduce.h"

namespace stoke::ops::cuda_glue {

namespace {

void check_dtype(const char* op, const Tensor& t) {
  STOKE_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::f16 || t.dtype() == DType::bf16, op,
              "expected f32, f16 or bf16 tensors on cuda, got ", t.dtype());
}

std::vector<void*> ptrs(const std::vector<Tensor>& ts) {
  std::vector<void*> r;
  r.reserve(ts.size());
  for (const Tensor& t : ts) r.push_back(t.numel() ? t.data_ptr() : nullptr);
  return r;
}

std::vector<const void*> const_ptrs(const std::vector<Tensor>& ts) {
  std::vector<const void*> r;
  r.reserve(ts.size());
  for (const Tensor& t : ts) r.push_back(t.numel() ? t.data_ptr() : nullptr);
  return r;
}

std::vector<int64_t> sizes(const std::vector<Tensor>& ts) {
  std::vector<int64_t> r;
  r.reserve(ts.size());
  for (const Tensor& t : ts) r.push_back(t.numel());
  return r;
}

// The step counts' addresses (one f32 each), or none.
std::vector<float*> count_ptrs(const std::vector<Tensor>& counts) {
  std::vector<float*> r;
  r.reserve(counts.size());
  for (const Tensor& t : counts) r.push_back(typed<float>(t));
  return r;
}

// A device learning rate's address (one f64), or none.
const double* lr_or_null(const Tensor& lr) {
  return lr.defined() ? typed<double>(lr) : nullptr;
}

// The tensors grouped by dtype, in a fixed (dtype) order.
std::map<DType, std::vector<Tensor>> by_dtype(const char* op, const std::vector<Tensor>& ts) {
  std::map<DType, std::vector<Tensor>> r;
  for (const Tensor& t : ts) {
    check_dtype(op, t);
    r[t.dtype()].push_back(t);
  }
  return r;
}

}  // namespace

void CudaBackend::fused_sgd_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                             const std::vector<Tensor>& momentum_buffers, const SgdStepOptions& o) {
  const char* op = params.size() == 1 ? "sgd_step_" : "fused_sgd_";
  check_dtype(op, params[0]);
  cuda::fused_sgd(params[0].dtype(), ptrs(params), const_ptrs(grads), ptrs(momentum_buffers),
                  sizes(params),
                  {.lr = o.lr,
                   .momentum = o.momentum,
                   .dampening = o.dampening,
                   .weight_decay = o.weight_decay,
                   .nesterov = o.nesterov,
                   .first_step = o.first_step,
                   .found_inf = f32_or_null(o.found_inf),
                   .lr_device = lr_or_null(o.lr_tensor)},
                  launch_stream(), count_ptrs(o.step_counts));
}

void CudaBackend::fused_adam_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                              const std::vector<Tensor>& exp_avgs,
                              const std::vector<Tensor>& exp_avg_sqs,
                              const std::vector<Tensor>& max_exp_avg_sqs,
                              const AdamStepOptions& o) {
  const char* op = params.size() == 1 ? "adam_step_" : "fused_adam_";
  check_dtype(op, params[0]);
  const AdamStepScalars s = adam_step_scalars(o);
  cuda::fused_adam(params[0].dtype(), ptrs(params), const_ptrs(grads), ptrs(exp_avgs),
                   ptrs(exp_avg_sqs), ptrs(max_exp_avg_sqs), sizes(params),
                   {.lr = o.lr,
                    .beta1 = o.beta1,
                    .beta2 = o.beta2,
                    .eps = o.eps,
                    .weight_decay = o.weight_decay,
                    .decoupled = o.decoupled,
                    .amsgrad = o.amsgrad,
                    .step_size = s.step_size,
                    .bias2_sqrt = s.bias2_sqrt,
                    .bias1 = s.bias1,
                    .found_inf = f32_or_null(o.found_inf),
                    .lr_device = lr_or_null(o.lr_tensor)},
                   launch_stream(), count_ptrs(o.step_counts));
}

void CudaBackend::non_finite_check_and_unscale_(const std::vector<Tensor>& grads,
                                                const Tensor& found_inf, const Tensor& inv_scale) {
  const char* op = "non_finite_check_and_unscale_";
  for (const auto& [dtype, list] : by_dtype(op, grads))
    cuda::non_finite_check_and_unscale(dtype, ptrs(list), sizes(list), typed<float>(found_inf),
                                       typed<float>(inv_scale), launch_stream());
}

void CudaBackend::amp_update_scale_(const Tensor& scale, const Tensor& growth_tracker,
                                    const Tensor& skipped, const Tensor& collapsed,
                                    const Tensor& found_inf, const AmpUpdateScaleOptions& o) {
  cuda::amp_update_scale(typed<float>(scale), typed<float>(growth_tracker), typed<float>(skipped),
                         typed<float>(collapsed), typed<float>(found_inf),
                         {.growth_factor = o.growth_factor,
                          .backoff_factor = o.backoff_factor,
                          .min_scale = o.min_scale,
                          .max_scale = o.max_scale,
                          .growth_interval = o.growth_interval},
                         launch_stream());
}

Tensor CudaBackend::sum_of_squares(const std::vector<Tensor>& tensors) {
  const char* op = "sum_of_squares";
  const Device dev = tensors[0].device();
  const auto groups = by_dtype(op, tensors);
  Tensor outs = empty_on({static_cast<int64_t>(groups.size())}, DType::f32, dev);
  int64_t g = 0;
  for (const auto& [dtype, list] : groups) {
    const std::vector<int64_t> n = sizes(list);
    Tensor partials =
        empty_on({std::max<int64_t>(cuda::multi_tensor_chunks(n), 1)}, DType::f32, dev);
    cuda::sum_of_squares(dtype, const_ptrs(list), n, typed<float>(partials),
                         typed<float>(outs) + g++, launch_stream());
  }
  return groups.size() == 1 ? outs.reshape({}) : ops::sum(outs);
}

}  // namespace stoke::ops::cuda_glue
