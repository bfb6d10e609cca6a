// Reductions on cuda tensors: cuda/kernels/reduce.h (f32, f16, bf16) and the exact i64 sums of
// cuda/kernels/elementwise_integer.h, one launch per run of adjacent reduced dims; var and the
// backward of mean, var and max/min composed from other ops.
#include <algorithm>
#include <cmath>

#include "cuda/kernels/elementwise_integer.h"
#include "cuda/kernels/reduce.h"
#include "ops/creation.h"
#include "ops/cuda/backend.h"
#include "ops/cuda/glue_util.h"
#include "ops/elementwise.h"
#include "ops/index.h"
#include "ops/reduce.h"
#include "ops/reduce_detail.h"

namespace stoke::ops::cuda_glue {
namespace {

// Reduces dim `d` of contiguous x with `op`; indices (i64, same shape as the result) when given.
Tensor reduce_dim(const Tensor& x, int64_t d, cuda::ReduceOp op, Tensor* indices) {
  const Split s = split_at(x, d);
  Shape shape = x.shape();
  shape[static_cast<size_t>(d)] = 1;
  Tensor out = empty_on(shape, x.dtype(), x.device());
  int64_t* idx = nullptr;
  if (indices) {
    *indices = empty_on(shape, DType::i64, x.device());
    idx = indices->data<int64_t>();
  }
  const size_t ws_bytes = cuda::reduce_workspace_bytes(s.outer, s.n, s.inner);
  Tensor workspace =
      ws_bytes ? empty_on({static_cast<int64_t>(ws_bytes)}, DType::u8, x.device()) : Tensor();
  cuda::reduce(op, x.dtype(), x.data_ptr(), out.data_ptr(), idx, s.outer, s.n, s.inner,
               ws_bytes ? workspace.data_ptr() : nullptr, launch_stream());
  return out;
}

// sum or mean over `dims` (all when empty), one dim at a time from the last.
Tensor reduce_dims(const char* op_name, const Tensor& x_in, std::vector<int64_t> dims, bool keepdim,
                   cuda::ReduceOp op) {
  check_float_dtype(op_name, x_in);
  Tensor x = x_in.detach().contiguous();
  const Shape final_shape = reduced_shape(x.shape(), dims, keepdim, op_name);
  if (dims.empty())
    for (int64_t d = 0; d < x.dim(); ++d) dims.push_back(d);
  for (auto& d : dims) d = wrap_dim(d, x.dim(), op_name);
  std::sort(dims.begin(), dims.end());
  dims.erase(std::unique(dims.begin(), dims.end()), dims.end());
  if (x.numel() == 0 || x.dim() == 0) {
    Tensor out = empty_on(final_shape, x.dtype(), x.device());
    fill_(out, x.numel() == 0 ? (op == cuda::ReduceOp::sum ? 0.0 : NAN) : 0.0);
    if (x.dim() == 0) out.copy_(x);
    return out;
  }
  // One launch per run of adjacent dims (merged into one dim of x, which is contiguous), from the
  // last run; a run of size 1 needs none (a sum or mean over one element is the element).
  for (size_t end = dims.size(); end > 0;) {
    size_t begin = end - 1;
    while (begin > 0 && dims[begin - 1] == dims[begin] - 1) --begin;
    const int64_t first = dims[begin], last = dims[end - 1];
    int64_t n = 1;
    for (int64_t d = first; d <= last; ++d) n *= x.size(d);
    Shape merged(x.shape().begin(), x.shape().begin() + first);
    merged.push_back(n);
    merged.insert(merged.end(), x.shape().begin() + last + 1, x.shape().end());
    x = x.view(merged);
    if (n > 1) x = reduce_dim(x, first, op, nullptr);
    end = begin;
  }
  return x.view(final_shape);
}

// max/min over one dim with the positions of the first extremum (a 0-dim x is its own extremum,
// at position 0, as on the CPU).
ValuesIndices extremum(const char* op, const Tensor& x_in, int64_t dim, bool keepdim,
                       cuda::ReduceOp kind) {
  check_float_dtype(op, x_in);
  const int64_t d = wrap_dim(dim, x_in.dim(), op);
  const bool scalar = x_in.dim() == 0;
  const Tensor x = scalar ? x_in.detach().reshape({1}) : x_in.detach().contiguous();
  STOKE_CHECK(x.size(d) > 0, op, "cannot reduce over dim ", dim, " of size 0 (input shape ",
              x.shape(), ")");
  Tensor indices;
  Tensor values = reduce_dim(x, d, kind, &indices);
  if (scalar) return {values.reshape({}), indices.reshape({})};
  if (!keepdim) {
    values = values.squeeze(d);
    indices = indices.squeeze(d);
  }
  return {values, indices};
}

}  // namespace

Tensor CudaBackend::sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  if (is_integer(x.dtype()) || x.dtype() == DType::boolean) {
    // Integer and bool sums are exact i64 (counting correct predictions), as on the CPU: one
    // dim at a time into i64, then i64 onwards.
    const Shape final_shape = reduced_shape(x.shape(), dims, keepdim, "sum");
    std::vector<int64_t> ds = dims;
    if (ds.empty())
      for (int64_t d = 0; d < x.dim(); ++d) ds.push_back(d);
    for (auto& d : ds) d = wrap_dim(d, std::max<int64_t>(x.dim(), 1), "sum");
    std::sort(ds.begin(), ds.end());
    ds.erase(std::unique(ds.begin(), ds.end()), ds.end());
    Tensor cur = x.detach().contiguous();
    if (cur.dim() == 0) cur = cur.reshape({1});
    for (auto it = ds.rbegin(); it != ds.rend(); ++it) {
      const Split sp = split_at(cur, *it);
      Shape shape = cur.shape();
      shape[static_cast<size_t>(*it)] = 1;
      Tensor out = empty_on(shape, DType::i64, cur.device());
      if (out.numel() > 0 && sp.n == 0)
        fill_(out, 0.0);
      else
        cuda::int_sum(cur.dtype(), cur.data_ptr(), typed<int64_t>(out), sp.outer, sp.n, sp.inner,
                      launch_stream());
      cur = out;
    }
    if (cur.dtype() != DType::i64) cur = cur.to(DType::i64);  // no dims reduced
    return cur.reshape(final_shape);
  }
  return reduce_dims("sum", x, dims, keepdim, cuda::ReduceOp::sum);
}

