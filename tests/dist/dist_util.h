// Shared by the dist/ tests: deterministic inputs, f64 references and tolerances. Catch2's
// assertions are not thread-safe, so rank threads only compute; the test thread checks.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "stoke/stoke.h"

namespace stoke::dist::test {

// max |a - b| over every element, over the largest |b|: the relative distance of two runs.
inline double relative_diff(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  double d = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const auto va = a[i].to_vector<double>(), vb = b[i].to_vector<double>();
    for (size_t k = 0; k < va.size(); ++k) {
      d = std::max(d, std::abs(va[k] - vb[k]));
      scale = std::max(scale, std::abs(vb[k]));
    }
  }
  return d / scale;
}

// A value in [-2, 2) that depends only on (rank, i).
inline double value_of(int rank, int64_t i) {
  uint64_t h = (static_cast<uint64_t>(rank) + 1) * 0x9E3779B97F4A7C15ull ^
               (static_cast<uint64_t>(i) + 1) * 0xBF58476D1CE4E5B9ull;
  h ^= h >> 31;
  h *= 0x94D049BB133111EBull;
  h ^= h >> 29;
  return static_cast<double>(h >> 11) * 0x1.0p-53 * 4 - 2;
}

// Rank r's input, rounded to dtype (the reference reads the rounded values back).
inline Tensor make_input(int rank, int64_t n, DType dtype) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = value_of(rank, i);
  return from_vector<double>(v, {n}, {.dtype = dtype});
}

// Relative rounding of one step in dtype, with a factor 2 of margin.
inline double eps_of(DType t) {
  switch (t) {
    case DType::f64:
      return 0x1.0p-52;
    case DType::f32:
      return 0x1.0p-23;
    case DType::f16:
      return 0x1.0p-10;
    case DType::bf16:
      return 0x1.0p-7;
    default:
      return 0;
  }
}

inline bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() && a.dtype() == b.dtype() &&
         (a.numel() == 0 ||
          std::memcmp(a.data_ptr(), b.data_ptr(), a.numel() * a.element_size()) == 0);
}

// The reduction of ranks' values, in f64, with a bound on the error of any order of summation
// that rounds to dtype after each of the N - 1 adds and once more for the division.
struct Reference {
  std::vector<double> value, tol;
};

inline Reference reduce_reference(const std::vector<std::vector<double>>& in, ReduceOp op,
                                  DType dtype) {
  const size_t n = in.empty() ? 0 : in[0].size();
  const int ranks = static_cast<int>(in.size());
  Reference r{std::vector<double>(n), std::vector<double>(n)};
  for (size_t i = 0; i < n; ++i) {
    double acc = in[0][i], abs_sum = std::fabs(in[0][i]);
    for (int k = 1; k < ranks; ++k) {
      acc = op == ReduceOp::max ? std::max(acc, in[k][i]) : acc + in[k][i];
      abs_sum += std::fabs(in[k][i]);
    }
    if (op == ReduceOp::avg) {
      acc /= ranks;
      abs_sum /= ranks;
    }
    r.value[i] = acc;
    r.tol[i] = op == ReduceOp::max ? 0.0 : (ranks + 1) * eps_of(dtype) * abs_sum;
  }
  return r;
}

// "" when every element is within tolerance, else the first that is not.
inline std::string check_close(const std::vector<double>& got, const Reference& ref,
                               size_t offset = 0) {
  for (size_t i = 0; i < got.size(); ++i) {
    const double want = ref.value[offset + i], tol = ref.tol[offset + i];
    if (!(std::fabs(got[i] - want) <= tol))
      return "element " + std::to_string(offset + i) + ": got " + std::to_string(got[i]) +
             ", want " + std::to_string(want) + " +- " + std::to_string(tol);
  }
  return "";
}

inline const char* dtype_str(DType t) {
  return dtype_name(t);
}

}  // namespace stoke::dist::test
