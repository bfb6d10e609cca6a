// Index and shape CPU kernels. Forward copies move raw elements (any dtype); scatter-adds are
// parallelized so that every output element is written by one thread only, which keeps them
// deterministic without atomics.
#include <algorithm>
#include <cstring>

#include "core/strided.h"
#include "ops/check.h"
#include "ops/creation.h"
#include "ops/backend.h"
#include "ops/elementwise.h"
#include "ops/index.h"
#include "ops/reduce.h"

namespace stoke::ops {

namespace {

constexpr int64_t kGrain = 1 << 15;

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

// Every value of `index` (contiguous i64) in [0, size); names the first offender.
void check_range(const char* op, const Tensor& index, int64_t size, const char* what) {
  if (auto* k = device_dispatch(op, {&index})) {
    // The CPU's message, built when the device reports the first bad position (on CUDA at the next
    // synchronization): only then is its value read back.
    k->check_index_range(op, index, size, [index, size, what](int64_t i) {
      const int64_t v =
          index.reshape({index.numel()}).narrow(0, i, 1).to(Device::cpu()).item<int64_t>();
      return detail::str_cat("index ", v, " at position ", unravel(i, index.shape()),
                             " is out of range for ", what, " of size ", size);
    });
    return;
  }
  const int64_t* p = index.data<int64_t>();
  const int64_t n = index.numel();
  bool ok = true;
  for (int64_t i = 0; i < n; ++i) ok &= (p[i] >= 0) & (p[i] < size);
  if (ok) return;
  for (int64_t i = 0; i < n; ++i)
    STOKE_CHECK(p[i] >= 0 && p[i] < size, op, "index ", p[i], " at position ",
                unravel(i, index.shape()), " is out of range for ", what, " of size ", size);
}

// Copies element runs of `bytes` bytes: the dtype does not matter for pure copies.
inline void copy_bytes(char* dst, const char* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
}

// out (outer, n, inner) = x (outer, size, inner)[:, index, :], x contiguous.
Tensor index_select_impl(const char* op, const Tensor& x, int64_t dim, const Tensor& index,
                         Shape out_shape) {
  const int64_t size = x.size(dim);
  check_range(op, index, size, "the indexed dim");
  if (auto* k = device_dispatch(op, {&x, &index})) return k->index_select(x, dim, index, out_shape);
  check_cpu(op, {&x, &index});
  const Tensor xc = x.detach().contiguous();
  Tensor out = empty(out_shape, {.dtype = x.dtype()});
  const int64_t n = index.numel();
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= x.size(d);
  for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= x.size(d);
  if (out.numel() == 0) return out;
  const size_t esize = x.element_size();
  const size_t row_bytes = static_cast<size_t>(inner) * esize;
  const int64_t* idx = index.data<int64_t>();
  const char* src = static_cast<const char*>(xc.data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  parallel_for(0, outer * n, std::max<int64_t>(1, kGrain / inner), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const int64_t o = r / n, j = r % n;
      copy_bytes(dst + r * row_bytes, src + (o * size + idx[j]) * row_bytes, row_bytes);
    }
  });
  return out;
}

// out (outer, size, inner) zeros; out[:, index[j], :] += grad[:, j, :]. Each thread owns a range
// of (outer, size) rows and scans all of index, so repeated indices accumulate without races.
template <class T>
void index_add_rows(T* out, const T* grad, const int64_t* idx, int64_t outer, int64_t size,
                    int64_t n, int64_t inner) {
  const int64_t work_per_row = std::max<int64_t>(1, n * inner / std::max<int64_t>(size, 1));
  parallel_for(0, outer * size, std::max<int64_t>(1, kGrain / work_per_row),
               [&](int64_t b, int64_t e) {
                 for (int64_t o = b / size; o * size < e; ++o) {
                   const int64_t lo = std::max(b - o * size, int64_t(0));
                   const int64_t hi = std::min(e - o * size, size);
                   for (int64_t j = 0; j < n; ++j) {
                     const int64_t v = idx[j];
                     if (v < lo || v >= hi) continue;
                     T* dst = out + (o * size + v) * inner;
                     const T* src = grad + (o * n + j) * inner;
                     for (int64_t i = 0; i < inner; ++i) dst[i] += src[i];
                   }
                 }
               });
}

Tensor index_select_backward_impl(const char* op, const Tensor& grad, int64_t dim,
                                  const Tensor& index, const Shape& input_shape) {
  if (auto* k = device_dispatch(op, {&grad, &index}))
    return k->index_select_backward(grad, dim, index, input_shape);
  check_cpu(op, {&grad, &index});
  Tensor out = empty(input_shape, {.dtype = grad.dtype()});
  std::memset(out.data_ptr(), 0, out.numel() * out.element_size());
  const Tensor gc = grad.detach().contiguous();
  const int64_t size = input_shape[dim], n = index.numel();
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= input_shape[d];
  for (int64_t d = dim + 1; d < static_cast<int64_t>(input_shape.size()); ++d)
    inner *= input_shape[d];
  if (out.numel() == 0 || n == 0) return out;
  dispatch_float(grad.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    index_add_rows(out.data<T>(), gc.data<T>(), index.data<int64_t>(), outer, size, n, inner);
  });
  return out;
}

// The iteration of gather and its scatter-add: index's shape with `dim` moved innermost, so that
// one row holds every position that can hit the same element of x (rows never race).
struct GatherGeometry {
  StridedGeometry<2> g;  // operand 0: out/index (contiguous, index's shape); 1: x with dim -> 0
  int64_t x_dim_stride;
};

