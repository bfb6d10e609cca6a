// The fused cross entropy on cuda tensors: cuda/kernels/cross_entropy.h, forward and backward in
// one kernel each; out-of-range targets are reported at the next synchronization
// (cuda/runtime/deferred_checks.h).
#include <memory>
#include <string>

#include "cuda/kernels/cross_entropy.h"
#include "cuda/runtime/deferred_checks.h"
#include "ops/cuda/backend.h"
#include "ops/loss.h"

namespace stoke::ops::cuda_glue {
namespace {

cuda::CrossEntropyParams ce_params(const CrossEntropyOptions& o) {
  cuda::CrossEntropyParams p;
  p.reduction = o.reduction == Reduction::none  ? cuda::CrossEntropyReduction::none
                : o.reduction == Reduction::sum ? cuda::CrossEntropyReduction::sum
                                                : cuda::CrossEntropyReduction::mean;
  p.label_smoothing = static_cast<float>(o.label_smoothing);
  p.ignore_index = o.ignore_index;
  return p;
}

// Runs the fused cross-entropy kernel; with dlogits, also the gradient scaled by grad.
Tensor run_cross_entropy(const char* op, const Tensor& logits_in, const Tensor& target_in,
                         const CrossEntropyOptions& options, const Tensor* grad, Tensor* dlogits) {
  check_float_dtype(op, logits_in);
  STOKE_CHECK(logits_in.dim() == 2, op, "expected logits of shape (N, C) on cuda, got shape ",
              logits_in.shape());
  STOKE_CHECK(target_in.dtype() == DType::i64 && target_in.dim() == 1 &&
                  target_in.size(0) == logits_in.size(0),
              op, "expected i64 targets of shape [", logits_in.size(0), "], got ",
              target_in.dtype(), " of shape ", target_in.shape());
  const Tensor logits = logits_in.detach().contiguous();
  const Tensor target = target_in.detach().contiguous();
  const int64_t n = logits.size(0), c = logits.size(1);
  const Device dev = logits.device();
  Tensor row_loss = empty_on({n}, DType::f32, dev);
  Tensor loss = empty_on({}, DType::f32, dev);
  Tensor scratch = empty_on({2}, DType::i64, dev);
  Tensor g;
  cuda::CrossEntropyBuffers b;
  b.row_loss = row_loss.data<float>();
  b.loss = loss.data<float>();
  b.scratch = scratch.data<int64_t>();
  if (dlogits) {
    *dlogits = empty_on(logits.shape(), logits.dtype(), dev);
    b.dlogits = dlogits->data_ptr();
    if (grad && grad->defined()) {
      g = grad->detach().to(DType::f32).contiguous();
      b.grad = g.data<float>();
    }
  }
  cuda::cross_entropy(logits.dtype(), logits.data_ptr(), target.data<int64_t>(), n, c,
                      ce_params(options), b, launch_stream());
  // The kernel writes the first out-of-range target's row to scratch[1] (-1: none) and skips such
  // rows; it is read at this thread's next synchronization, not here, and named as on the CPU.
  cuda::defer_check(
      {.flag = scratch.data<int64_t>() + 1,
       .flag_is_i64 = true,
       .passed = -1,
       .stream = launch_stream(),
       .keep = std::make_shared<Tensor>(scratch),
       .describe = [op = std::string(op), target, c, ignore = options.ignore_index](int64_t bad) {
         const int64_t t = target.select(0, bad).to(Device::cpu()).item<int64_t>();
         return detail::str_cat("stoke::", op, ": target ", t, " of row ", bad,
                                " is out of range for ", c, " classes (expected 0 <= target < ", c,
                                " or ignore_index ", ignore, ")");
       }});
  const Tensor result = options.reduction == Reduction::none ? row_loss : loss;
  return result.dtype() == logits.dtype() ? result : result.to(logits.dtype());
}

}  // namespace

CrossEntropyForward CudaBackend::cross_entropy_forward(const Tensor& logits, const Tensor& target,
                                                       const CrossEntropyOptions& options) {
  // The fused kernel recomputes the log-sum-exp in the backward pass, so no lse is kept.
  return {run_cross_entropy("cross_entropy", logits, target, options, nullptr, nullptr), Tensor()};
}

Tensor CudaBackend::cross_entropy_backward(const Tensor& grad, const Tensor& logits,
                                           const Tensor& target, const Tensor&,
                                           const CrossEntropyOptions& options) {
  Tensor dlogits;
  run_cross_entropy("cross_entropy_backward", logits, target, options, &grad, &dlogits);
  return dlogits;
}

}  // namespace stoke::ops::cuda_glue
