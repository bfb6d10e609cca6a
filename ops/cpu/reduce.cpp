// CPU reductions. Every reduction first views its (contiguous) input as [outer, red, inner]: the
// reduced dims form one block `red`, kept dims before it `outer` and after it `inner`. Inputs whose
// reduced dims are not adjacent (after dropping size-1 dims) are permuted and copied so that they
// are. Two kernels then cover everything:
//   rows    (inner == 1): each output is a contiguous run, summed in f32/f64 lanes;
//   columns (inner > 1):  outputs are vectorized along `inner`, accumulated row after row.
// Work is split over outputs when there are enough of them, else over the reduced range with one
// partial per chunk, combined in chunk order (deterministic for a given thread count).
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "core/parallel.h"
#include "core/strided.h"
#include "ops/check.h"
#include "ops/cpu/backend.h"
#include "ops/cpu/row_kernels.h"
#include "ops/creation.h"
#include "ops/reduce.h"
#include "ops/reduce_detail.h"

namespace stoke::ops::cpu {
using namespace reduce_detail;
namespace {

constexpr int64_t kReduceGrain = 32768;  // elements per parallel chunk, at least
constexpr int kReduceLanes = 16;         // independent accumulators: vectorizable without fast-math
constexpr int64_t kReduceBlock = 1024;   // elements summed in lane precision before widening to A
constexpr int64_t kReduceTile = 512;     // inner-dim width of one column-reduction task

struct Layout {
  Tensor x;  // contiguous
  int64_t outer = 1, red = 1, inner = 1;
};

// Runs of adjacent non-trivial dims with the same reduce flag.
using Runs = std::vector<std::pair<int64_t, bool>>;
Runs runs_of(const Tensor& x, const std::vector<bool>& mask) {
  Runs runs;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (x.size(d) == 1) continue;
    if (!runs.empty() && runs.back().second == mask[d])
      runs.back().first *= x.size(d);
    else
      runs.push_back({x.size(d), mask[d]});
  }
  return runs;
}

// [outer, red, inner] without a copy: at most one reduced run.
bool is_simple(const Runs& runs) {
  const size_t n = runs.size();
  return n <= 2 || (n == 3 && !runs[0].second);
}

Layout plan(const Tensor& x, const std::vector<bool>& mask) {
  Layout l;
  const Runs runs = runs_of(x, mask);
  const size_t n = runs.size();
  const bool simple = is_simple(runs);
  if (simple) {
    l.x = x.contiguous();
    size_t i = 0;
    if (i < n && !runs[i].second) l.outer = runs[i++].first;
    if (i < n && runs[i].second) l.red = runs[i++].first;
    if (i < n) l.inner = runs[i].first;
    return l;
  }
  std::vector<int64_t> perm;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (!mask[d]) {
      perm.push_back(d);
      l.outer *= x.size(d);
    }
  for (int64_t d = 0; d < x.dim(); ++d)
    if (mask[d]) {
      perm.push_back(d);
      l.red *= x.size(d);
    }
  l.x = x.permute(perm).contiguous();
  return l;
}

// Sum of f(p[i]) for i < n: kReduceLanes accumulators of type L over blocks of kReduceBlock
// elements, each block's total added in A (f64 for floats) so long sums keep their accuracy. Two
// 512-bit vectors' worth of lanes hide the add latency.
template <class L, class A, class T, class F>
A row_accumulate(const T* p, int64_t n, F&& f) {
  constexpr int lanes = 128 / sizeof(L);
  A total = 0;
  for (int64_t b = 0; b < n; b += kReduceBlock) {
    const int64_t e = std::min(n, b + kReduceBlock);
    L lane[lanes] = {};
    int64_t i = b;
    for (; i + lanes <= e; i += lanes)
      for (int j = 0; j < lanes; ++j) lane[j] += f(p[i + j]);
    L rest = 0;
    for (; i < e; ++i) rest += f(p[i]);
    for (int w = lanes / 2; w > 0; w /= 2)
      for (int j = 0; j < w; ++j) lane[j] += lane[j + w];
    total += static_cast<A>(lane[0]) + static_cast<A>(rest);
  }
  return total;
}

// out[o] = sum_r f(x[o, r], o) for x of shape [outer, red].
template <class L, class A, class T, class F>
void reduce_rows(const T* x, int64_t outer, int64_t red, A* out, F&& f) {
  if (outer >= 4 * num_threads() || red < 2 * kReduceGrain) {
    const int64_t grain = std::max<int64_t>(1, kReduceGrain / std::max<int64_t>(red, 1));
    parallel_for(0, outer, grain, [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o)
        out[o] = row_accumulate<L, A>(x + o * red, red, [&](T v) { return f(v, o); });
    });
    return;
  }
  // Few long rows: split each row over the pool.
  std::vector<A> partial(parallel_chunk_count(red, kReduceGrain));
  for (int64_t o = 0; o < outer; ++o) {
    std::fill(partial.begin(), partial.end(), A(0));
    parallel_chunks(0, red, kReduceGrain, [&](int64_t c, int64_t b, int64_t e) {
      partial[c] = row_accumulate<L, A>(x + o * red + b, e - b, [&](T v) { return f(v, o); });
    });
    A s = 0;
    for (A p : partial) s += p;
    out[o] = s;
  }
}

