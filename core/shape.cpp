#include "core/shape.h"

#include <limits>
#include <sstream>

#include "core/error.h"

namespace stoke {

int64_t Shape::numel() const {
  // A zero dim makes the shape empty whatever the others multiply to ([2^62, 2^62, 0] is a valid
  // empty shape); otherwise the product must fit int64 (signed overflow is undefined behaviour,
  // and a wrapped count would size an allocation wrongly).
  for (int64_t d : *this)
    if (d == 0) return 0;
  int64_t n = 1;
  for (int64_t d : *this) {
    STOKE_CHECK(!__builtin_mul_overflow(n, d, &n), "shape", "shape ", *this,
                " has more than 2^63 - 1 elements");
  }
  return n;
}

std::string Shape::str() const {
  std::ostringstream os;
  os << *this;
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Shape& s) {
  os << '[';
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  return os << ']';
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  bool overflow = false;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    // Saturates: only an empty shape can get here (numel() refuses the others), and an empty
    // tensor's strides never address memory.
    if (!overflow) overflow = __builtin_mul_overflow(s, shape[i] > 1 ? shape[i] : 1, &s);
    if (overflow) s = std::numeric_limits<int64_t>::max();
  }
  return strides;
}

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  const int64_t lo = ndim == 0 ? -1 : -ndim, hi = ndim == 0 ? 0 : ndim - 1;
  STOKE_CHECK(dim >= lo && dim <= hi, op, "dim ", dim, " out of range for a tensor with ", ndim,
              " dims (expected in [", lo, ", ", hi, "])");
  return dim < 0 ? dim + (ndim == 0 ? 1 : ndim) : dim;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    STOKE_CHECK(da == db || da == 1 || db == 1, op, "shapes ", a, " and ", b,
                " cannot be broadcast together (dim ", i, ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Shape broadcast_strides(const Shape& shape, const Shape& strides, const Shape& target) {
  Shape out(target.size(), 0);
  const size_t lead = target.size() - shape.size();
  for (size_t i = 0; i < shape.size(); ++i)
    out[lead + i] = (shape[i] == 1 && target[lead + i] != 1) ? 0 : strides[i];
  return out;
}

}  // namespace stoke
