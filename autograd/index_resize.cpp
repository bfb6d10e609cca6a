#include "autograd/index_resize.h"

#include <algorithm>
#include <cmath>

#include "autograd/elementwise.h"
#include "autograd/index.h"
#include "ops/creation.h"

namespace stoke {

namespace {

// A 1-D i64 index on x's device.
Tensor index_on(const std::vector<int64_t>& idx, const Tensor& like) {
  return from_vector(idx, {static_cast<int64_t>(idx.size())}, {.dtype = DType::i64})
      .to(like.device());
}

// Weights (out) shaped to broadcast along dim `dim` of an x with `rank` dims.
Tensor weights_along(const std::vector<double>& w, int64_t dim, int64_t rank, const Tensor& like) {
  Shape shape(static_cast<size_t>(rank), 1);
  shape[static_cast<size_t>(dim)] = static_cast<int64_t>(w.size());
  return from_vector(w, shape, {.dtype = DType::f64}).to(like.dtype()).to(like.device());
}

Tensor pad_constant(Tensor x, int64_t dim, int64_t before, int64_t after, double value) {
  // Negative pads crop first; positive ones add slabs of `value`.
  const int64_t n = x.size(dim);
  const int64_t start = std::max<int64_t>(0, -before), stop = n - std::max<int64_t>(0, -after);
  STOKE_CHECK(stop >= start, "pad", "pads (", before, ", ", after, ") crop dim ", dim, " of size ",
              n, " below 0");
  if (start > 0 || stop < n) x = x.slice(dim, start, stop);
  if (before <= 0 && after <= 0) return x;
  std::vector<Tensor> parts;
  auto slab = [&](int64_t size) {
    Shape shape = x.shape();
    shape[static_cast<size_t>(dim)] = size;
    return full(shape, value, {.dtype = x.dtype(), .device = x.device()});
  };
  if (before > 0) parts.push_back(slab(before));
  parts.push_back(x);
  if (after > 0) parts.push_back(slab(after));
  return cat(parts, dim);
}

Tensor pad_indexed(const Tensor& x, int64_t dim, int64_t before, int64_t after, PadMode mode) {
  const int64_t n = x.size(dim);
  STOKE_CHECK(before >= 0 && after >= 0, "pad", mode == PadMode::reflect ? "reflect" : "replicate",
              " padding takes no negative pads, got (", before, ", ", after, ") for dim ", dim);
  if (mode == PadMode::reflect)
    STOKE_CHECK(before < n && after < n, "pad", "reflect padding (", before, ", ", after,
                ") must be smaller than dim ", dim, "'s size ", n);
  else
    STOKE_CHECK(n > 0, "pad", "replicate padding of dim ", dim, " of size 0");
  std::vector<int64_t> idx;
  idx.reserve(static_cast<size_t>(n + before + after));
  for (int64_t i = -before; i < n + after; ++i) {
    if (mode == PadMode::reflect)
      idx.push_back(i < 0 ? -i : i >= n ? 2 * (n - 1) - i : i);
    else
      idx.push_back(std::clamp<int64_t>(i, 0, n - 1));
  }
  return index_select(x, dim, index_on(idx, x));
}

// Source rows of torch's 'nearest' for `out` rows from `in`; scale as torch computes it, in float.
std::vector<int64_t> nearest_sources(int64_t in, int64_t out, double scale_factor) {
  const float scale = scale_factor > 0 ? static_cast<float>(1.0 / scale_factor)
                                       : static_cast<float>(in) / static_cast<float>(out);
  std::vector<int64_t> idx(static_cast<size_t>(out));
  for (int64_t d = 0; d < out; ++d)
    idx[static_cast<size_t>(d)] =
        std::min<int64_t>(static_cast<int64_t>(std::floor(static_cast<float>(d) * scale)), in - 1);
  return idx;
}

// Source rows and weights of torch's bilinear along one dim, computed in M: torch's op math type
// (area_pixel_compute_scale<opmath_t>), double for f64 inputs, float for the others.
template <class M>
void linear_sources(int64_t in, int64_t out, double scale_factor, bool align_corners,
                    std::vector<int64_t>& i0, std::vector<int64_t>& i1, std::vector<double>& w0,
                    std::vector<double>& w1) {
  M scale;
  if (align_corners)
    scale = out > 1 ? static_cast<M>(in - 1) / static_cast<M>(out - 1) : M(0);
  else
    scale = scale_factor > 0 ? static_cast<M>(1.0 / scale_factor)
                             : static_cast<M>(in) / static_cast<M>(out);
  for (int64_t d = 0; d < out; ++d) {
    M src =
        align_corners ? scale * static_cast<M>(d) : scale * (static_cast<M>(d) + M(0.5)) - M(0.5);
    if (src < 0) src = 0;
    const int64_t lo = std::min<int64_t>(static_cast<int64_t>(src), in - 1);
    const size_t k = static_cast<size_t>(d);
    i0[k] = lo;
    i1[k] = std::min<int64_t>(lo + 1, in - 1);
    const M l1 = src - static_cast<M>(lo);
    w1[k] = l1;
    w0[k] = M(1) - l1;
  }
}

// Bilinear along one dim: x[i0] * (1 - l) + x[i1] * l per output row, torch's source positions.
Tensor linear_along(const Tensor& x, int64_t dim, int64_t out, double scale_factor,
                    bool align_corners) {
  const int64_t in = x.size(dim);
  std::vector<int64_t> i0(static_cast<size_t>(out)), i1(static_cast<size_t>(out));
  std::vector<double> w0(static_cast<size_t>(out)), w1(static_cast<size_t>(out));
  if (x.dtype() == DType::f64)
    linear_sources<double>(in, out, scale_factor, align_corners, i0, i1, w0, w1);
  else
    linear_sources<float>(in, out, scale_factor, align_corners, i0, i1, w0, w1);
  const int64_t rank = x.dim();
  return index_select(x, dim, index_on(i0, x)) * weights_along(w0, dim, rank, x) +
         index_select(x, dim, index_on(i1, x)) * weights_along(w1, dim, rank, x);
}

}  // namespace

Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, const PadOptions& options) {
  STOKE_CHECK(x.defined(), "pad", "expected a defined tensor");
  STOKE_CHECK(pads.size() % 2 == 0 && static_cast<int64_t>(pads.size()) / 2 <= x.dim(), "pad",
              "expected (before, after) pairs for at most ", x.dim(), " dims, got ", pads.size(),
              " values");
  STOKE_CHECK(options.mode == PadMode::constant || is_floating(x.dtype()), "pad",
              "reflect and replicate padding take floating tensors, got ", x.dtype());
  Tensor y = x;
  for (size_t k = 0; k < pads.size() / 2; ++k) {
    const int64_t dim = x.dim() - 1 - static_cast<int64_t>(k);
    const int64_t before = pads[2 * k], after = pads[2 * k + 1];
    if (before == 0 && after == 0) continue;
    y = options.mode == PadMode::constant ? pad_constant(y, dim, before, after, options.value)
                                          : pad_indexed(y, dim, before, after, options.mode);
  }
  return y;
}