// acc[k] += sum_{r in [r0, r1)} f(x[r, k0 + k], obase + k0 + k) for k < w; x is [red, inner].
template <class A, class T, class F>
void column_tile(const T* x, int64_t inner, int64_t r0, int64_t r1, int64_t k0, int64_t w, A* acc,
                 int64_t obase, F&& f) {
  const int64_t o = obase + k0;
  int64_t r = r0;
  // Four rows per sweep: a quarter of the loads and stores of acc.
  for (; r + 4 <= r1; r += 4) {
    const T* a = x + r * inner + k0;
    const T *b = a + inner, *c = b + inner, *d = c + inner;
    for (int64_t k = 0; k < w; ++k)
      acc[k] += (static_cast<A>(f(a[k], o + k)) + static_cast<A>(f(b[k], o + k))) +
                (static_cast<A>(f(c[k], o + k)) + static_cast<A>(f(d[k], o + k)));
  }
  for (; r < r1; ++r) {
    const T* row = x + r * inner + k0;
    for (int64_t k = 0; k < w; ++k) acc[k] += static_cast<A>(f(row[k], o + k));
  }
}

// out[o, k] = sum_r f(x[o, r, k], o * inner + k) for x of shape [outer, red, inner].
template <class A, class T, class F>
void reduce_columns(const T* x, int64_t outer, int64_t red, int64_t inner, A* out, F&& f) {
  const int64_t tiles = (inner + kReduceTile - 1) / kReduceTile;
  const int64_t tasks = outer * tiles;
  if (tasks >= num_threads() || outer * red * inner < 2 * kReduceGrain) {
    const int64_t per_task = std::max<int64_t>(1, red * std::min(inner, kReduceTile));
    parallel_for(0, tasks, std::max<int64_t>(1, kReduceGrain / per_task),
                 [&](int64_t b, int64_t e) {
                   A acc[kReduceTile];
                   for (int64_t t = b; t < e; ++t) {
                     const int64_t o = t / tiles, k0 = (t % tiles) * kReduceTile,
                                   w = std::min(kReduceTile, inner - k0);
                     std::fill(acc, acc + w, A(0));
                     column_tile(x + o * red * inner, inner, 0, red, k0, w, acc, o * inner, f);
                     std::copy(acc, acc + w, out + o * inner + k0);
                   }
                 });
    return;
  }
  // Few outputs, long reduced range: one partial result per chunk of the reduced range.
  const int64_t nout = outer * inner;
  const int64_t grain = std::max<int64_t>(1, kReduceGrain / inner);
  const int64_t chunks = parallel_chunk_count(red, grain);
  std::vector<A> partial(chunks * nout, A(0));
  parallel_chunks(0, red, grain, [&](int64_t c, int64_t b, int64_t e) {
    A* p = partial.data() + c * nout;
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t k0 = 0; k0 < inner; k0 += kReduceTile)
        column_tile(x + o * red * inner, inner, b, e, k0, std::min(kReduceTile, inner - k0),
                    p + o * inner + k0, o * inner, f);
  });
  for (int64_t i = 0; i < nout; ++i) {
    A s = 0;
    for (int64_t c = 0; c < chunks; ++c) s += partial[c * nout + i];
    out[i] = s;
  }
}

