// Shapes and strides: small vectors of int64 with printing ("[64, 3, 32, 32]") and the helpers
// every op needs (numel, contiguous strides, dim wrapping, NumPy broadcasting).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <string>
#include <vector>

namespace stoke {

class Shape : public std::vector<int64_t> {
 public:
  using std::vector<int64_t>::vector;
  Shape() = default;
  Shape(const std::vector<int64_t>& v) : std::vector<int64_t>(v) {}
  int64_t numel() const;
  std::string str() const;
};

std::ostream& operator<<(std::ostream& os, const Shape& s);

// Row-major strides (in elements) for a contiguous tensor of this shape.
Shape contiguous_strides(const Shape& shape);

// Wraps a possibly negative dim into [0, ndim); `op` names the caller in the error.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);

// NumPy broadcasting of two shapes; throws naming `op` and both shapes when incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

// Strides to read a tensor of `shape`/`strides` as if it had `target` shape (0 on broadcast dims).
Shape broadcast_strides(const Shape& shape, const Shape& strides, const Shape& target);

}  // namespace stoke
