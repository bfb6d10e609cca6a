// Index and shape ops: checks (dtypes, shapes, every index value in range), then the backend of the
// tensors' device (ops/cpu/index.cpp, ops/cuda/index.cpp). cat and stack are strided copies, which
// every device does.
#include <algorithm>

#include "ops/backend.h"
#include "ops/check.h"
#include "ops/creation.h"
#include "ops/index.h"
#include "ops/memory_format.h"
#include "ops/reduce.h"

namespace stoke::ops {

namespace {

// Multi-index of flat position p in a contiguous tensor of `shape`.
Shape unravel(int64_t p, const Shape& shape) {
  Shape idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    const int64_t s = std::max<int64_t>(shape[d], 1);
    idx[d] = p % s;
    p /= s;
  }
  return idx;
}

// Checks that `index` is an i64 tensor and returns it contiguous and detached.
Tensor index_tensor(const char* op, const Tensor& index, const char* name) {
  STOKE_CHECK(index.dtype() == DType::i64, op, "expected ", name, " of dtype i64, got ",
              index.dtype());
  return index.detach().contiguous();
}

// Every value of `index` (contiguous i64) in [0, size); names the first offender. The message is
// built only when a device reports a bad position (on CUDA at the next synchronization): only then
// is its value read back.
void check_range(const char* op, const Tensor& index, int64_t size, const char* what) {
  dispatch(op, {&index}).check_index_range(op, index, size, [index, size, what](int64_t i) {
    const int64_t v =
        index.reshape({index.numel()}).narrow(0, i, 1).to(Device::cpu()).item<int64_t>();
    return detail::str_cat("index ", v, " at position ", unravel(i, index.shape()),
                           " is out of range for ", what, " of size ", size);
  });
}

// out (outer, n, inner) = x (outer, size, inner)[:, index, :].
Tensor index_select_impl(const char* op, const Tensor& x, int64_t dim, const Tensor& index,
                         Shape out_shape) {
  check_range(op, index, x.size(dim), "the indexed dim");
  return dispatch(op, {&x, &index}).index_select(x, dim, index, out_shape);
}

Tensor index_select_backward_impl(const char* op, const Tensor& grad, int64_t dim,
                                  const Tensor& index, const Shape& input_shape) {
  return dispatch(op, {&grad, &index}).index_select_backward(grad, dim, index, input_shape);
}

void check_gather_args(const char* op, const Shape& x_shape, int64_t dim, const Tensor& index) {
  STOKE_CHECK(index.dim() == static_cast<int64_t>(x_shape.size()), op,
              "expected index with as many dims as the input (", x_shape.size(),
              "), got index shape ", index.shape(), " for input shape ", x_shape);
  for (int64_t d = 0; d < index.dim(); ++d)
    STOKE_CHECK(d == dim || index.size(d) <= x_shape[d], op, "index shape ", index.shape(),
                " exceeds input shape ", x_shape, " in dim ", d, " (only dim ", dim,
                " may be larger)");
}

}  // namespace

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  STOKE_CHECK(!tensors.empty(), "cat", "expected a non-empty list of tensors");
  const Tensor& first = tensors[0];
  dim = wrap_dim(dim, first.dim(), "cat");
  Shape shape = first.shape();
  shape[dim] = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    dispatch("cat", {&first, &t});  // same device (any); every device copies
    check_same_dtype("cat", first, "tensor 0", t, "another tensor");
    bool match = t.dim() == first.dim();
    for (int64_t d = 0; match && d < t.dim(); ++d) match = d == dim || t.size(d) == first.size(d);
    STOKE_CHECK(match, "cat", "expected tensors of shape ", first.shape(), " except in dim ", dim,
                ", got tensor ", i, " of shape ", t.shape());
    shape[dim] += t.size(dim);
  }
  // torch's layout rule for cat: channels_last when every input suggests it, else contiguous.
  MemoryFormat format = MemoryFormat::channels_last;
  for (const Tensor& t : tensors)
    if (kernel_format(t) != MemoryFormat::channels_last) format = MemoryFormat::contiguous;
  Tensor out = empty_in_format(shape, {.dtype = first.dtype(), .device = first.device()}, format);
  int64_t offset = 0;
  for (const Tensor& t : tensors) {
    copy_strided(out.narrow(dim, offset, t.size(dim)), t.detach());
    offset += t.size(dim);
  }
  return out;
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  STOKE_CHECK(!tensors.empty(), "stack", "expected a non-empty list of tensors");
  dim = wrap_dim(dim, tensors[0].dim() + 1, "stack");
  std::vector<Tensor> parts;
  parts.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    STOKE_CHECK(tensors[i].shape() == tensors[0].shape(), "stack",
                "expected tensors of one shape, got ", tensors[0].shape(), " and tensor ", i,
                " of shape ", tensors[i].shape());
    parts.push_back(tensors[i].detach().unsqueeze(dim));
  }
  return cat(parts, dim);
}

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  STOKE_CHECK(x.dim() > 0, "index_select", "expected an input with at least 1 dim, got a scalar");
  dim = wrap_dim(dim, x.dim(), "index_select");
  STOKE_CHECK(index.dim() <= 1, "index_select", "expected a 1-D index, got shape ", index.shape());
  const Tensor idx = index_tensor("index_select", index, "index");
  Shape out_shape = x.shape();
  out_shape[dim] = idx.numel();
  return index_select_impl("index_select", x, dim, idx, out_shape);
}

