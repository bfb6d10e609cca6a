// Fixture tensors as stoke tensors, and the comparisons and rounding-error bounds the tests share.
#pragma once

#include <string>

#include "core/tensor.h"
#include "support/fixture.h"

namespace stoke::testing {

// The fixture's values as a tensor of its shape: i64 fixtures stay i64; f32 fixtures become
// `dtype` (f32 by default, f64 to run a test in double).
Tensor to_tensor(const FixtureTensor& t, DType dtype = DType::f32);

// Largest |a - b| over all elements; a and b must have the same shape. Elements that are NaN in
// both, or the same infinity, count as equal; NaN in one only, or unequal infinities, give +inf,
// so that a `< tol` or `== 0` check fails on them.
double max_abs_diff(const Tensor& a, const Tensor& b);

// Largest |got - want| / (atol + rtol |want|) over all elements (<= 1: every element within
// tolerance), with max_abs_diff's rules for NaN and infinities; same shapes.
double max_rel_error(const Tensor& got, const Tensor& want, double atol, double rtol);

// The unit roundoff u of a floating dtype: the largest relative error of one rounding to nearest
// (half an ulp): f32 2^-24 (6.0e-8), f64 2^-53 (1.1e-16), f16 2^-11 (4.9e-4), bf16 2^-8 (3.9e-3).
double unit_roundoff(DType dtype);

// The probabilistic bound on the rounding error of a sum of n rounded terms (a dot product, a
// convolution's output, a reduction): with the rounding errors independent and of mean zero,
// |computed - exact| <= lambda sqrt(n) u sum|terms| with probability at least
// 1 - 2n exp(-lambda^2 / 2) (Higham & Mary, "A new approach to probabilistic rounding error
// analysis", SIAM J. Sci. Comput. 41(5), 2019, Thm. 2.4). With lambda = 8 that is 1 - 2.5e-14 n
// per element; the worst case, n u sum|terms| (Higham, Accuracy and Stability, eq. 3.5), is
// sqrt(n) / 8 times larger. Returns lambda sqrt(n) u for the dtype's u.
double sum_error_factor(int64_t n, DType dtype);

// Largest |got - want| / (factor abs_sum + rtol |want|) over the elements (<= 1 passes), abs_sum
// holding each element's sum|terms| (the reference computed on absolute values); an element whose
// bound is 0 must be exact. max_abs_diff's rules for NaN and infinities; same shapes.
double max_bound_ratio(const Tensor& got, const Tensor& want, const Tensor& abs_sum, double factor,
                       double rtol = 0);

// Catch2 checks that `got` has the fixture's shape and every element is within atol + rtol |want|
// of it; `what` names the quantity in failure messages. The defaults are torch's own for f32
// (torch.testing.assert_close: atol 1e-5, rtol 1.3e-6). The fixtures are f64 results rounded once
// to f32 (u |want| = 6e-8 |want| of the budget).
void check_matches(const Tensor& got, const FixtureTensor& want, const std::string& what,
                   double atol = 1e-5, double rtol = 1.3e-6);

}  // namespace stoke::testing