// The sum of f(x, output index) over the layout's reduced block, one A per output.
template <class L, class A, class T, class F>
void run_reduce(const Layout& l, A* out, F&& f) {
  const T* x = l.x.data<T>();
  if (l.inner == 1)
    reduce_rows<L, A>(x, l.outer, l.red, out, f);
  else
    reduce_columns<A>(x, l.outer, l.red, l.inner, out, f);
}

template <class T>
using lane_t = std::conditional_t<std::is_floating_point_v<T>, T, int64_t>;
template <class T>
using acc_t = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;

// Per-output sums (as acc_t) of x over the mask, plus the layout used.
template <class T>
std::vector<acc_t<T>> sums(const Layout& l) {
  std::vector<acc_t<T>> acc(l.outer * l.inner);
  run_reduce<lane_t<T>, acc_t<T>, T>(l, acc.data(),
                                     [](T v, int64_t) { return static_cast<lane_t<T>>(v); });
  return acc;
}

// Sums over the mask. When the innermost run is reduced but the layout is not simple (NCHW over
// (0, 2, 3), the bias / batch-norm case), the contiguous innermost run is summed first as rows and
// the other runs are reduced from those partial sums, instead of permuting and copying the input.
template <class T>
std::vector<acc_t<T>> masked_sums(const Tensor& x, const std::vector<bool>& mask) {
  const Runs runs = runs_of(x, mask);
  if (is_simple(runs) || !runs.back().second) return sums<T>(plan(x, mask));
  using A = acc_t<T>;
  const Tensor xc = x.contiguous();
  Shape rest;
  std::vector<bool> rest_mask;
  for (size_t i = 0; i + 1 < runs.size(); ++i) {
    rest.push_back(runs[i].first);
    rest_mask.push_back(runs[i].second);
  }
  Tensor partial = empty(rest, {.dtype = dtype_of<A>()});
  reduce_rows<lane_t<T>, A>(xc.data<T>(), rest.numel(), runs.back().first, partial.data<A>(),
                            [](T v, int64_t) { return static_cast<lane_t<T>>(v); });
  return masked_sums<A>(partial, rest_mask);
}

// --- max / min ---------------------------------------------------------------------------------

// True when v should replace best: strictly better, or the first NaN (NaN wins, like PyTorch).
template <bool IsMax, class T>
inline bool better(T v, T best) {
  if constexpr (std::is_floating_point_v<T>)
    if (v != v) return best == best;
  return IsMax ? v > best : v < best;
}

// First extremum of p[b, e) (b < e). A vectorized pass finds the value (and whether a NaN may be
// present), a second pass the first position holding it.
template <bool IsMax, class T>
void extremum_row(const T* p, int64_t b, int64_t e, T& best, int64_t& idx) {
  T m;
  if constexpr (std::is_floating_point_v<T>) {
    bool maybe_nan = false;
    if (e - b < (int64_t(1) << 31)) {
      int64_t k = 0;
      m = cpu::row_arg_extreme<IsMax>(p + b, e - b, &k, &maybe_nan);
      best = m;
      idx = b + k;
      if (maybe_nan)
        for (int64_t j = b; j < e; ++j)
          if (p[j] != p[j]) {
            best = p[j];
            idx = j;
            break;
          }
      return;
    }
    m = cpu::row_extreme<IsMax, true>(p + b, e - b, &maybe_nan);
    if (maybe_nan)
      for (int64_t k = b; k < e; ++k)
        if (p[k] != p[k]) {
          best = p[k];
          idx = k;
          return;
        }
  } else {
    T lane[kReduceLanes];
    for (int j = 0; j < kReduceLanes; ++j) lane[j] = p[b];
    int64_t i = b;
    for (; i + kReduceLanes <= e; i += kReduceLanes)
      for (int j = 0; j < kReduceLanes; ++j)
        lane[j] = (IsMax ? p[i + j] > lane[j] : p[i + j] < lane[j]) ? p[i + j] : lane[j];
    for (; i < e; ++i) lane[0] = (IsMax ? p[i] > lane[0] : p[i] < lane[0]) ? p[i] : lane[0];
    m = lane[0];
    for (int j = 1; j < kReduceLanes; ++j) m = (IsMax ? lane[j] > m : lane[j] < m) ? lane[j] : m;
  }
  int64_t k = b;
  while (p[k] != m) ++k;
  best = m;
  idx = k;
}

