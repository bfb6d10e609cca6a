// Fixture tensors as stoke tensors, and the comparison the fixture tests share.
#pragma once

#include <string>

#include "core/tensor.h"
#include "support/fixture.h"

namespace stoke::testing {

// The fixture's values as a tensor of its shape: i64 fixtures stay i64; f32 fixtures become
// `dtype` (f32 by default, f64 to run a test in double).
Tensor to_tensor(const FixtureTensor& t, DType dtype = DType::f32);

// Largest |a - b| over all elements; a and b must have the same shape.
double max_abs_diff(const Tensor& a, const Tensor& b);

// Catch2 checks that `got` has the fixture's shape and every element is within 1e-5 absolute +
// 1e-5 relative of it (PyTorch's f32 results); `what` names the quantity in failure messages.
void check_matches(const Tensor& got, const FixtureTensor& want, const std::string& what);

}  // namespace stoke::testing
