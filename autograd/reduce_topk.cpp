// topk as k argmax passes: each pass takes the row's extremum and masks it out. For the small k
// it serves (top-5 accuracy) this is k cheap reductions on any device, where a sort would need a
// kernel of its own per backend.
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
  // Work on the largest: the smallest are the largest of -x. Picked entries become -inf; a
  // position along `dim` (0..n-1, broadcast) finds them.
  Tensor work = options.largest ? x.detach().clone() : ops::neg(x.detach());
  Shape pos_shape(static_cast<size_t>(x.dim()), 1);
  pos_shape[static_cast<size_t>(dim)] = n;
  const Tensor position =
      arange(0, static_cast<double>(n), 1, {.dtype = DType::i64}).reshape(pos_shape).to(x.device());
  std::vector<Tensor> picks;
  picks.reserve(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) {
    const Tensor best = ops::argmax(work, dim, /*keepdim=*/true);
    picks.push_back(best);
    if (i + 1 < k)
      work =
          ops::where(ops::eq(position, best),
                     full({}, -INFINITY, {.dtype = work.dtype(), .device = work.device()}), work);
  }
  const Tensor indices = ops::cat(picks, dim);
  return {gather(x, dim, indices), indices};
}

}  // namespace stoke
