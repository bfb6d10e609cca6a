// The comparison of stoke's topk with torch.topk's fixtures (tests/fixtures/topk.txt, written by
// make_topk_fixtures.py), shared by the CPU test (tests/autograd/test_topk.cpp) and the emulated
// cuda one (tests/cuda/test_ops_cuda_topk.cpp). Exact throughout: topk selects and copies values,
// it computes none.
//
// torch fixes the values' order (largest: NaN first, then descending; smallest: ascending, NaN
// last) but not the order of equal values, so against torch this checks the values in order and,
// for each group of equal values that k takes whole, the set of its indices. stoke's own rule for
// ties (the lowest remaining index first: docs/design-notes.md) is checked on its own, and with it
// which members of a group that k cuts are taken.
#pragma once

#include <catch2/catch.hpp>
#include <cmath>
#include <set>
#include <vector>

#include "stoke/stoke.h"
#include "support/fixture.h"
#include "support/fixture_tensor.h"

namespace stoke::testing {

// One value class: NaN is its own class; -0 and 0 are one (they compare equal, as in torch).
inline bool same_class(double a, double b) {
  return std::isnan(a) ? std::isnan(b) : a == b;
}

// Rows along `dim` of a CPU tensor, as vectors of double (i64 values are exact below 2^53).
inline std::vector<std::vector<double>> rows_along(const Tensor& t, int64_t dim) {
  const Tensor r = t.to(Device::cpu()).to(DType::f64).transpose(dim, -1).contiguous();
  const int64_t n = r.size(-1), count = n == 0 ? 0 : r.numel() / n;
  const std::vector<double> v = r.to_vector<double>();
  std::vector<std::vector<double>> out(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) out[i].assign(v.begin() + i * n, v.begin() + (i + 1) * n);
  return out;
}

// got: stoke's topk of `x` (any device) for the case's k, dim and largest.
inline void check_topk_matches_torch(const Tensor& x, const ValuesIndices& got,
                                     const FixtureCase& c) {
  const int64_t k = c.attr_int("k"), dim = c.attr_int("dim");
  const Shape want_shape(c.tensor("values").shape);
  REQUIRE(got.values.shape() == want_shape);
  REQUIRE(got.indices.shape() == want_shape);
  CHECK(got.values.dtype() == x.dtype());
  CHECK(got.indices.dtype() == DType::i64);
  CHECK(got.values.device() == x.device());
  CHECK(got.indices.device() == x.device());
  const auto xr = rows_along(x, dim), vr = rows_along(got.values, dim);
  const auto ir = rows_along(got.indices, dim);
  const auto tv = rows_along(to_tensor(c.tensor("values"), DType::f64), dim);
  const auto ti = rows_along(to_tensor(c.tensor("indices")), dim);
  REQUIRE(xr.size() == vr.size());
  for (size_t r = 0; r < xr.size(); ++r) {
    INFO("row " << r << " along dim " << dim);
    const std::vector<double>& row = xr[r];
    const int64_t n = static_cast<int64_t>(row.size());
    std::vector<bool> taken(static_cast<size_t>(n), false);
    for (int64_t j = 0; j < k; ++j) {
      INFO("output " << j << ": value " << vr[r][j] << " index " << ir[r][j] << ", torch "
                     << tv[r][j] << " at " << ti[r][j]);
      // torch's values, in torch's order.
      CHECK(same_class(vr[r][j], tv[r][j]));
      // A distinct index, holding exactly the value returned (sign of zero included).
      const int64_t i = static_cast<int64_t>(ir[r][j]);
      REQUIRE(i >= 0);
      REQUIRE(i < n);
      CHECK_FALSE(taken[i]);
      const double xi = row[static_cast<size_t>(i)];
      CHECK(std::isnan(xi) == std::isnan(vr[r][j]));
      if (!std::isnan(xi)) CHECK((xi == vr[r][j] && std::signbit(xi) == std::signbit(vr[r][j])));
      // stoke's tie rule: the lowest index of this value not taken yet.
      int64_t lowest = -1;
      for (int64_t p = 0; p < n && lowest < 0; ++p)
        if (!taken[p] && same_class(row[static_cast<size_t>(p)], vr[r][j])) lowest = p;
      CHECK(i == lowest);
      taken[i] = true;
    }
    // Each group of equal values that k takes whole has torch's set of indices.
    for (int64_t j = 0; j < k; ++j) {
      const double v = tv[r][j];
      int64_t in_row = 0;
      for (double e : row) in_row += same_class(e, v);
      std::multiset<int64_t> ours, theirs;
      for (int64_t q = 0; q < k; ++q) {
        if (same_class(vr[r][q], v)) ours.insert(static_cast<int64_t>(ir[r][q]));
        if (same_class(tv[r][q], v)) theirs.insert(static_cast<int64_t>(ti[r][q]));
      }
      if (static_cast<int64_t>(theirs.size()) == in_row) CHECK(ours == theirs);
    }
  }
}

}  // namespace stoke::testing
