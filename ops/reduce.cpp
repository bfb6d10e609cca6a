// The reductions' entry points: checks, then the backend of the tensors' device
// (ops/cpu/reduce.cpp, ops/cuda/reduce.cpp). The all-elements max/min, sum_backward and
// flat_index_backward are composed here from other ops.
#include <algorithm>

#include "ops/backend.h"
#include "ops/check.h"
#include "ops/creation.h"
#include "ops/reduce.h"
#include "ops/reduce_detail.h"

namespace stoke::ops {

namespace reduce_detail {

Tensor reshaped(const Tensor& t, const Shape& shape) {
  const Tensor c = t.contiguous();
  return c.as_strided(shape, contiguous_strides(shape), c.offset());
}

std::vector<bool> reduce_mask(int64_t ndim, const std::vector<int64_t>& dims, const char* op) {
  std::vector<bool> mask(ndim, dims.empty());
  for (int64_t d : dims) {
    const int64_t w = wrap_dim(d, ndim, op);
    if (ndim == 0) continue;
    STOKE_CHECK(!mask[w], op, "dim ", d, " appears more than once in dims ", Shape(dims));
    mask[w] = true;
  }
  return mask;
}

Shape shape_after(const Shape& shape, const std::vector<bool>& mask, bool keepdim) {
  Shape out;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (!mask[d])
      out.push_back(shape[d]);
    else if (keepdim)
      out.push_back(1);
  }
  return out;
}

int64_t reduced_count(const Shape& shape, const std::vector<bool>& mask) {
  int64_t count = 1;
  for (size_t d = 0; d < shape.size(); ++d)
    if (mask[d]) count *= shape[d];
  return count;
}

Tensor grad_keepdim(const Tensor& grad, const Shape& input_shape, const std::vector<bool>& mask,
                    bool keepdim, const char* op) {
  const Shape expect = shape_after(input_shape, mask, keepdim);
  check_shape(op, grad, "grad", expect);
  return reshaped(grad, shape_after(input_shape, mask, true));
}

}  // namespace reduce_detail

using namespace reduce_detail;

namespace {

// max/min along a dim through the backend; `op` (max, argmax, ...) names the op in the checks
// every device shares.
template <bool IsMax>
ValuesIndices extremum(const Tensor& x, int64_t dim, bool keepdim, const char* op) {
  Backend& k = dispatch(op, {&x});
  const int64_t ndim = x.dim();
  const int64_t d = wrap_dim(dim, ndim, op);
  const int64_t n = ndim == 0 ? 1 : x.size(d);
  STOKE_CHECK(n > 0, op, "cannot reduce over dim ", dim, " of size 0 (input shape ", x.shape(),
              ")");
  return IsMax ? k.max_with_indices(x, dim, keepdim) : k.min_with_indices(x, dim, keepdim);
}

template <bool IsMax>
ValuesIndices extremum_all(const Tensor& x, const char* op) {
  STOKE_CHECK(x.numel() > 0, op, "expected a non-empty tensor, got shape ", x.shape());
  ValuesIndices r = extremum<IsMax>(reshaped(x, {x.numel()}), 0, false, op);
  return {reshaped(r.values, {}), reshaped(r.indices, {})};
}

}  // namespace

Shape reduced_shape(const Shape& shape, const std::vector<int64_t>& dims, bool keepdim,
                    const char* op) {
  return shape_after(shape, reduce_mask(static_cast<int64_t>(shape.size()), dims, op), keepdim);
}

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return dispatch("sum", {&x}).sum(x, dims, keepdim);
}

Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return dispatch("mean", {&x}).mean(x, dims, keepdim);
}

Tensor var(const Tensor& x_in, const std::vector<int64_t>& dims, int64_t correction, bool keepdim) {
  const Tensor x = x_in.detach();
  STOKE_CHECK(correction >= 0, "var", "expected correction >= 0, got ", correction);
  reduce_mask(x.dim(), dims, "var");  // checks dims; the backend takes them as given
  return dispatch("var", {&x_in}).var(x, dims, correction, keepdim);
}

