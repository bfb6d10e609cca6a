// Index and shape CPU kernels. Forward copies move raw elements (any dtype); scatter-adds are
// parallelized so that every output element is written by one thread only, which keeps them
// deterministic without atomics.
#include <algorithm>
#include <cstring>

#include "core/strided.h"
#include "ops/check.h"
#include "ops/cpu/backend.h"
#include "ops/creation.h"
#include "ops/index.h"

namespace stoke::ops::cpu {

namespace {

constexpr int64_t kIndexGrain = 1 << 15;

// Copies element runs of `bytes` bytes: the dtype does not matter for pure copies.
inline void copy_bytes(char* dst, const char* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
}

// out (outer, size, inner) zeros; out[:, index[j], :] += grad[:, j, :]. Each thread owns a range
// of (outer, size) rows and scans all of index, so repeated indices accumulate without races.
template <class T>
void index_add_rows(T* out, const T* grad, const int64_t* idx, int64_t outer, int64_t size,
                    int64_t n, int64_t inner) {
  const int64_t work_per_row = std::max<int64_t>(1, n * inner / std::max<int64_t>(size, 1));
  parallel_for(0, outer * size, std::max<int64_t>(1, kIndexGrain / work_per_row),
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

}  // namespace

void CpuBackend::check_index_range(const char* op, const Tensor& index, int64_t bound,
                                   std::function<std::string(int64_t)> describe) {
  const int64_t* p = index.data<int64_t>();
  const int64_t n = index.numel();
  bool ok = true;
  for (int64_t i = 0; i < n; ++i) ok &= (p[i] >= 0) & (p[i] < bound);
  if (ok) return;
  for (int64_t i = 0; i < n; ++i) STOKE_CHECK(p[i] >= 0 && p[i] < bound, op, describe(i));
}

// out (outer, n, inner) = x (outer, size, inner)[:, index, :], x contiguous.
Tensor CpuBackend::index_select(const Tensor& x, int64_t dim, const Tensor& index,
                                const Shape& out_shape) {
  const int64_t size = x.size(dim);
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
  parallel_for(0, outer * n, std::max<int64_t>(1, kIndexGrain / inner), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const int64_t o = r / n, j = r % n;
      copy_bytes(dst + r * row_bytes, src + (o * size + idx[j]) * row_bytes, row_bytes);
    }
  });
  return out;
}

Tensor CpuBackend::index_select_backward(const Tensor& grad, int64_t dim, const Tensor& index,
                                         const Shape& input_shape) {
  // Also embedding_backward's kernel: the method takes no op name, so a dtype error names
  // index_select_backward (as on cuda).
  const char* op = "index_select_backward";
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

Tensor CpuBackend::gather(const Tensor& x, int64_t dim, const Tensor& idx) {
  Tensor out = empty(idx.shape(), {.dtype = x.dtype()});
  if (out.numel() == 0) return out;
  const auto geo = gather_geometry(idx.shape(), x.strides(), dim);
  const int64_t* ip = idx.data<int64_t>();
  dispatch_all(x.dtype(), "gather", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* op = static_cast<T*>(out.data_ptr());
    const int64_t xs = geo.x_dim_stride;
    parallel_for_each_row(geo.g, kIndexGrain, [&](const auto& off, int64_t n, const auto& st) {
      for (int64_t i = 0; i < n; ++i) {
        const int64_t p = off[0] + i * st[0];
        op[p] = xp[off[1] + i * st[1] + ip[p] * xs];
      }
    });
  });
  return out;
}

Tensor CpuBackend::gather_backward(const Tensor& grad, int64_t dim, const Tensor& idx,
                                   const Shape& input_shape) {
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
    parallel_for_each_row(geo.g, kIndexGrain, [&](const auto& off, int64_t n, const auto& st) {
      for (int64_t i = 0; i < n; ++i) {
        const int64_t p = off[0] + i * st[0];
        op[off[1] + i * st[1] + ip[p] * xs] += gp[p];
      }
    });
  });
  return out;
}

Tensor CpuBackend::one_hot(const Tensor& idx, int64_t num_classes) {
  const int64_t n = idx.numel();
  const int64_t* ip = idx.data<int64_t>();
  Shape shape = idx.shape();
  shape.push_back(num_classes);
  Tensor out = empty(shape, {.dtype = DType::i64});
  int64_t* op = out.data<int64_t>();
  std::memset(op, 0, out.numel() * sizeof(int64_t));
  for (int64_t i = 0; i < n; ++i) op[i * num_classes + ip[i]] = 1;
  return out;
}

}  // namespace stoke::ops::cpu
