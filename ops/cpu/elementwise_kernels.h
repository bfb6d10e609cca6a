// Private helpers shared by the elementwise CPU kernels (elementwise_unary.cpp,
// elementwise_binary.cpp, elementwise.cpp): one templated map over broadcast operands and the
// scalar conversion of tensor-scalar ops.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <tuple>
#include <type_traits>
#include <utility>

#include "core/grad_mode.h"
#include "core/strided.h"
#include "core/tensor.h"
#include "ops/check.h"

namespace stoke::ops::cpu {

// Elements per parallel chunk: below this a loop runs on the calling thread.
inline constexpr int64_t kElementwiseGrain = 1 << 15;

namespace detail {

// Operands laid out transposed relative to the output (inner stride large, next stride small)
// read one cache line per element when walked row by row; in 2-D tiles each line is reused.
constexpr int64_t kTile = 32;

template <size_t N>
bool use_tiles(const StridedGeometry<N>& g) {
  const size_t nd = g.shape.size();
  if (nd < 2 || g.shape[nd - 1] < 8 || g.shape[nd - 2] < 8) return false;
  for (size_t k = 0; k < N; ++k) {
    const int64_t inner = std::abs(g.strides[k][nd - 1]), next = std::abs(g.strides[k][nd - 2]);
    if (inner > 1 && next < inner) return true;
  }
  return false;
}

// map over kTile x kTile tiles of the last two dims, tiles split over the thread pool.
template <class TO, class... TI, size_t... I, class F, size_t N>
void tiled_map(std::index_sequence<I...>, const StridedGeometry<N>& g, TO* o,
               const std::tuple<const TI*...>& p, F& f) {
  const size_t nd = g.shape.size();
  const int64_t rows = g.shape[nd - 2], cols = g.shape[nd - 1];
  const int64_t tr = (rows + kTile - 1) / kTile, tc = (cols + kTile - 1) / kTile;
  const int64_t outer = g.shape.numel() / (rows * cols);
  std::array<int64_t, N> rs, cs;
  for (size_t k = 0; k < N; ++k) {
    rs[k] = g.strides[k][nd - 2];
    cs[k] = g.strides[k][nd - 1];
  }
  const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / (kTile * kTile));
  parallel_for(0, outer * tr * tc, grain, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      int64_t rest = t / (tr * tc);
      const int64_t tile = t % (tr * tc);
      const int64_t r0 = (tile / tc) * kTile, c0 = (tile % tc) * kTile;
      const int64_t r1 = std::min(rows, r0 + kTile), c1 = std::min(cols, c0 + kTile);
      std::array<int64_t, N> off{};
      for (size_t d = nd - 2; d-- > 0;) {
        const int64_t i = rest % g.shape[d];
        rest /= g.shape[d];
        for (size_t k = 0; k < N; ++k) off[k] += i * g.strides[k][d];
      }
      for (int64_t r = r0; r < r1; ++r) {
        TO* op = o + off[0] + r * rs[0];
        const std::tuple<const TI*...> q{std::get<I>(p) + off[I + 1] + r * rs[I + 1]...};
        for (int64_t c = c0; c < c1; ++c) op[c * cs[0]] = f(std::get<I>(q)[c * cs[I + 1]]...);
      }
    }
  });
}

template <class TO, class... TI, size_t... I, class F>
void map_impl(std::index_sequence<I...>, const Tensor& out,
              const std::array<Tensor, sizeof...(TI)>& in, F& f) {
  constexpr size_t N = sizeof...(TI) + 1;
  const int64_t n = out.numel();
  if (n == 0) return;
  TO* o = static_cast<TO*>(out.data_ptr());
  const std::tuple<const TI*...> p{static_cast<const TI*>(in[I].data_ptr())...};
  const bool flat =
      out.is_contiguous() && ((in[I].is_contiguous() && in[I].shape() == out.shape()) && ...);
  if (flat) {
    // The common case (same-shape contiguous operands): one flat loop the compiler vectorizes.
    parallel_for(0, n, kElementwiseGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) o[i] = f(std::get<I>(p)[i]...);
    });
    return;
  }
  const std::array<Shape, N> strides{
      out.strides(), broadcast_strides(in[I].shape(), in[I].strides(), out.shape())...};
  const auto g = coalesce<N>(out.shape(), strides);
  if (use_tiles(g)) {
    tiled_map<TO, TI...>(std::index_sequence<I...>{}, g, o, p, f);
    return;
  }
  parallel_for_each_row(g, kElementwiseGrain, [&](const auto& off, int64_t cnt, const auto& st) {
    TO* op = o + off[0];
    const std::tuple<const TI*...> q{std::get<I>(p) + off[I + 1]...};
    if (st[0] == 1 && ((st[I + 1] == 1) && ...)) {
      for (int64_t i = 0; i < cnt; ++i) op[i] = f(std::get<I>(q)[i]...);
    } else {
      for (int64_t i = 0; i < cnt; ++i) op[i * st[0]] = f(std::get<I>(q)[i * st[I + 1]]...);
    }
  });
}

}  // namespace detail

// out[i] = f(in[0][i], in[1][i], ...) where every input is broadcast to out's shape. `out` may have
// any (non-overlapping) strides and may be one of the inputs (in-place ops), since each output
// element only reads the inputs at its own position.
template <class TO, class... TI, class F>
void map(const Tensor& out, const std::array<Tensor, sizeof...(TI)>& in, F f) {
  detail::map_impl<TO, TI...>(std::index_sequence_for<TI...>{}, out, in, f);
}

// The scalar operand of a tensor-scalar op as T; integer tensors take integral scalars only (no
// silent promotion to floating point, no silent truncation).
template <class T>
T scalar_as(double v, const char* op) {
  if constexpr (std::is_integral_v<T>) {
    STOKE_CHECK(std::trunc(v) == v && v >= double(std::numeric_limits<T>::lowest()) &&
                    v <= double(std::numeric_limits<T>::max()),
                op, "expected an integral scalar in the range of dtype ", dtype_of<T>(), ", got ",
                v, " (cast the tensor to a floating dtype first)");
  }
  return static_cast<T>(v);
}

}  // namespace stoke::ops::cpu
