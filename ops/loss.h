// The kernels behind stoke::cross_entropy, nll_loss and mse_loss (autograd/loss.h, documented
// there): the ops:: functions of the same names take the same arguments and compute the same
// results without recording autograd, except per-class weights, which only the stoke:: versions
// take. Declared here: the option types (in namespace stoke), and what only ops:: has: the shape
// helpers, the fused cross-entropy forward and the backward kernels.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace stoke {

// The option types live in namespace stoke (and are re-exported in ops) so that an unqualified
// call such as cross_entropy(x, t, opts) does not also find ops::cross_entropy through
// argument-dependent lookup.

// How per-element losses are combined.
enum class Reduction { none, mean, sum };

struct CrossEntropyOptions {
  Reduction reduction = Reduction::mean;
  // eps: the target distribution is (1 - eps) * one_hot + eps / C.
  double label_smoothing = 0.0;
  // Rows whose target equals this contribute no loss and no gradient, and are not counted by mean.
  int64_t ignore_index = -100;
  // Per-class weights (C), as torch's `weight`: a row counts weight[target] times, label smoothing
  // weighs class c by weight[c], and mean divides by the counted rows' total weight. A constant
  // (no gradient reaches it, as in torch). stoke::cross_entropy takes it; the fused kernels in
  // ops:: do not and say so.
  Tensor weight{};
};

struct NllLossOptions {
  Reduction reduction = Reduction::mean;
  int64_t ignore_index = -100;
  // Per-class weights (C), as in CrossEntropyOptions; stoke::nll_loss takes it, ops:: does not.
  Tensor weight{};
};

namespace ops {

using stoke::CrossEntropyOptions;
using stoke::NllLossOptions;
using stoke::Reduction;

// Dense prediction and single samples as torch takes them: input (N, C, d1, ..., dk) with target
// (N, d1, ..., dk), or (C) with a 0-dim target, seen as rows (M, C) and (M) (class dim moved
// last: a copy); (N, C) with (N) passes through. loss_shape is what Reduction::none returns:
// (N, d1, ..., dk), (N), or () for one sample. Checks the shapes and that target is i64.
struct ClassRows {
  Tensor input;
  Tensor target;
  Shape loss_shape;
};
ClassRows class_rows(const char* op, const Tensor& input, const char* input_name,
                     const Tensor& target);
// `target` (M) with ignored rows set to class 0, after checking every other value is in
// [0, classes) (on the CPU at once; on other devices at the next synchronization), naming `op`.
Tensor class_targets(const char* op, const Tensor& target, int64_t classes, int64_t ignore_index);
// One pass per row; the shapes of class_rows. Only cross_entropy_forward and
// cross_entropy_backward, the fused pair, take (N, C) alone.
Tensor cross_entropy(const Tensor& logits, const Tensor& target,
                     const CrossEntropyOptions& options = {});

// The forward result plus what the backward needs: log-sum-exp of each row (N), in logits' dtype.
struct CrossEntropyForward {
  Tensor loss;
  Tensor lse;
};
CrossEntropyForward cross_entropy_forward(const Tensor& logits, const Tensor& target,
                                          const CrossEntropyOptions& options = {});

// Gradient w.r.t. logits: (softmax - (1 - eps) * one_hot - eps / C) * scale, zero on ignored rows,
// where scale is grad (sum), grad / count (mean) or grad[i] (none). `lse` from the forward.
Tensor cross_entropy_backward(const Tensor& grad, const Tensor& logits, const Tensor& target,
                              const Tensor& lse, const CrossEntropyOptions& options = {});

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const NllLossOptions& options = {});
// Gradient w.r.t. log_probs (of `input_shape`, `dtype`): -scale at [i, target[i]], 0 elsewhere.
Tensor nll_loss_backward(const Tensor& grad, const Shape& input_shape, const Tensor& target,
                         const NllLossOptions& options = {});

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);
// Gradient w.r.t. input: 2 (input - target) * scale (the gradient w.r.t. target is its negation:
// call with the arguments swapped).
Tensor mse_loss_backward(const Tensor& grad, const Tensor& input, const Tensor& target,
                         Reduction reduction = Reduction::mean);

}  // namespace ops
}  // namespace stoke
