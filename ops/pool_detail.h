// The window geometry of max/avg pooling after defaults are applied, shared by the entry points
// (ops/pool.cpp, which checks it) and the CPU kernels (ops/cpu/pool.cpp). Internal to ops/.
#pragma once

#include "core/tensor.h"
#include "ops/pool.h"

namespace stoke::ops {

// Plane count, plane sizes and the window parameters after defaults are applied.
struct PoolGeometry {
  int64_t planes = 0, H = 0, W = 0, OH = 0, OW = 0;
  int64_t kh = 0, kw = 0, sh = 0, sw = 0, ph = 0, pw = 0;
  Shape out_shape;
};

// The geometry of pooling an input of shape `in` (3 or 4 dims) with options `o`; throws naming
// `op` when the window is invalid or the output would be empty.
PoolGeometry pool_geometry(const char* op, const Shape& in, const Pool2dOptions& o);

}  // namespace stoke::ops
