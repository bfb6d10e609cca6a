// PyTorch-style printing: tensor([[0.1234, 1.0000], ...], dtype=f32), with the middle of large
// dims elided (3 items at each edge once a tensor has more than 1000 elements).
#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/tensor.h"

namespace stoke {
namespace {

constexpr int64_t kSummarizeAbove = 1000;
constexpr int64_t kEdgeItems = 3;

std::string format_value(double v, DType t) {
  char buf[64];
  if (t == DType::boolean) return v != 0 ? "True" : "False";
  if (!is_floating(t)) {
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
  } else if (std::isnan(v)) {
    return "nan";
  } else if (std::isinf(v)) {
    return v > 0 ? "inf" : "-inf";
  } else if (v != 0 && (std::fabs(v) >= 1e8 || std::fabs(v) < 1e-4)) {
    std::snprintf(buf, sizeof buf, "%.4e", v);
  } else {
    std::snprintf(buf, sizeof buf, "%.4f", v);
  }
  return buf;
}

void print_dim(std::ostream& os, const std::vector<double>& values, const Shape& shape,
               const Shape& strides, int64_t dim, int64_t offset, DType t, bool summarize,
               int indent) {
  if (dim == static_cast<int64_t>(shape.size())) {
    os << format_value(values[offset], t);
    return;
  }
  os << '[';
  const int64_t n = shape[dim];
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && n > 2 * kEdgeItems && i == kEdgeItems) {
      os << (dim + 1 == static_cast<int64_t>(shape.size()) ? "..., " : "...,\n");
      if (dim + 1 != static_cast<int64_t>(shape.size())) os << std::string(indent + 1, ' ');
      i = n - kEdgeItems;
    }
    print_dim(os, values, shape, strides, dim + 1, offset + i * strides[dim], t, summarize,
              indent + 1);
    if (i + 1 < n) {
      if (dim + 1 == static_cast<int64_t>(shape.size())) {
        os << ", ";
      } else {
        os << ",\n" << std::string(indent + 1, ' ');
      }
    }
  }
  os << ']';
}

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  std::ostringstream os;
  const std::vector<double> values = to_vector<double>();
  os << "tensor(";
  print_dim(os, values, shape(), contiguous_strides(shape()), 0, 0, dtype(),
            numel() > kSummarizeAbove, 7);
  os << ", dtype=" << dtype();
  if (!device().is_cpu()) os << ", device=" << device();
  if (grad_fn()) {
    os << ", grad_fn";
  } else if (requires_grad()) {
    os << ", requires_grad=True";
  }
  os << ')';
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  return os << t.str();
}

}  // namespace stoke
