// The losses' entry points: checks, then the backend of the tensors' device (ops/cpu/loss.cpp,
// ops/cuda/loss.cpp). The backends check nll_loss's dtypes, shapes and targets themselves (the
// CPU in one pass over the targets, CUDA at the next synchronization).
#include "ops/loss.h"

#include "ops/backend.h"
#include "ops/check.h"

namespace stoke::ops {
namespace {

// The fused kernels have no class weights: stoke::cross_entropy and stoke::nll_loss compose them.
void check_no_weight(const char* op, const Tensor& weight) {
  STOKE_CHECK(!weight.defined(), op,
              "class weights are taken by the differentiable stoke::cross_entropy and "
              "stoke::nll_loss, not by the fused ops:: kernels");
}

}  // namespace

ClassRows class_rows(const char* op, const Tensor& input, const char* input_name,
                     const Tensor& target) {
  STOKE_CHECK(input.defined() && target.defined(), op, "expected defined ", input_name,
              " and target");
  STOKE_CHECK(target.dtype() == DType::i64, op,
              "expected target of dtype i64 (class indices), got ", target.dtype());
  const int64_t d = input.dim();
  STOKE_CHECK(d >= 1, op, "expected ", input_name,
              " of shape (N, C), (N, C, d1, ...) or (C), got shape ", input.shape());
  if (d == 1) {
    STOKE_CHECK(target.dim() == 0, op, "expected a 0-dim target for ", input_name, " of shape ",
                input.shape(), " (one sample), got target of shape ", target.shape());
    return {input.unsqueeze(0), target.reshape({1}), {}};
  }
  Shape want{input.size(0)};
  for (int64_t k = 2; k < d; ++k) want.push_back(input.size(k));
  STOKE_CHECK(target.shape() == want, op, "expected target of shape ", want, " for ", input_name,
              " of shape ", input.shape(), d == 2 ? " (N, C)" : " (N, C, d1, ...)",
              ", got target of shape ", target.shape());
  if (d == 2) return {input, target, want};
  std::vector<int64_t> classes_last{0};
  for (int64_t k = 2; k < d; ++k) classes_last.push_back(k);
  classes_last.push_back(1);
  return {input.permute(classes_last).reshape({-1, input.size(1)}), target.reshape({-1}), want};
}

CrossEntropyForward cross_entropy_forward(const Tensor& logits, const Tensor& target,
                                          const CrossEntropyOptions& options) {
  const char* op = "cross_entropy";
  check_no_weight(op, options.weight);
  return dispatch(op, {&logits, &target}).cross_entropy_forward(logits, target, options);
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target,
                     const CrossEntropyOptions& options) {
  const ClassRows r = class_rows("cross_entropy", logits.detach(), "logits", target);
  const Tensor loss = cross_entropy_forward(r.input, r.target, options).loss;
  return options.reduction == Reduction::none ? loss.reshape(r.loss_shape) : loss;
}

Tensor cross_entropy_backward(const Tensor& grad, const Tensor& logits, const Tensor& target,
                              const Tensor& lse, const CrossEntropyOptions& options) {
  const char* op = "cross_entropy_backward";
  check_no_weight(op, options.weight);
  return dispatch(op, {&grad, &logits, &target, &lse})
      .cross_entropy_backward(grad, logits, target, lse, options);
}

Tensor class_targets(const char* op, const Tensor& target, int64_t classes, int64_t ignore_index) {
  return dispatch(op, {&target}).class_targets(op, target, classes, ignore_index);
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const NllLossOptions& options) {
  const char* op = "nll_loss";
  check_no_weight(op, options.weight);
  if (log_probs.defined() && log_probs.dim() != 2) {
    const ClassRows r = class_rows(op, log_probs.detach(), "log_probs", target);
    const Tensor loss = nll_loss(r.input, r.target, options);
    return options.reduction == Reduction::none ? loss.reshape(r.loss_shape) : loss;
  }
  return dispatch(op, {&log_probs, &target}).nll_loss(log_probs, target, options);
}

Tensor nll_loss_backward(const Tensor& grad, const Shape& input_shape, const Tensor& target,
                         const NllLossOptions& options) {
  const char* op = "nll_loss_backward";
  check_no_weight(op, options.weight);
  return dispatch(op, {&grad, &target}).nll_loss_backward(grad, input_shape, target, options);
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  const char* op = "mse_loss";
  check_same_dtype(op, input, "input", target, "target");
  STOKE_CHECK(input.shape() == target.shape(), op,
              "expected input and target of the same shape, got input ", input.shape(),
              " and target ", target.shape());
  return dispatch(op, {&input, &target}).mse_loss(input, target, reduction);
}

Tensor mse_loss_backward(const Tensor& grad, const Tensor& input, const Tensor& target,
                         Reduction reduction) {
  const char* op = "mse_loss_backward";
  check_same_dtype(op, input, "input", target, "target");
  check_same_dtype(op, grad, "grad", input, "input");
  check_shape(op, target, "target", input.shape());
  if (reduction == Reduction::none)
    check_shape(op, grad, "grad", input.shape());
  else
    STOKE_CHECK(grad.numel() == 1, op, "expected a one-element grad, got shape ", grad.shape());
  return dispatch(op, {&grad, &input, &target}).mse_loss_backward(grad, input, target, reduction);
}

}  // namespace stoke::ops