Tensor CudaBackend::mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return reduce_dims("mean", x, dims, keepdim, cuda::ReduceOp::mean);
}

ValuesIndices CudaBackend::max_with_indices(const Tensor& x, int64_t dim, bool keepdim) {
  return extremum("max", x, dim, keepdim, cuda::ReduceOp::max);
}

ValuesIndices CudaBackend::min_with_indices(const Tensor& x, int64_t dim, bool keepdim) {
  return extremum("min", x, dim, keepdim, cuda::ReduceOp::min);
}

// --- composed from the methods above and the elementwise ops ----------------------------------

Tensor CudaBackend::var(const Tensor& x, const std::vector<int64_t>& dims, int64_t correction,
                        bool keepdim) {
  const auto mask = reduce_detail::reduce_mask(x.dim(), dims, "var");
  // f16/bf16 run in f32 and are rounded once at the end, as torch accumulates them: in f16 the sum
  // of squared deviations overflows 65504 long before the variance does (100,000 values of
  // variance 1 gave inf on an H200 where the CPU gives 1.00194).
  if (x.dtype() == DType::f16 || x.dtype() == DType::bf16)
    return var(x.to(DType::f32), dims, correction, keepdim).to(x.dtype());
  // Two passes (mean, then squared deviations). The corrected two-pass formula
  // (sum d^2 - (sum d)^2 / n): the second term removes, to first order, the error of a mean
  // rounded to the input's precision.
  const Tensor d = ops::sub(x, ops::mean(x, dims, true));
  const int64_t n = reduce_detail::reduced_count(x.shape(), mask);
  const int64_t denom = std::max<int64_t>(0, n - correction);
  const Tensor s1 = ops::sum(d, dims, keepdim);
  const Tensor s2 = ops::sum(ops::mul(d, d), dims, keepdim);
  return ops::div(
      ops::sub(s2, ops::div(ops::mul(s1, s1), static_cast<double>(std::max<int64_t>(n, 1)))),
      static_cast<double>(denom));
}

Tensor CudaBackend::mean_backward(const Tensor& grad, const Shape& input_shape,
                                  const std::vector<int64_t>& dims, bool keepdim, int64_t count) {
  Tensor out = ops::sum_backward(grad, input_shape, dims, keepdim);
  ops::mul_(out, 1.0 / static_cast<double>(count));
  return out;
}

Tensor CudaBackend::var_backward(const Tensor& g, const Tensor& x, const std::vector<int64_t>& dims,
                                 double scale) {
  // g * scale * (x - mean) with the elementwise kernels.
  return ops::mul(ops::mul(g, scale), ops::sub(x, ops::mean(x, dims, true)));
}

Tensor CudaBackend::index_reduce_backward(const Tensor& grad, const Tensor& indices,
                                          const Shape& input_shape, int64_t dim, bool keepdim) {
  using namespace reduce_detail;
  const char* op = "index_reduce_backward";
  // The positions are unique along dim, so the scatter-add of gather's backward places each
  // gradient exactly.
  const int64_t nd = static_cast<int64_t>(input_shape.size());
  if (nd == 0) return reshaped(grad, {}).clone();
  const int64_t d = wrap_dim(dim, nd, op);
  std::vector<bool> mask(nd, false);
  mask[d] = true;
  const Tensor g = grad_keepdim(grad, input_shape, mask, keepdim, op).contiguous();
  return ops::gather_backward(g, d, reshaped(indices, g.shape()).contiguous(), input_shape);
}

}  // namespace stoke::ops::cuda_glue