// vals/idx[o, k] = extremum over d of x[o, d, k] (x is [outer, n, inner], n > 0).
template <bool IsMax, class T>
void extremum_kernel(const T* x, int64_t outer, int64_t n, int64_t inner, T* vals, int64_t* idx) {
  if (inner == 1) {
    if (outer >= 4 * num_threads() || n < 2 * kReduceGrain) {
      parallel_for(0, outer, std::max<int64_t>(1, kReduceGrain / n), [&](int64_t b, int64_t e) {
        for (int64_t o = b; o < e; ++o) extremum_row<IsMax>(x + o * n, 0, n, vals[o], idx[o]);
      });
      return;
    }
    const int64_t chunks = parallel_chunk_count(n, kReduceGrain);
    std::vector<T> pv(chunks);
    std::vector<int64_t> pi(chunks, -1);
    for (int64_t o = 0; o < outer; ++o) {
      std::fill(pi.begin(), pi.end(), -1);
      parallel_chunks(0, n, kReduceGrain, [&](int64_t c, int64_t b, int64_t e) {
        extremum_row<IsMax>(x + o * n, b, e, pv[c], pi[c]);
      });
      T best = pv[0];
      int64_t bi = pi[0];
      for (int64_t c = 1; c < chunks; ++c)
        if (pi[c] >= 0 && better<IsMax>(pv[c], best)) {
          best = pv[c];
          bi = pi[c];
        }
      vals[o] = best;
      idx[o] = bi;
    }
    return;
  }
  const int64_t tiles = (inner + kReduceTile - 1) / kReduceTile;
  const int64_t per_task = n * std::min(inner, kReduceTile);
  parallel_for(0, outer * tiles, std::max<int64_t>(1, kReduceGrain / per_task),
               [&](int64_t b, int64_t e) {
                 for (int64_t t = b; t < e; ++t) {
                   const int64_t o = t / tiles, k0 = (t % tiles) * kReduceTile,
                                 w = std::min(kReduceTile, inner - k0);
                   T* bv = vals + o * inner + k0;
                   int64_t* bi = idx + o * inner + k0;
                   const T* base = x + o * n * inner + k0;
                   for (int64_t k = 0; k < w; ++k) {
                     bv[k] = base[k];
                     bi[k] = 0;
                   }
                   for (int64_t d = 1; d < n; ++d) {
                     const T* row = base + d * inner;
                     for (int64_t k = 0; k < w; ++k) {
                       // Branch-free select (same rule as better()) so the loop vectorizes.
                       const T v = row[k], cur = bv[k];
                       bool take = IsMax ? v > cur : v < cur;
                       if constexpr (std::is_floating_point_v<T>)
                         take = take | ((v != v) & (cur == cur));
                       bv[k] = take ? v : cur;
                       bi[k] = take ? d : bi[k];
                     }
                   }
                 }
               });
}