Tensor index_select_backward(const Tensor& grad, int64_t dim, const Tensor& index,
                             const Shape& input_shape) {
  const Tensor idx = index_tensor("index_select_backward", index, "index");
  dim = wrap_dim(dim, static_cast<int64_t>(input_shape.size()), "index_select_backward");
  return index_select_backward_impl("index_select_backward", grad, dim, idx, input_shape);
}

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  check_dim("embedding", weight, "weight", 2, "(num_embeddings, embedding_dim)");
  const Tensor idx = index_tensor("embedding", indices, "indices");
  Shape out_shape = indices.shape();
  out_shape.push_back(weight.size(1));
  return index_select_impl("embedding", weight, 0, idx, out_shape);
}

Tensor embedding_backward(const Tensor& grad, const Tensor& indices, int64_t num_weights) {
  const Tensor idx = index_tensor("embedding_backward", indices, "indices");
  STOKE_CHECK(grad.dim() == indices.dim() + 1, "embedding_backward", "expected grad of shape ",
              indices.shape(), " + [D], got ", grad.shape());
  const int64_t d = grad.size(-1);
  check_range("embedding_backward", idx, num_weights, "the embedding table");
  return index_select_backward_impl("embedding_backward", grad.reshape({idx.numel(), d}), 0, idx,
                                    {num_weights, d});
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  STOKE_CHECK(x.dim() > 0, "gather", "expected an input with at least 1 dim, got a scalar");
  dim = wrap_dim(dim, x.dim(), "gather");
  const Tensor idx = index_tensor("gather", index, "index");
  check_gather_args("gather", x.shape(), dim, idx);
  check_range("gather", idx, x.size(dim), "the gathered dim");
  return dispatch("gather", {&x, &idx}).gather(x, dim, idx);
}

Tensor gather_backward(const Tensor& grad, int64_t dim, const Tensor& index,
                       const Shape& input_shape) {
  STOKE_CHECK(!input_shape.empty(), "gather_backward", "expected an input with at least 1 dim");
  dim = wrap_dim(dim, static_cast<int64_t>(input_shape.size()), "gather_backward");
  const Tensor idx = index_tensor("gather_backward", index, "index");
  check_gather_args("gather_backward", input_shape, dim, idx);
  check_shape("gather_backward", grad, "grad", idx.shape());
  check_range("gather_backward", idx, input_shape[dim], "the gathered dim");
  return dispatch("gather_backward", {&grad, &idx}).gather_backward(grad, dim, idx, input_shape);
}

Tensor one_hot(const Tensor& indices, int64_t num_classes) {
  Backend& backend = dispatch("one_hot", {&indices});
  const Tensor idx = index_tensor("one_hot", indices, "indices");
  if (num_classes < 0) {
    STOKE_CHECK(idx.numel() > 0, "one_hot",
                "cannot infer num_classes from an empty tensor; pass it");
    // Read on the host (CUDA's max takes float dtypes only): one copy from a device, none on the
    // CPU, where .to is the tensor itself.
    num_classes = max(idx.to(Device::cpu())).item<int64_t>() + 1;
  }
  check_range("one_hot", idx, num_classes, "the classes");
  return backend.one_hot(idx, num_classes);
}

}  // namespace stoke::ops
