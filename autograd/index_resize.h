// Padding and resizing (F.pad and F.interpolate), composed of differentiable index ops: a gather
// of rows (index_select) per resized dim, with the interpolation weights as constants, so they run
// on every device and autograd scatters their gradients back.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace stoke {

enum class PadMode { constant, reflect, replicate };
struct PadOptions {
  PadMode mode = PadMode::constant;
  double value = 0;  // constant mode
};
// pad(x, {left, right, top, bottom}): `pads` holds (before, after) pairs starting from the last
// dim, as F.pad. Constant padding may be negative (crops); reflect (the edge not repeated) needs
// each pad smaller than its dim, replicate repeats the edge.
Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, const PadOptions& options = {});

enum class InterpolateMode { nearest, bilinear };
struct InterpolateOptions {
  std::array<int64_t, 2> size{0, 0};         // the output (H, W); or, when 0,
  std::array<double, 2> scale_factor{0, 0};  // the output is floor(input * scale_factor)
  InterpolateMode mode = InterpolateMode::nearest;
  bool align_corners = false;  // bilinear: corners map to corners (torch's flag)
};
// F.interpolate of (N, C, H, W): torch's 'nearest' (source index
// floor(dst * in / out), as torch computes it, in float) and 'bilinear' (half-pixel centres, or
// align_corners). With scale_factor the sources use 1 / scale_factor, as torch does.
Tensor interpolate(const Tensor& x, const InterpolateOptions& options);

}  // namespace stoke