// The CPU's max/min along a dim; `op` names it in messages. The entry point has checked dim and
// the reduced size with the user-facing op's name (argmax, ...); the checks here repeat them.
template <bool IsMax>
ValuesIndices extremum(const Tensor& x_in, int64_t dim, bool keepdim, const char* op) {
  const Tensor x = x_in.dtype() == DType::boolean ? x_in.detach().to(DType::u8) : x_in.detach();
  const int64_t ndim = x.dim();
  const int64_t d = wrap_dim(dim, ndim, op);
  const int64_t n = ndim == 0 ? 1 : x.size(d);
  STOKE_CHECK(n > 0, op, "cannot reduce over dim ", dim, " of size 0 (input shape ", x.shape(),
              ")");
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < d; ++i) outer *= x.size(i);
  for (int64_t i = d + 1; i < ndim; ++i) inner *= x.size(i);
  const Shape out_shape = ndim == 0 ? Shape{} : reduced_shape(x.shape(), {d}, keepdim, op);
  const Tensor xc = x.contiguous();
  ValuesIndices r{empty(out_shape, {.dtype = x.dtype()}), empty(out_shape, {.dtype = DType::i64})};
  dispatch_numeric(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    extremum_kernel<IsMax>(xc.data<T>(), outer, n, inner, r.values.data<T>(),
                           r.indices.data<int64_t>());
  });
  if (x_in.dtype() == DType::boolean) r.values = r.values.to(DType::boolean);
  return r;
}

}  // namespace

Tensor CpuBackend::sum(const Tensor& x_in, const std::vector<int64_t>& dims, bool keepdim) {
  // Detached: the copies made here (cast, permute + contiguous) are not part of any graph.
  const Tensor x = x_in.dtype() == DType::boolean ? x_in.detach().to(DType::u8) : x_in.detach();
  const auto mask = reduce_mask(x.dim(), dims, "sum");
  const Shape out_shape = shape_after(x.shape(), mask, keepdim);
  return dispatch_numeric(x.dtype(), "sum", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto acc = masked_sums<T>(x, mask);
    if constexpr (std::is_floating_point_v<T>) {
      Tensor out = empty(out_shape, {.dtype = x.dtype()});
      std::transform(acc.begin(), acc.end(), out.data<T>(), [](double v) { return T(v); });
      return out;
    } else {
      Tensor out = empty(out_shape, {.dtype = DType::i64});
      std::copy(acc.begin(), acc.end(), out.data<int64_t>());
      return out;
    }
  });
}

Tensor CpuBackend::mean(const Tensor& x_in, const std::vector<int64_t>& dims, bool keepdim) {
  const Tensor x = x_in.detach();
  check_float("mean", x, "input");
  const auto mask = reduce_mask(x.dim(), dims, "mean");
  Tensor out = empty(shape_after(x.shape(), mask, keepdim), {.dtype = x.dtype()});
  dispatch_float(x.dtype(), "mean", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto acc = masked_sums<T>(x, mask);
    const double n = static_cast<double>(reduced_count(x.shape(), mask));
    std::transform(acc.begin(), acc.end(), out.data<T>(), [n](double v) { return T(v / n); });
  });
  return out;
}

ValuesIndices CpuBackend::max_with_indices(const Tensor& x, int64_t dim, bool keepdim) {
  return extremum<true>(x, dim, keepdim, "max");
}

ValuesIndices CpuBackend::min_with_indices(const Tensor& x, int64_t dim, bool keepdim) {
  return extremum<false>(x, dim, keepdim, "min");
}

// --- var, and the backward of mean, var and max/min: composed of other methods on CUDA --------