Tensor interpolate(const Tensor& x, const InterpolateOptions& options) {
  const char* op = "interpolate";
  // torch reads a 3-D input as (N, C, L), a 1-D resize: rather than guess, stoke takes 4-D only.
  STOKE_CHECK(x.defined() && x.dim() == 4, op, "expected (N, C, H, W), got ",
              x.defined() ? x.shape() : Shape{});
  STOKE_CHECK(is_floating(x.dtype()), op, "expected a floating tensor, got ", x.dtype());
  const bool by_size = options.size[0] > 0 || options.size[1] > 0;
  const bool by_scale = options.scale_factor[0] > 0 || options.scale_factor[1] > 0;
  STOKE_CHECK(by_size != by_scale, op, "give exactly one of size and scale_factor");
  STOKE_CHECK(!options.align_corners || options.mode == InterpolateMode::bilinear, op,
              "align_corners is for bilinear interpolation only");
  Tensor y = x;
  for (int k = 0; k < 2; ++k) {
    const int64_t dim = 2 + k, in = x.size(dim);
    const double scale = by_scale ? options.scale_factor[static_cast<size_t>(k)] : 0.0;
    const int64_t out = by_size ? options.size[static_cast<size_t>(k)]
                                : static_cast<int64_t>(std::floor(static_cast<double>(in) * scale));
    STOKE_CHECK(out > 0 && in > 0, op, "input ", x.shape(), " gives an empty output (", out,
                " rows along dim ", dim, ")");
    if (out == in && (!by_scale || scale == 1.0)) continue;
    if (options.mode == InterpolateMode::nearest)
      y = index_select(y, dim, index_on(nearest_sources(in, out, scale), y));
    else
      y = linear_along(y, dim, out, scale, options.align_corners);
  }
  return y;
}

}  // namespace stoke