GatherGeometry gather_geometry(const Shape& index_shape, const Shape& x_strides, int64_t dim) {
  const Shape c = contiguous_strides(index_shape);
  Shape shape, s0, s1;
  for (int64_t d = 0; d < static_cast<int64_t>(index_shape.size()); ++d) {
    if (d == dim) continue;
    shape.push_back(index_shape[d]);
    s0.push_back(c[d]);
    s1.push_back(x_strides[d]);
  }
  shape.push_back(index_shape[dim]);
  s0.push_back(c[dim]);
  s1.push_back(0);
  return {coalesce<2>(shape, {s0, s1}), x_strides[dim]};
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
    device_dispatch("cat", {&first, &t});  // same device (any); every device copies
    check_same_dtype("cat", first, "tensor 0", t, "another tensor");
    bool match = t.dim() == first.dim();
    for (int64_t d = 0; match && d < t.dim(); ++d) match = d == dim || t.size(d) == first.size(d);
    STOKE_CHECK(match, "cat", "expected tensors of shape ", first.shape(), " except in dim ", dim,
                ", got tensor ", i, " of shape ", t.shape());
    shape[dim] += t.size(dim);
  }
  Tensor out = empty(shape, {.dtype = first.dtype(), .device = first.device()});
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
  if (auto* k = device_dispatch("gather", {&x, &idx})) return k->gather(x, dim, idx);
  check_cpu("gather", {&x, &idx});
  Tensor out = empty(idx.shape(), {.dtype = x.dtype()});
  if (out.numel() == 0) return out;
  const auto geo = gather_geometry(idx.shape(), x.strides(), dim);
  const int64_t* ip = idx.data<int64_t>();
  dispatch_all(x.dtype(), "gather", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* op = static_cast<T*>(out.data_ptr());
    const int64_t xs = geo.x_dim_stride;
    parallel_for_each_row(geo.g, kGrain, [&](const auto& off, int64_t n, const auto& st) {
      for (int64_t i = 0; i < n; ++i) {
        const int64_t p = off[0] + i * st[0];
        op[p] = xp[off[1] + i * st[1] + ip[p] * xs];
      }
    });
  });
  return out;
}

Tensor gather_backward(const Tensor& grad, int64_t dim, const Tensor& index,
                       const Shape& input_shape) {
  STOKE_CHECK(!input_shape.empty(), "gather_backward", "expected an input with at least 1 dim");
  dim = wrap_dim(dim, static_cast<int64_t>(input_shape.size()), "gather_backward");
  const Tensor idx = index_tensor("gather_backward", index, "index");
  check_gather_args("gather_backward", input_shape, dim, idx);
  check_shape("gather_backward", grad, "grad", idx.shape());
  check_range("gather_backward", idx, input_shape[dim], "the gathered dim");
  if (auto* k = device_dispatch("gather_backward", {&grad, &idx}))
    return k->gather_backward(grad, dim, idx, input_shape);
  check_cpu("gather_backward", {&grad, &idx});
  Tensor out = empty(input_shape, {.dtype = grad.dtype()});
  std::memset(out.data_ptr(), 0, out.numel() * out.element_size());
  if (idx.numel() == 0) return out;
  const Tensor gc = grad.detach().contiguous();
  const auto geo = gather_geometry(idx.shape(), out.strides(), dim);
  const int64_t* ip = idx.data<int64_t>();
  dispatch_float(grad.dtype(), "gather_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* gp = gc.data<T>();
    T* op = out.data<T>();
    const int64_t xs = geo.x_dim_stride;
    parallel_for_each_row(geo.g, kGrain, [&](const auto& off, int64_t n, const auto& st) {
      for (int64_t i = 0; i < n; ++i) {
        const int64_t p = off[0] + i * st[0];
        op[off[1] + i * st[1] + ip[p] * xs] += gp[p];
      }
    });
  });
  return out;
}

Tensor one_hot(const Tensor& indices, int64_t num_classes) {
  if (device_dispatch("one_hot", {&indices})) {
    // On a device: compare the indices with 0..C-1 (num_classes inferred with one read-back).
    if (num_classes < 0) {
      STOKE_CHECK(indices.numel() > 0, "one_hot",
                  "cannot infer num_classes from an empty tensor; pass it");
      num_classes = max(indices.to(Device::cpu())).item<int64_t>() + 1;
    }
    check_range("one_hot", index_tensor("one_hot", indices, "indices"), num_classes, "the classes");
    const Tensor classes =
        arange(0, static_cast<double>(num_classes), 1, {.dtype = DType::i64}).to(indices.device());
    return eq(indices.unsqueeze(-1), classes).to(DType::i64);
  }
  const Tensor idx = index_tensor("one_hot", indices, "indices");
  const int64_t n = idx.numel();
  const int64_t* ip = idx.data<int64_t>();
  if (num_classes < 0) {
    STOKE_CHECK(n > 0, "one_hot", "cannot infer num_classes from an empty tensor; pass it");
    num_classes = *std::max_element(ip, ip + n) + 1;
  }
  check_range("one_hot", idx, num_classes, "the classes");
  Shape shape = indices.shape();
  shape.push_back(num_classes);
  Tensor out = empty(shape, {.dtype = DType::i64});
  int64_t* op = out.data<int64_t>();
  std::memset(op, 0, out.numel() * sizeof(int64_t));
  for (int64_t i = 0; i < n; ++i) op[i * num_classes + ip[i]] = 1;
  return out;
}

}  // namespace stoke::ops