ValuesIndices max_with_indices(const Tensor& x, int64_t dim, bool keepdim) {
  return extremum<true>(x, dim, keepdim, "max");
}
ValuesIndices min_with_indices(const Tensor& x, int64_t dim, bool keepdim) {
  return extremum<false>(x, dim, keepdim, "min");
}
Tensor max(const Tensor& x, int64_t dim, bool keepdim) {
  return extremum<true>(x, dim, keepdim, "max").values;
}
Tensor min(const Tensor& x, int64_t dim, bool keepdim) {
  return extremum<false>(x, dim, keepdim, "min").values;
}
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  return extremum<true>(x, dim, keepdim, "argmax").indices;
}
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim) {
  return extremum<false>(x, dim, keepdim, "argmin").indices;
}
Tensor max(const Tensor& x) {
  return extremum_all<true>(x, "max").values;
}
Tensor min(const Tensor& x) {
  return extremum_all<false>(x, "min").values;
}
ValuesIndices max_all_with_index(const Tensor& x) {
  return extremum_all<true>(x, "max");
}
ValuesIndices min_all_with_index(const Tensor& x) {
  return extremum_all<false>(x, "min");
}
Tensor argmax(const Tensor& x) {
  return extremum_all<true>(x, "argmax").indices;
}
Tensor argmin(const Tensor& x) {
  return extremum_all<false>(x, "argmin").indices;
}

// --- backward ----------------------------------------------------------------------------------

Tensor sum_backward(const Tensor& grad, const Shape& input_shape, const std::vector<int64_t>& dims,
                    bool keepdim) {
  // Device independent: a broadcasting copy, which every device's copier does.
  STOKE_CHECK(grad.defined(), "sum_backward", "expected a defined grad");
  const auto mask = reduce_mask(static_cast<int64_t>(input_shape.size()), dims, "sum_backward");
  const Tensor g = grad_keepdim(grad, input_shape, mask, keepdim, "sum_backward");
  Tensor out = empty(input_shape, {.dtype = grad.dtype(), .device = grad.device()});
  copy_strided(out, g.expand(input_shape));
  return out;
}

Tensor mean_backward(const Tensor& grad, const Shape& input_shape, const std::vector<int64_t>& dims,
                     bool keepdim) {
  const auto mask = reduce_mask(static_cast<int64_t>(input_shape.size()), dims, "mean_backward");
  const int64_t count = reduced_count(input_shape, mask);
  return dispatch("mean_backward", {&grad}).mean_backward(grad, input_shape, dims, keepdim, count);
}

Tensor var_backward(const Tensor& grad, const Tensor& x, const std::vector<int64_t>& dims,
                    int64_t correction, bool keepdim) {
  check_same_dtype("var_backward", grad, "grad", x, "input");
  const auto mask = reduce_mask(x.dim(), dims, "var_backward");
  const Tensor g = grad_keepdim(grad, x.shape(), mask, keepdim, "var_backward");
  const int64_t count = reduced_count(x.shape(), mask);
  const double scale = 2.0 / static_cast<double>(std::max<int64_t>(0, count - correction));
  return dispatch("var_backward", {&grad, &x}).var_backward(g, x, dims, scale);
}

Tensor index_reduce_backward(const Tensor& grad, const Tensor& indices, const Shape& input_shape,
                             int64_t dim, bool keepdim) {
  const char* op = "index_reduce_backward";
  STOKE_CHECK(indices.dtype() == DType::i64, op, "expected i64 indices, got ", indices.dtype());
  return dispatch(op, {&grad, &indices})
      .index_reduce_backward(grad, indices, input_shape, dim, keepdim);
}

Tensor flat_index_backward(const Tensor& grad, const Tensor& index, const Shape& input_shape) {
  const char* op = "flat_index_backward";
  dispatch(op, {&grad, &index});  // one device, any
  STOKE_CHECK(grad.numel() == 1, op, "expected a one-element grad, got shape ", grad.shape());
  Tensor out = zeros(input_shape, {.dtype = grad.dtype(), .device = grad.device()});
  const int64_t i = index.to(Device::cpu()).item<int64_t>();
  STOKE_CHECK(i >= 0 && i < out.numel(), op, "index ", i, " out of range for shape ", input_shape);
  copy_strided(reshaped(out, {out.numel()}).narrow(0, i, 1), reshaped(grad, {1}));
  return out;
}

}  // namespace stoke::ops