// More accurate than the CUDA composition: two passes accumulated in f64.
Tensor CpuBackend::var(const Tensor& x, const std::vector<int64_t>& dims, int64_t correction,
                       bool keepdim) {
  const auto mask = reduce_mask(x.dim(), dims, "var");
  check_float("var", x, "input");
  const Layout l = plan(x, mask);
  Tensor out = empty(shape_after(x.shape(), mask, keepdim), {.dtype = x.dtype()});
  dispatch_float(x.dtype(), "var", [&](auto tag) {
    using T = typename decltype(tag)::type;
    // Two passes, both accumulated in f64 lanes: sum()'s f32 lanes and a mean rounded to f32 (an
    // ulp of 1e4 is 1e-3) biased the squared deviations of offset data by up to 4e-5 relative.
    std::vector<double> m(static_cast<size_t>(l.outer * l.inner));
    run_reduce<double, double, T>(l, m.data(), [](T v, int64_t) { return static_cast<double>(v); });
    const double n = static_cast<double>(l.red);
    for (double& v : m) v /= n;
    std::vector<double> sq(m.size());
    const double* mp = m.data();
    run_reduce<double, double, T>(l, sq.data(), [mp](T v, int64_t i) {
      const double d = static_cast<double>(v) - mp[i];
      return d * d;
    });
    const double div = static_cast<double>(std::max<int64_t>(0, l.red - correction));
    std::transform(sq.begin(), sq.end(), out.data<T>(), [div](double v) { return T(v / div); });
  });
  return out;
}

Tensor CpuBackend::mean_backward(const Tensor& grad, const Shape& input_shape,
                                 const std::vector<int64_t>& dims, bool keepdim, int64_t count) {
  check_float("mean_backward", grad, "grad");
  Tensor out = sum_backward(grad, input_shape, dims, keepdim);
  dispatch_float(out.dtype(), "mean_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T scale = T(1) / static_cast<T>(count);
    T* p = out.data<T>();
    parallel_for(0, out.numel(), kReduceGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) p[i] *= scale;
    });
  });
  return out;
}

Tensor CpuBackend::var_backward(const Tensor& g, const Tensor& x, const std::vector<int64_t>& dims,
                                double scale) {
  check_float("var_backward", x, "input");
  const Tensor m = ops::mean(x, dims, true);
  Tensor out = empty(x.shape(), {.dtype = x.dtype()});
  const auto geo = coalesce<4>(
      x.shape(), {out.strides(), x.strides(), broadcast_strides(g.shape(), g.strides(), x.shape()),
                  broadcast_strides(m.shape(), m.strides(), x.shape())});
  dispatch_float(x.dtype(), "var_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* po = out.data<T>();
    const T *px = x.data<T>(), *pg = g.data<T>(), *pm = m.data<T>();
    const T s = static_cast<T>(scale);
    parallel_for_each_row(geo, kReduceGrain, [&](const auto& off, int64_t n, const auto& st) {
      for (int64_t i = 0; i < n; ++i)
        po[off[0] + i * st[0]] =
            pg[off[2] + i * st[2]] * s * (px[off[1] + i * st[1]] - pm[off[3] + i * st[3]]);
    });
  });
  return out;
}

Tensor CpuBackend::index_reduce_backward(const Tensor& grad, const Tensor& indices,
                                         const Shape& input_shape, int64_t dim, bool keepdim) {
  const char* op = "index_reduce_backward";
  Tensor out = zeros(input_shape, {.dtype = grad.dtype()});
  const int64_t ndim = static_cast<int64_t>(input_shape.size());
  if (ndim == 0) {
    stoke::copy_strided(out, reshaped(grad, {}));
    return out;
  }
  const int64_t d = wrap_dim(dim, ndim, op);
  std::vector<bool> mask(ndim, false);
  mask[d] = true;
  const Tensor g = grad_keepdim(grad, input_shape, mask, keepdim, op).contiguous();
  const Tensor idx = reshaped(indices, g.shape());
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < d; ++i) outer *= input_shape[i];
  for (int64_t i = d + 1; i < ndim; ++i) inner *= input_shape[i];
  const int64_t n = input_shape[d];
  dispatch_all(grad.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* po = out.data<T>();
    const T* pg = g.data<T>();
    const int64_t* pi = idx.data<int64_t>();
    parallel_for(0, outer * inner, kReduceGrain, [&](int64_t b, int64_t e) {
      for (int64_t j = b; j < e; ++j) {
        const int64_t o = j / inner, k = j % inner;
        po[(o * n + pi[j]) * inner + k] = pg[j];
      }
    });
  });
  return out;
}

}  // namespace stoke::ops::cpu
