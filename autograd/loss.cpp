#include "autograd/loss.h"

#include "autograd/autocast.h"
#include "autograd/elementwise.h"
#include "autograd/function.h"
#include "autograd/index.h"
#include "autograd/reduce.h"
#include "autograd/softmax.h"
#include "ops/elementwise.h"
#include "ops/index.h"
#include "ops/reduce.h"

namespace stoke {

using autograd::GradList;
using autograd::NeedList;

namespace {

// A class-indexed loss on rows (M, C) given as `rows_loss`, applied to the dense or one-sample
// shapes through ops::class_rows (whose permute and copy are differentiable), with reduction
// none's result in the caller's shape.
template <class RowsLoss>
Tensor on_class_rows(const char* op, const Tensor& input, const char* input_name,
                     const Tensor& target, Reduction reduction, RowsLoss rows_loss) {
  if (input.defined() && input.dim() == 2) return rows_loss(input, target);
  const ops::ClassRows r = ops::class_rows(op, input, input_name, target);
  const Tensor loss = rows_loss(r.input, r.target);
  return reduction == Reduction::none ? loss.reshape(r.loss_shape) : loss;
}

// Losses with per-class weights, composed from differentiable ops with torch's formula: a row
// is weight[t] * -log_probs[t], label smoothing adds eps / C * sum_c weight[c] * -log_probs[c]
// (and scales the first term by 1 - eps), ignored rows are 0, and mean divides by the counted
// rows' total weight. No gradient reaches the weight (torch does not differentiate it either).
Tensor weighted_class_loss(const char* op, const Tensor& log_probs, const Tensor& target,
                           const Tensor& weight, Reduction reduction, int64_t ignore_index,
                           double label_smoothing) {
  const int64_t c = log_probs.size(1);
  STOKE_CHECK(weight.dim() == 1 && weight.size(0) == c, op, "expected weight of shape [", c,
              "] (one per class) for input of shape ", log_probs.shape(), ", got shape ",
              weight.shape());
  STOKE_CHECK(weight.dtype() == log_probs.dtype() && weight.device() == log_probs.device(), op,
              "expected weight of dtype ", log_probs.dtype(), " on ", log_probs.device(),
              " like the input, got ", weight.dtype(), " on ", weight.device());
  const Tensor t = ops::class_targets(op, target, c, ignore_index);
  const Tensor counted = ops::ne(target, static_cast<double>(ignore_index)).to(log_probs.dtype());
  const Tensor w = weight.detach();
  const Tensor row_weight = ops::mul(ops::index_select(w, 0, t), counted);
  Tensor rows = mul(neg(gather(log_probs, 1, t.unsqueeze(1)).squeeze(1)), row_weight);
  if (label_smoothing > 0) {
    const Tensor smooth = mul(neg(sum(mul(log_probs, w.unsqueeze(0)), {1})), counted);
    rows = add(mul(rows, 1 - label_smoothing), mul(smooth, label_smoothing / c));
  }
  if (reduction == Reduction::none) return rows;
  if (reduction == Reduction::sum) return sum(rows);
  return div(sum(rows), ops::sum(row_weight));
}

// The fused kernel pair on (N, C) rows.
Tensor fused_cross_entropy(const Tensor& logits, const Tensor& target,
                           const CrossEntropyOptions& options) {
  ops::CrossEntropyForward f = ops::cross_entropy_forward(logits, target, options);
  if (autograd::any_requires_grad({logits}))
    autograd::record("CrossEntropyBackward", {logits}, {f.loss},
                     [x = logits.detach(), t = target.detach(), lse = f.lse, options](
                         const GradList& g, const NeedList&) {
                       return GradList{ops::cross_entropy_backward(g[0], x, t, lse, options)};
                     });
  return f.loss;
}

Tensor plain_nll_loss(const Tensor& log_probs, const Tensor& target,
                      const NllLossOptions& options) {
  Tensor y = ops::nll_loss(log_probs, target, options);
  if (autograd::any_requires_grad({log_probs}))
    autograd::record("NllLossBackward", {log_probs}, {y},
                     [shape = log_probs.shape(), t = target.detach(), options](const GradList& g,
                                                                               const NeedList&) {
                       return GradList{ops::nll_loss_backward(g[0], shape, t, options)};
                     });
  return y;
}

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& target,
                     const CrossEntropyOptions& options) {
  STOKE_AUTOCAST("cross_entropy", cross_entropy, logits, target, options);
  const char* op = "cross_entropy";
  return on_class_rows(
      op, logits, "logits", target, options.reduction, [&](const Tensor& x, const Tensor& t) {
        if (!options.weight.defined()) return fused_cross_entropy(x, t, options);
        STOKE_CHECK(options.label_smoothing >= 0 && options.label_smoothing <= 1, op,
                    "expected label_smoothing in [0, 1], got ", options.label_smoothing);
        return weighted_class_loss(op, log_softmax(x, 1), t, options.weight, options.reduction,
                                   options.ignore_index, options.label_smoothing);
      });
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const NllLossOptions& options) {
  STOKE_AUTOCAST("nll_loss", nll_loss, log_probs, target, options);
  const char* op = "nll_loss";
  return on_class_rows(op, log_probs, "log_probs", target, options.reduction,
                       [&](const Tensor& x, const Tensor& t) {
                         if (!options.weight.defined()) return plain_nll_loss(x, t, options);
                         return weighted_class_loss(op, x, t, options.weight, options.reduction,
                                                    options.ignore_index, 0.0);
                       });
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  STOKE_AUTOCAST("mse_loss", mse_loss, input, target, reduction);
  Tensor y = ops::mse_loss(input, target, reduction);
  if (autograd::any_requires_grad({input, target}))
    autograd::record("MseLossBackward", {input, target}, {y},
                     [x = input.detach(), t = target.detach(), reduction](const GradList& g,
                                                                          const NeedList& needs) {
                       GradList out(2);
                       if (needs[0]) out[0] = ops::mse_loss_backward(g[0], x, t, reduction);
                       if (needs[1]) out[1] = ops::mse_loss_backward(g[0], t, x, reduction);
                       return out;
                     });
  return y;
}

}  // namespace stoke
