// The losses' entry points: checks, then the backend of the tensors' device (ops/cpu/loss.cpp,
// ops/cuda/loss.cpp) for the fused cross entropy. nll_loss and mse_loss are composed here from
// other ops (gather, where, reductions) on devices; the CPU runs its own one-pass kernels for them
// (ops/cpu/loss_kernels.h).
#include "ops/loss.h"

#include "ops/backend.h"
#include "ops/check.h"
#include "ops/cpu/loss_kernels.h"
#include "ops/creation.h"
#include "ops/elementwise.h"
#include "ops/index.h"
#include "ops/reduce.h"

namespace stoke::ops {
namespace {

// The fused kernels have no class weights: stoke::cross_entropy and stoke::nll_loss compose them.
void check_no_weight(const char* op, const Tensor& weight) {
  STOKE_CHECK(!weight.defined(), op,
              "class weights are taken by the differentiable stoke::cross_entropy and "
              "stoke::nll_loss, not by the fused ops:: kernels");
}

bool on_cpu(Backend& k) {
  return k.type() == Device::Type::cpu;
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

// --- nll and mse on other devices: composed from their kernels (gather, where, reductions) ----

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

}  // namespace

Tensor class_targets(const char* op, const Tensor& target, int64_t classes, int64_t ignore_index) {
  Backend& k = dispatch(op, {&target});
  if (on_cpu(k)) return cpu::class_targets(op, target, classes, ignore_index);
  return device_targets(op, k, target, classes, ignore_index);
}

namespace {

// Per-row weights of the loss: 1 for counted rows, 0 for ignored ones, divided by the count for
// mean (on the device, no read-back).
Tensor device_row_weights(const Tensor& target, int64_t ignore_index, Reduction reduction,
                          DType dtype) {
  Tensor w = ne(target, static_cast<double>(ignore_index)).to(dtype);
  if (reduction == Reduction::mean) w = div(w, sum(w));
  return w;
}

Tensor device_nll_loss(Backend& k, const Tensor& log_probs, const Tensor& target,
                       const NllLossOptions& o) {
  const char* op = "nll_loss";
  check_dim(op, log_probs, "log_probs", 2, "(N, C)");
  STOKE_CHECK(target.dim() == 1 && target.size(0) == log_probs.size(0), op,
              "expected target of shape [", log_probs.size(0), "] for log_probs of shape ",
              log_probs.shape(), ", got target of shape ", target.shape());
  const Tensor t = device_targets(op, k, target, log_probs.size(1), o.ignore_index);
  const Tensor picked = gather(log_probs.detach(), 1, t.unsqueeze(1)).squeeze(1);
  const Tensor rows = mul(
      neg(picked), device_row_weights(target, o.ignore_index, Reduction::none, log_probs.dtype()));
  if (o.reduction == Reduction::none) return rows;
  const Tensor total = sum(rows);
  if (o.reduction == Reduction::sum) return total;
  return div(total, sum(ne(target, static_cast<double>(o.ignore_index)).to(rows.dtype())));
}

Tensor device_nll_loss_backward(Backend& k, const Tensor& grad, const Shape& input_shape,
                                const Tensor& target, const NllLossOptions& o) {
  const char* op = "nll_loss_backward";
  STOKE_CHECK(input_shape.size() == 2 && target.numel() == input_shape[0], op,
              "expected input shape (N, C) with N = ", target.numel(), ", got ", input_shape);
  const Tensor t = device_targets(op, k, target, input_shape[1], o.ignore_index);
  // -grad * weight of each row, scattered into its target column.
  const Tensor rows = mul(neg(grad.detach()),
                          device_row_weights(target, o.ignore_index, o.reduction, grad.dtype()));
  const Tensor g = rows.dim() == 0 ? rows.expand({input_shape[0]}) : rows;
  return gather_backward(g.contiguous().unsqueeze(1), 1, t.unsqueeze(1), input_shape);
}

}  // namespace

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const NllLossOptions& options) {
  const char* op = "nll_loss";
  check_no_weight(op, options.weight);
  if (log_probs.defined() && log_probs.dim() != 2) {
    const ClassRows r = class_rows(op, log_probs.detach(), "log_probs", target);
    const Tensor loss = nll_loss(r.input, r.target, options);
    return options.reduction == Reduction::none ? loss.reshape(r.loss_shape) : loss;
  }
  Backend& k = dispatch(op, {&log_probs, &target});
  if (on_cpu(k)) return cpu::nll_loss(log_probs, target, options);
  return device_nll_loss(k, log_probs, target, options);
}

Tensor nll_loss_backward(const Tensor& grad, const Shape& input_shape, const Tensor& target,
                         const NllLossOptions& options) {
  const char* op = "nll_loss_backward";
  check_no_weight(op, options.weight);
  Backend& k = dispatch(op, {&grad, &target});
  if (on_cpu(k)) return cpu::nll_loss_backward(grad, input_shape, target, options);
  return device_nll_loss_backward(k, grad, input_shape, target, options);
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  const char* op = "mse_loss";
  check_same_dtype(op, input, "input", target, "target");
  STOKE_CHECK(input.shape() == target.shape(), op,
              "expected input and target of the same shape, got input ", input.shape(),
              " and target ", target.shape());
  if (on_cpu(dispatch(op, {&input, &target}))) return cpu::mse_loss(input, target, reduction);
  const Tensor d = sub(input.detach(), target.detach());
  const Tensor sq = mul(d, d);
  return reduction == Reduction::none ? sq : reduction == Reduction::sum ? sum(sq) : mean(sq);
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
  if (on_cpu(dispatch(op, {&grad, &input, &target})))
    return cpu::mse_loss_backward(grad, input, target, reduction);
  // 2 (x - y) g, g a one-element tensor (broadcast) unless reduction is none; / N for mean.
  Tensor g = reduction == Reduction::none ? grad.detach() : grad.detach().reshape({});
  if (reduction == Reduction::mean) g = div(g, static_cast<double>(input.numel()));
  return mul(mul(sub(input.detach(), target.detach()), 2.0), g);
}

}  // namespace stoke::ops
