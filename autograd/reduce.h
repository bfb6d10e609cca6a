// Differentiable reductions: sum, mean, var, std and logsumexp over any set of dims, and max/min
// along a dim or over all elements (the gradient flows to the first extremal element). argmax and
// argmin are re-exported from ops (not differentiable; documented in ops/reduce.h).
//
// `dims` lists the dims to reduce: empty means all dims, negative dims wrap, a repeated dim is an
// error. With keepdim the reduced dims stay as size 1. f32 sums accumulate in f32 lanes over
// short blocks whose results are added in f64, so a sum of 1e6 values is accurate to ~1e-7.
// Results are deterministic for a given thread count.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/reduce.h"

namespace stoke {

// Sum over `dims`. f32/f64 keep their dtype; integer inputs (i32, i64, u8) accumulate in and
// return i64, like torch.sum (not differentiable).
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
// Arithmetic mean over `dims` (f32/f64).
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
// Variance over `dims` with divisor N - correction (1: Bessel's unbiased estimate, 0: biased),
// computed in two passes (mean, then squared deviations) for numerical stability.
Tensor var(const Tensor& x, const std::vector<int64_t>& dims = {}, int64_t correction = 1,
           bool keepdim = false);
// Standard deviation over `dims`: sqrt(var) with divisor N - correction (torch.std).
Tensor std(const Tensor& x, const std::vector<int64_t>& dims = {}, int64_t correction = 1,
           bool keepdim = false);
// log(sum(exp(x))) over `dims` (empty: all) without overflow: the maximum is subtracted first
// (torch.logsumexp); rows of -inf give -inf, an empty reduction -inf. Floating inputs.
Tensor logsumexp(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
// Maximum / minimum along `dim`; the gradient goes to the first extremal element.
Tensor max(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor min(const Tensor& x, int64_t dim, bool keepdim = false);
// Maximum / minimum over all elements, as a 0-dim tensor (error for an empty tensor); the gradient
// goes to the first extremal element.
Tensor max(const Tensor& x);
Tensor min(const Tensor& x);

using ops::argmax;
using ops::argmin;
using ops::ValuesIndices;
// Values (differentiable) and i64 positions of the maximum / minimum along `dim`; the first one
// wins ties, NaN wins over numbers (like PyTorch).
ValuesIndices max_with_indices(const Tensor& x, int64_t dim, bool keepdim = false);
ValuesIndices min_with_indices(const Tensor& x, int64_t dim, bool keepdim = false);
// The k largest (or smallest) entries along `dim`, in order, and their indices (torch.topk with
// sorted=True: NaN ranks above +inf, first for largest and last for smallest); equal values come
// in ascending index order, each index once (docs/design-notes.md). Values are differentiable (a
// gather). Composed of k selection passes, so it suits small k (top-5 of logits), on every device.
struct TopkOptions {
  int64_t dim = -1;
  bool largest = true;
};
ValuesIndices topk(const Tensor& x, int64_t k, const TopkOptions& options = {});

}  // namespace stoke
