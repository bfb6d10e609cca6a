#include "autograd/reduce.h"

#include <cmath>

#include "autograd/autocast.h"
#include "autograd/elementwise.h"
#include "autograd/function.h"
#include "ops/creation.h"
#include "ops/elementwise.h"

namespace stoke {

using autograd::GradList;
using autograd::NeedList;

namespace {

// sum and mean: the forward kernel, and a backward from the input's shape alone.
template <Tensor (*Forward)(const Tensor&, const std::vector<int64_t>&, bool),
          Tensor (*Backward)(const Tensor&, const Shape&, const std::vector<int64_t>&, bool)>
Tensor sum_like(const char* node, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  Tensor y = Forward(x, dims, keepdim);
  if (autograd::any_requires_grad({x}))
    autograd::record(node, {x}, {y},
                     [shape = x.shape(), dims, keepdim](const GradList& g, const NeedList&) {
                       return GradList{Backward(g[0], shape, dims, keepdim)};
                     });
  return y;
}

}  // namespace

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  STOKE_AUTOCAST("sum", sum, x, dims, keepdim);
  return sum_like<ops::sum, ops::sum_backward>("SumBackward", x, dims, keepdim);
}

Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  STOKE_AUTOCAST("mean", mean, x, dims, keepdim);
  return sum_like<ops::mean, ops::mean_backward>("MeanBackward", x, dims, keepdim);
}

Tensor var(const Tensor& x, const std::vector<int64_t>& dims, int64_t correction, bool keepdim) {
  STOKE_AUTOCAST("var", var, x, dims, correction, keepdim);
  Tensor y = ops::var(x, dims, correction, keepdim);
  if (autograd::any_requires_grad({x}))
    autograd::record(
        "VarBackward", {x}, {y},
        [xd = x.detach(), dims, correction, keepdim](const GradList& g, const NeedList&) {
          return GradList{ops::var_backward(g[0], xd, dims, correction, keepdim)};
        });
  return y;
}

Tensor std(const Tensor& x, const std::vector<int64_t>& dims, int64_t correction, bool keepdim) {
  return sqrt(var(x, dims, correction, keepdim));
}

Tensor logsumexp(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  const char* op = "logsumexp";
  STOKE_CHECK(is_floating(x.dtype()), op, "expected a floating tensor, got ", x.dtype());
  std::vector<int64_t> reduce_dims = dims;
  if (reduce_dims.empty())
    for (int64_t d = 0; d < x.dim(); ++d) reduce_dims.push_back(d);
  const Shape kept = ops::reduced_shape(x.shape(), reduce_dims, true, op);
  // The shift: the maximum over the reduced dims, a constant (its gradient would cancel), and 0
  // where it is infinite (a row of -inf stays -inf; +inf stays +inf) or the reduction is empty.
  Tensor m;
  if (x.numel() == 0 || x.dim() == 0) {
    m = zeros(kept, {.dtype = x.dtype(), .device = x.device()});
  } else {
    m = x.detach();
    for (int64_t d : reduce_dims) m = ops::max(m, d, true);
    m = ops::where(ops::eq(ops::abs(m), INFINITY), zeros_like(m), m);
  }
  Tensor y = log(sum(exp(x - m), reduce_dims, true)) + m;
  if (!keepdim) y = y.reshape(ops::reduced_shape(x.shape(), reduce_dims, false, op));
  return y;
}

namespace {
ValuesIndices record_extremum(const char* name, const Tensor& x, ValuesIndices r, int64_t dim,
                              bool keepdim) {
  if (autograd::any_requires_grad({x}))
    autograd::record(
        name, {x}, {r.values},
        [idx = r.indices, shape = x.shape(), dim, keepdim](const GradList& g, const NeedList&) {
          return GradList{ops::index_reduce_backward(g[0], idx, shape, dim, keepdim)};
        });
  return r;
}

// max(x)/min(x) over all elements: like torch, the gradient is shared evenly among every element
// equal to the result (all NaNs when the result is NaN), not sent to the first one.
Tensor record_extremum_all(const char* name, const Tensor& x, const Tensor& value) {
  if (autograd::any_requires_grad({x}))
    autograd::record(name, {x}, {value},
                     [xd = x.detach(), value = value.detach()](const GradList& g, const NeedList&) {
                       const DType dt = xd.dtype();
                       const Tensor hit = ops::maximum(
                           ops::eq(xd, value).to(dt),
                           ops::mul(ops::ne(xd, xd).to(dt), ops::ne(value, value).to(dt)));
                       return GradList{ops::mul(hit, ops::div(g[0], ops::sum(hit)))};
                     });
  return value;
}
}  // namespace

ValuesIndices max_with_indices(const Tensor& x, int64_t dim, bool keepdim) {
  return record_extremum("MaxBackward", x, ops::max_with_indices(x, dim, keepdim), dim, keepdim);
}
ValuesIndices min_with_indices(const Tensor& x, int64_t dim, bool keepdim) {
  return record_extremum("MinBackward", x, ops::min_with_indices(x, dim, keepdim), dim, keepdim);
}
Tensor max(const Tensor& x, int64_t dim, bool keepdim) {
  return max_with_indices(x, dim, keepdim).values;
}
Tensor min(const Tensor& x, int64_t dim, bool keepdim) {
  return min_with_indices(x, dim, keepdim).values;
}
Tensor max(const Tensor& x) {
  return record_extremum_all("MaxBackward", x, ops::max(x));
}
Tensor min(const Tensor& x) {
  return record_extremum_all("MinBackward", x, ops::min(x));
}

}  // namespace stoke
