// The fused cross entropy on cuda tensors: cuda/kernels/loss_cross_entropy.h, forward and backward
// in one kernel each; out-of-range targets are reported at the next synchronization
// (cuda/runtime/deferred_checks.h). nll_loss and mse_loss (and their backward) are composed from
// other ops: gather, where, elementwise ops and reductions.
#include <memory>
#include <string>

#include "cuda/kernels/loss_cross_entropy.h"
#include "cuda/runtime/deferred_checks.h"
#include "ops/check.h"
#include "ops/creation.h"
#include "ops/cuda/backend.h"
#include "ops/elementwise.h"
#include "ops/index.h"
#include "ops/loss.h"
#include "ops/reduce.h"

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

// --- nll and mse: composed from other ops (gather, where, reductions) --------------------------

namespace {

// target with ignored rows set to class 0, after checking the others like the CPU does (one
// read-back of the first bad row).
Tensor device_targets(const char* op, Backend& k, const Tensor& target, int64_t classes,
                      int64_t ignore_index) {
  STOKE_CHECK(target.dtype() == DType::i64, op,
              "expected target of dtype i64 (class indices), got ", target.dtype());
  const Tensor zero = zeros({}, {.dtype = DType::i64, .device = target.device()});
  const Tensor t = where(eq(target, static_cast<double>(ignore_index)), zero, target).contiguous();
  k.check_index_range(op, t, classes, [target, classes](int64_t i) {
    return detail::str_cat("target ", target.narrow(0, i, 1).to(Device::cpu()).item<int64_t>(),
                           " out of range for ", classes, " classes at row ", i);
  });
  return t;
}

// Per-row weights of the loss: 1 for counted rows, 0 for ignored ones, divided by the count for
// mean (on the device, no read-back).
Tensor device_row_weights(const Tensor& target, int64_t ignore_index, Reduction reduction,
                          DType dtype) {
  Tensor w = ne(target, static_cast<double>(ignore_index)).to(dtype);
  if (reduction == Reduction::mean) w = div(w, sum(w));
  return w;
}

}  // namespace

Tensor CudaBackend::class_targets(const char* op, const Tensor& target, int64_t classes,
                                  int64_t ignore_index) {
  return device_targets(op, *this, target, classes, ignore_index);
}

Tensor CudaBackend::nll_loss(const Tensor& log_probs, const Tensor& target,
                             const NllLossOptions& o) {
  const char* op = "nll_loss";
  check_dim(op, log_probs, "log_probs", 2, "(N, C)");
  STOKE_CHECK(target.dim() == 1 && target.size(0) == log_probs.size(0), op,
              "expected target of shape [", log_probs.size(0), "] for log_probs of shape ",
              log_probs.shape(), ", got target of shape ", target.shape());
  const Tensor t = device_targets(op, *this, target, log_probs.size(1), o.ignore_index);
  const Tensor picked = ops::gather(log_probs.detach(), 1, t.unsqueeze(1)).squeeze(1);
  const Tensor rows =
      ops::mul(ops::neg(picked),
               device_row_weights(target, o.ignore_index, Reduction::none, log_probs.dtype()));
  if (o.reduction == Reduction::none) return rows;
  const Tensor total = ops::sum(rows);
  if (o.reduction == Reduction::sum) return total;
  return ops::div(total,
                  ops::sum(ops::ne(target, static_cast<double>(o.ignore_index)).to(rows.dtype())));
}

Tensor CudaBackend::nll_loss_backward(const Tensor& grad, const Shape& input_shape,
                                      const Tensor& target, const NllLossOptions& o) {
  const char* op = "nll_loss_backward";
  STOKE_CHECK(input_shape.size() == 2 && target.numel() == input_shape[0], op,
              "expected input shape (N, C) with N = ", target.numel(), ", got ", input_shape);
  const Tensor t = device_targets(op, *this, target, input_shape[1], o.ignore_index);
  // -grad * weight of each row, scattered into its target column.
  const Tensor rows =
      ops::mul(ops::neg(grad.detach()),
               device_row_weights(target, o.ignore_index, o.reduction, grad.dtype()));
  const Tensor g = rows.dim() == 0 ? rows.expand({input_shape[0]}) : rows;
  return ops::gather_backward(g.contiguous().unsqueeze(1), 1, t.unsqueeze(1), input_shape);
}

Tensor CudaBackend::mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  const Tensor d = ops::sub(input.detach(), target.detach());
  const Tensor sq = ops::mul(d, d);
  return reduction == Reduction::none  ? sq
         : reduction == Reduction::sum ? ops::sum(sq)
                                       : ops::mean(sq);
}

Tensor CudaBackend::mse_loss_backward(const Tensor& grad, const Tensor& input, const Tensor& target,
                                      Reduction reduction) {
  // 2 (x - y) g, g a one-element tensor (broadcast) unless reduction is none; / N for mean.
  Tensor g = reduction == Reduction::none ? grad.detach() : grad.detach().reshape({});
  if (reduction == Reduction::mean) g = ops::div(g, static_cast<double>(input.numel()));
  return ops::mul(ops::mul(ops::sub(input.detach(), target.detach()), 2.0), g);
}

}  // namespace stoke::ops::cuda_glue
