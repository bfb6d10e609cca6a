// topk as k selection passes: each pass finds the row's next entry in topk's order and marks it
// taken. For the small k it serves (top-5 accuracy) this is a few elementwise ops and two
// reductions per pass on any device, where a sort would need a kernel of its own per backend.
//
// The order is torch.topk's (sorted=True): largest = NaN first, then descending values; smallest =
// ascending values, NaN last (torch ranks NaN above +inf). Equal values (-0 and 0 included, several
// NaN, several -inf or +inf) are taken in ascending index order: torch leaves the order of ties
// unspecified (its CPU quickselect returns [2, 4, 1] for three equal maxima at 1, 2 and 4), and one
// fixed rule gives the same indices on every device and thread count.
//
// A pass: m = the extremum of the remaining non-NaN values; every remaining position gets a score
// (largest: 3 for NaN, 2 for a value equal to m; smallest: 2 for a value equal to m, 1 for NaN;
// taken or other: 0), and the pass takes the first position of the highest score (argmax returns
// the first maximum). A taken position scores 0 whatever its value, so a row of several -inf (or
// NaN) yields each of their indices once.
#include <cmath>

#include "autograd/index.h"
#include "autograd/reduce.h"
#include "ops/creation.h"
#include "ops/elementwise.h"
#include "ops/index.h"
#include "ops/reduce.h"

namespace stoke {

ValuesIndices topk(const Tensor& x, int64_t k, const TopkOptions& options) {
  const char* op = "topk";
  STOKE_CHECK(x.defined() && x.dim() >= 1, op, "expected a tensor with at least one dim");
  STOKE_CHECK(is_floating(x.dtype()), op, "expected a floating tensor, got ", x.dtype());
  const int64_t dim = options.dim < 0 ? options.dim + x.dim() : options.dim;
  STOKE_CHECK(dim >= 0 && dim < x.dim(), op, "dim ", options.dim, " is out of range for shape ",
              x.shape());
  const int64_t n = x.size(dim);
  STOKE_CHECK(k >= 0 && k <= n, op, "k = ", k, " must be in [0, ", n, "] (dim ", dim, " of shape ",
              x.shape(), ")");
  Shape out_shape = x.shape();
  out_shape[static_cast<size_t>(dim)] = k;
  if (k == 0 || x.numel() == 0) {
    const Tensor idx = zeros(out_shape, {.dtype = DType::i64, .device = x.device()});
    return {gather(x, dim, idx), idx};
  }
  const TensorOptions xo{.dtype = x.dtype(), .device = x.device()};
  const auto scalar = [&](double v) { return full({}, v, xo); };
  const Tensor zero = scalar(0);
  const Tensor v = x.detach();
  const Tensor is_nan = ops::ne(v, v);
  // The extremum of the remaining non-NaN values ignores the others through this fill.
  const Tensor fill = scalar(options.largest ? -INFINITY : INFINITY);
  const Tensor nan_score = scalar(options.largest ? 3 : 1), equal_score = scalar(2);
  Shape pos_shape(static_cast<size_t>(x.dim()), 1);
  pos_shape[static_cast<size_t>(dim)] = n;
  const Tensor position =
      arange(0, static_cast<double>(n), 1, {.dtype = DType::i64, .device = x.device()})
          .reshape(pos_shape);  // made on the device: an upload would wait for it
  // All-false and all-true masks of the position's shape, broadcast by where.
  const Tensor no = ops::ne(position, position), yes = ops::eq(position, position);
  Tensor remaining = ops::where(is_nan, yes, yes);  // of x's shape
  std::vector<Tensor> picks;
  picks.reserve(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) {
    const Tensor candidates = ops::where(is_nan, no, remaining);
    const Tensor masked = ops::where(candidates, v, fill);
    const Tensor m = options.largest ? ops::max(masked, dim, /*keepdim=*/true)
                                     : ops::min(masked, dim, /*keepdim=*/true);
    const Tensor score = ops::where(
        remaining, ops::where(is_nan, nan_score, ops::where(ops::eq(v, m), equal_score, zero)),
        zero);
    const Tensor best = ops::argmax(score, dim, /*keepdim=*/true);
    picks.push_back(best);
    if (i + 1 < k) remaining = ops::where(ops::eq(position, best), no, remaining);
  }
  const Tensor indices = ops::cat(picks, dim);
  return {gather(x, dim, indices), indices};
}

}  // namespace stoke
