// gradcheck: compares a function's backward with central finite differences in f64.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace stoke::autograd {

struct GradcheckOptions {
  double eps = 1e-6;   // finite-difference step
  double atol = 1e-5;  // |analytic - numeric| <= atol + rtol * |numeric|
  double rtol = 1e-3;
  uint64_t seed = 0;  // for the random projection of the outputs
};

struct GradcheckResult {
  bool ok = true;
  double max_error = 0;  // largest |analytic - numeric| - atol - rtol*|numeric| (<= 0 when ok)
  std::string worst;     // "input 1 element 7 (index [0, 2, 1]): analytic 0.5, numeric 0.49"
  int64_t checked = 0;   // number of elements compared
};

// `f` maps the inputs to one output. Inputs that require grad must be f64 (use .to(DType::f64))
// and must not alias themselves (no expanded inputs). The output is reduced with a fixed random
// weight w, and d<w, f(x)>/dx from backward is compared with finite differences per element.
GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                          const std::vector<Tensor>& inputs, const GradcheckOptions& options = {});

}  // namespace stoke::autograd
