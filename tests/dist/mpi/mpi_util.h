// Shared by the MPI tests (tests/dist/mpi): the job's communicator and closed-form inputs. Every
// rank runs every case and checks its own results, so ranks must issue the same collectives.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "dist/dist_util.h"

namespace stoke::dist::test {

// The communicator over MPI_COMM_WORLD that mpi_main.cpp makes for the whole run.
MpiCommunicator& world();

constexpr DType kFloatDtypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16};
constexpr ReduceOp kReduceOps[] = {ReduceOp::sum, ReduceOp::avg, ReduceOp::max};
constexpr int64_t kLengths[] = {0, 1, 7, 1000};

// x as stored in dtype.
inline double rounded(double x, DType dtype) {
  switch (dtype) {
    case DType::f32:
      return static_cast<float>(x);
    case DType::f16:
      return static_cast<float>(Half(static_cast<float>(x)));
    case DType::bf16:
      return static_cast<float>(BFloat16(static_cast<float>(x)));
    default:
      return x;
  }
}

// Rank r's input: r + 1 + i at index i (i counted from `first`), stored in dtype.
inline Tensor ramp(int rank, int64_t n, DType dtype, int64_t first = 0) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = rank + 1 + first + i;
  return from_vector<double>(v, {n}, {.dtype = dtype});
}

// The reduction of ramp() over `ranks` ranks at index i: integers, so f32 and f64 sums are exact;
// avg = sum / ranks is a multiple of 1/2, exact too.
inline double ramp_reduced(ReduceOp op, int ranks, int64_t i, DType dtype) {
  if (op == ReduceOp::max) return rounded(ranks + i, dtype);
  double s = 0;
  for (int r = 0; r < ranks; ++r) s += rounded(r + 1 + i, dtype);
  return op == ReduceOp::avg ? s / ranks : s;
}

// "" when t holds ramp_reduced at indices first, first + 1, ...: exactly for f32 and f64, within
// one rounding for f16 and bf16 (reduced in f32, rounded once).
inline std::string check_ramp_reduced(const Tensor& t, ReduceOp op, int ranks, int64_t first = 0) {
  const std::vector<double> got = t.to_vector<double>();
  for (size_t i = 0; i < got.size(); ++i) {
    const double want = ramp_reduced(op, ranks, first + static_cast<int64_t>(i), t.dtype());
    const bool half = t.dtype() == DType::f16 || t.dtype() == DType::bf16;
    const double tol = half ? eps_of(t.dtype()) * std::fabs(want) : 0.0;
    if (!(std::fabs(got[i] - want) <= tol))
      return detail::str_cat("element ", first + static_cast<int64_t>(i), ": got ", got[i],
                             ", want ", want, " +- ", tol);
  }
  return "";
}

}  // namespace stoke::dist::test
