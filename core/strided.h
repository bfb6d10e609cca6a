// Iteration over N strided operands of one shape, row by row. The innermost dimension is handed
// to the kernel as a (count, stride) pair so that kernels write a plain, vectorizable inner loop;
// adjacent dimensions that are laid out contiguously for every operand are merged first.
#pragma once

#include <array>
#include <cstdint>

#include "core/parallel.h"
#include "core/shape.h"

namespace stoke {

template <size_t N>
struct StridedGeometry {
  Shape shape;  // at least 1 dim after coalescing
  std::array<Shape, N> strides;

  int64_t inner_size() const { return shape.back(); }
  int64_t rows() const { return inner_size() == 0 ? 0 : shape.numel() / inner_size(); }
};

// Drops size-1 dims and merges dims that are contiguous with their inner neighbour for all N
// operands.
template <size_t N>
StridedGeometry<N> coalesce(const Shape& shape, const std::array<Shape, N>& strides) {
  StridedGeometry<N> g;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = !g.shape.empty();
    for (size_t k = 0; k < N && merge; ++k) merge = g.strides[k].back() == strides[k][d] * shape[d];
    if (merge) {
      g.shape.back() *= shape[d];
      for (size_t k = 0; k < N; ++k) g.strides[k].back() = strides[k][d];
    } else {
      g.shape.push_back(shape[d]);
      for (size_t k = 0; k < N; ++k) g.strides[k].push_back(strides[k][d]);
    }
  }
  if (g.shape.empty()) {
    g.shape.push_back(shape.numel() == 0 ? 0 : 1);
    for (size_t k = 0; k < N; ++k) g.strides[k].push_back(1);
  }
  return g;
}

// Calls f(offsets, count, inner_strides) for rows [row_begin, row_end) of the geometry, where
// offsets[k] is the element offset of the row's first element in operand k.
template <size_t N, class F>
void for_each_row(const StridedGeometry<N>& g, int64_t row_begin, int64_t row_end, F&& f) {
  const int64_t outer_dims = static_cast<int64_t>(g.shape.size()) - 1;
  const int64_t inner = g.inner_size();
  std::array<int64_t, N> inner_strides;
  for (size_t k = 0; k < N; ++k) inner_strides[k] = g.strides[k].back();
  // Odometer over the outer dims, started at row_begin.
  int64_t index[16] = {0};
  std::array<int64_t, N> offsets{};
  int64_t r = row_begin;
  for (int64_t d = outer_dims - 1; d >= 0; --d) {
    index[d] = r % g.shape[d];
    r /= g.shape[d];
    for (size_t k = 0; k < N; ++k) offsets[k] += index[d] * g.strides[k][d];
  }
  for (int64_t row = row_begin; row < row_end; ++row) {
    f(offsets, inner, inner_strides);
    for (int64_t d = outer_dims - 1; d >= 0; --d) {
      for (size_t k = 0; k < N; ++k) offsets[k] += g.strides[k][d];
      if (++index[d] < g.shape[d]) break;
      for (size_t k = 0; k < N; ++k) offsets[k] -= index[d] * g.strides[k][d];
      index[d] = 0;
    }
  }
}

// for_each_row over all rows, split over the thread pool when there are at least `grain`
// elements per chunk.
template <size_t N, class F>
void parallel_for_each_row(const StridedGeometry<N>& g, int64_t grain, F&& f) {
  const int64_t rows = g.rows();
  const int64_t inner = g.inner_size();
  if (rows == 0) return;
  const int64_t row_grain = std::max<int64_t>(1, grain / std::max<int64_t>(inner, 1));
  parallel_for(0, rows, row_grain, [&](int64_t b, int64_t e) { for_each_row(g, b, e, f); });
}

}  // namespace stoke
