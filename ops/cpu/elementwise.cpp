// sum_to: reduces a broadcast gradient back to an operand's shape. Every binary op's backward
// goes through it, so it is a parallel strided accumulation rather than a generic reduction:
// the gradient's dims are split into kept dims (those of the result) and reduced dims, each
// coalesced, and the loop order is chosen so that the innermost loop walks grad's innermost dim.
#include <algorithm>
#include <cstring>
#include <vector>

#include "ops/check.h"
#include "ops/cpu/backend.h"
#include "ops/cpu/elementwise_kernels.h"
#include "ops/creation.h"
#include "ops/elementwise.h"

namespace stoke::ops::cpu {

namespace {

// Calls f(offset, count, stride) for the elements [b, e) of a one-operand geometry, in row-major
// order, as runs that lie within one row each.
template <class F>
void for_each_span(const StridedGeometry<1>& g, int64_t b, int64_t e, F&& f) {
  if (b >= e) return;
  const int64_t inner = g.inner_size();
  const int64_t r0 = b / inner, r1 = (e + inner - 1) / inner;
  int64_t row = r0;
  for_each_row(g, r0, r1, [&](const auto& off, int64_t n, const auto& st) {
    const int64_t lo = row == r0 ? b - r0 * inner : 0;
    const int64_t hi = row == r1 - 1 ? e - row * inner : n;
    f(off[0] + lo * st[0], hi - lo, st[0]);
    ++row;
  });
}

// Sum of n values p[0], p[s], ... in double; four independent lanes when contiguous so the
// compiler can vectorize without reassociating a single accumulator.
template <class T>
double sum_run(const T* p, int64_t n, int64_t s) {
  if (s != 1) {
    double acc = 0;
    for (int64_t i = 0; i < n; ++i) acc += double(p[i * s]);
    return acc;
  }
  double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    a0 += double(p[i]);
    a1 += double(p[i + 1]);
    a2 += double(p[i + 2]);
    a3 += double(p[i + 3]);
  }
  for (; i < n; ++i) a0 += double(p[i]);
  return (a0 + a1) + (a2 + a3);
}

template <class T>
void sum_to_kernel(const Tensor& grad, const Tensor& out) {
  const Shape& gs = grad.shape();
  const Shape& gst = grad.strides();
  const Shape& shape = out.shape();
  const size_t lead = gs.size() - shape.size();
  Shape kept, kept_st, red, red_st;
  bool inner_reduced = false;
  for (size_t d = 0; d < gs.size(); ++d) {
    if (gs[d] == 1) continue;
    const bool reduced = d < lead || shape[d - lead] == 1;
    (reduced ? red : kept).push_back(gs[d]);
    (reduced ? red_st : kept_st).push_back(gst[d]);
    inner_reduced = reduced;
  }
  const auto kg = coalesce<1>(kept, {kept_st});
  const auto rg = coalesce<1>(red, {red_st});
  const int64_t m_total = kg.shape.numel(), r_total = rg.shape.numel();
  const T* g = static_cast<const T*>(grad.data_ptr());
  T* o = static_cast<T*>(out.data_ptr());

  // acc[m - mb] += sum over reduced elements [jb, je) of grad at kept element m, for m in
  // [mb, me).
  auto accumulate = [&](int64_t mb, int64_t me, int64_t jb, int64_t je, double* acc) {
    if (inner_reduced) {
      // grad's innermost dim is summed: one output element at a time, contiguous inner sums.
      int64_t k = 0;
      for_each_span(kg, mb, me, [&](int64_t ko, int64_t n, int64_t ks) {
        for (int64_t i = 0; i < n; ++i) {
          const T* base = g + ko + i * ks;
          double s = 0;
          for_each_span(rg, jb, je, [&](int64_t ro, int64_t rn, int64_t rs) {
            s += sum_run(base + ro, rn, rs);
          });
          acc[k++] += s;
        }
      });
    } else {
      // grad's innermost dim is kept: add whole runs of output elements per reduced element.
      for_each_span(rg, jb, je, [&](int64_t ro, int64_t rn, int64_t rs) {
        for (int64_t r = 0; r < rn; ++r) {
          const T* base = g + ro + r * rs;
          int64_t k = 0;
          for_each_span(kg, mb, me, [&](int64_t ko, int64_t n, int64_t ks) {
            const T* p = base + ko;
            double* a = acc + k;
            if (ks == 1) {
              for (int64_t i = 0; i < n; ++i) a[i] += double(p[i]);
            } else {
              for (int64_t i = 0; i < n; ++i) a[i] += double(p[i * ks]);
            }
            k += n;
          });
        }
      });
    }
  };

  const int64_t work_grain = kElementwiseGrain;
  if (m_total >= 4 * num_threads() || r_total < 8192) {
    // Enough output elements: split them over threads, each summing its block over all of R.
    constexpr int64_t kBlock = 256;
    const int64_t grain = std::max<int64_t>(1, work_grain / std::max<int64_t>(r_total, 1));
    parallel_for(0, m_total, grain, [&](int64_t b, int64_t e) {
      double acc[kBlock];
      for (int64_t mb = b; mb < e; mb += kBlock) {
        const int64_t me = std::min(e, mb + kBlock);
        std::fill(acc, acc + (me - mb), 0.0);
        accumulate(mb, me, 0, r_total, acc);
        for (int64_t m = mb; m < me; ++m) o[m] = static_cast<T>(acc[m - mb]);
      }
    });
    return;
  }
  // Few outputs, many reduced elements: split the reduced range, one partial sum per chunk.
  const int64_t grain = std::max<int64_t>(1, work_grain / m_total);
  const int64_t chunks = parallel_chunk_count(r_total, grain);
  std::vector<double> partial(static_cast<size_t>(chunks * m_total), 0.0);
  parallel_chunks(0, r_total, grain, [&](int64_t c, int64_t b, int64_t e) {
    accumulate(0, m_total, b, e, partial.data() + c * m_total);
  });
  for (int64_t m = 0; m < m_total; ++m) {
    double s = 0;
    for (int64_t c = 0; c < chunks; ++c) s += partial[c * m_total + m];
    o[m] = static_cast<T>(s);
  }
}

}  // namespace

Tensor CpuBackend::sum_to(const Tensor& grad, const Shape& shape) {
  Tensor out = empty(shape, {.dtype = grad.dtype()});
  if (grad.numel() == 0 || out.numel() == 0) {
    std::memset(out.data_ptr(), 0, out.numel() * out.element_size());
    return out;
  }
  dispatch_float(grad.dtype(), "sum_to",
                 [&](auto tag) { sum_to_kernel<typename decltype(tag)::type>(grad, out); });
  return out;
}

}  // namespace stoke::ops::cpu
