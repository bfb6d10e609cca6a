// The elementwise losses (l1, smooth L1, KL divergence, binary cross entropy with and without
// logits), composed of differentiable elementwise ops: one definition for every device, gradients
// by autograd through the pieces. Losses are a small share of a step (one pass over the logits),
// so a fused kernel per loss would buy little; cross_entropy, the one every model uses, has one.
#include <cmath>

#include "autograd/elementwise.h"
#include "autograd/function.h"
#include "autograd/loss.h"
#include "autograd/reduce.h"
#include "ops/creation.h"
#include "ops/elementwise.h"
#include "ops/reduce.h"

namespace stoke {

using autograd::GradList;
using autograd::NeedList;

namespace {

// f16/bf16 losses compute in f32 (their sums and logs lose too much in 16 bits).
Tensor in_f32_if_half(const Tensor& x) {
  return x.dtype() == DType::f16 || x.dtype() == DType::bf16 ? x.to(DType::f32) : x;
}

void check_pair(const char* op, const Tensor& input, const Tensor& target) {
  STOKE_CHECK(input.defined() && target.defined(), op, "expected defined input and target");
  STOKE_CHECK(is_floating(input.dtype()) && is_floating(target.dtype()), op,
              "expected floating input and target, got ", input.dtype(), " and ", target.dtype());
  STOKE_CHECK(input.shape() == target.shape(), op,
              "expected input and target of the same shape, got input ", input.shape(),
              " and target ", target.shape());
}

Tensor reduce(const Tensor& loss, Reduction reduction) {
  switch (reduction) {
    case Reduction::none:
      return loss;
    case Reduction::sum:
      return sum(loss);
    case Reduction::mean:
      break;
  }
  return mean(loss);
}

// A weight broadcast against the loss, as a constant of the loss's dtype.
Tensor weighted(const char* op, const char* name, const Tensor& loss, const Tensor& weight) {
  if (!weight.defined()) return loss;
  STOKE_CHECK(is_floating(weight.dtype()), op, "expected a floating ", name, ", got ",
              weight.dtype());
  return loss * weight.detach().to(loss.dtype());
}

}  // namespace

Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  check_pair("l1_loss", input, target);
  return reduce(abs(in_f32_if_half(input) - in_f32_if_half(target)), reduction);
}

Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction, double beta) {
  const char* op = "smooth_l1_loss";
  check_pair(op, input, target);
  STOKE_CHECK(beta >= 0, op, "expected beta >= 0, got ", beta);
  if (beta == 0) return l1_loss(input, target, reduction);
  const Tensor d = in_f32_if_half(input) - in_f32_if_half(target);
  const Tensor ad = abs(d);
  // The quadratic piece is d * d (not ad * ad): its gradient at d = 0 is 0 without abs's kink.
  const Tensor loss = where(lt(ad.detach(), beta), d * d * (0.5 / beta), ad - 0.5 * beta);
  return reduce(loss, reduction);
}

Tensor kl_div(const Tensor& input, const Tensor& target, const KlDivOptions& options) {
  check_pair("kl_div", input, target);
  const Tensor x = in_f32_if_half(input), t = in_f32_if_half(target);
  Tensor loss;
  if (options.log_target) {
    loss = exp(t) * (t - x);
  } else {
    // t log t is 0 where t = 0 (torch's xlogy); the log's argument is 1 there, so neither the
    // forward nor the backward meets log(0).
    const Tensor positive = gt(t.detach(), 0.0);
    const Tensor safe_t = where(positive, t, ones_like(t.detach()));
    loss = t * log(safe_t) - t * x;
  }
  switch (options.reduction) {
    case KlDivReduction::none:
      return loss;
    case KlDivReduction::sum:
      return sum(loss);
    case KlDivReduction::mean:
      return mean(loss);
    case KlDivReduction::batchmean:
      break;
  }
  return input.dim() == 0 ? sum(loss) : sum(loss) / static_cast<double>(input.size(0));
}

Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const BceOptions& options) {
  const char* op = "binary_cross_entropy";
  check_pair(op, input, target);
  STOKE_CHECK(!options.pos_weight.defined(), op,
              "takes no pos_weight (binary_cross_entropy_with_logits does)");
  const Tensor x = in_f32_if_half(input), t = in_f32_if_half(target);
  if (x.device().is_cpu() && x.numel() > 0) {  // on a device this check would cost a sync
    const double lo = ops::min(x.detach()).item(), hi = ops::max(x.detach()).item();
    STOKE_CHECK(lo >= 0 && hi <= 1, op, "expected every input in [0, 1] (probabilities), got [", lo,
                ", ", hi, "]; binary_cross_entropy_with_logits takes logits");
  }
  // Its own node rather than autograd through the logs: at a probability of exactly 0 or 1 the
  // composition's gradient is 0 * inf, and torch's formulas define the values there (the input
  // gradient (x - t) / max(x (1 - x), 1e-12), the target's log(1 - x) - log(x), +-inf).
  const Tensor xd = x.detach(), td = t.detach();
  const Tensor log_x = ops::clamp(ops::log(xd), -100.0, std::nullopt);
  const Tensor log_1mx = ops::clamp(ops::log(ops::sub(1.0, xd)), -100.0, std::nullopt);
  Tensor loss = ops::neg(ops::add(ops::mul(td, log_x), ops::mul(ops::sub(1.0, td), log_1mx)));
  if (autograd::any_requires_grad({x, t}))
    autograd::record(
        "BinaryCrossEntropyBackward", {x, t}, {loss},
        [xd, td](const GradList& g, const NeedList& needs) {
          GradList out(2);
          if (needs[0])
            out[0] = ops::div(ops::mul(g[0], ops::sub(xd, td)),
                              ops::clamp(ops::mul(xd, ops::sub(1.0, xd)), 1e-12, std::nullopt));
          if (needs[1])
            out[1] = ops::mul(g[0], ops::sub(ops::log(ops::sub(1.0, xd)), ops::log(xd)));
          return out;
        });
  return reduce(weighted(op, "weight", loss, options.weight), options.reduction);
}

Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        const BceOptions& options) {
  const char* op = "binary_cross_entropy_with_logits";
  check_pair(op, input, target);
  const Tensor x = in_f32_if_half(input), t = in_f32_if_half(target);
  // softplus(-x) = log(1 + exp(-x)) without overflow: -log(sigmoid(x)) for x >= 0 and
  // -x - log(sigmoid(-x)) for x < 0, each branch fed only its own half of x (the other half 0) so
  // that neither meets log(0) in the forward or the backward, and x = 0 gets the gradient -1/2.
  const Tensor nonneg = ge(x.detach(), 0.0);
  const Tensor zero = zeros_like(x.detach());
  const Tensor x_pos = where(nonneg, x, zero), x_neg = where(nonneg, zero, x);
  const Tensor softplus_neg_x = where(nonneg, -log(sigmoid(x_pos)), -x_neg - log(sigmoid(-x_neg)));
  Tensor loss;
  if (options.pos_weight.defined()) {
    STOKE_CHECK(is_floating(options.pos_weight.dtype()), op, "expected a floating pos_weight, got ",
                options.pos_weight.dtype());
    const Tensor p = options.pos_weight.detach().to(x.dtype());
    loss = (1.0 - t) * x + (1.0 + (p - 1.0) * t) * softplus_neg_x;
  } else {
    loss = (1.0 - t) * x + softplus_neg_x;
  }
  return reduce(weighted(op, "weight", loss, options.weight), options.reduction);
}

}  // namespace stoke
