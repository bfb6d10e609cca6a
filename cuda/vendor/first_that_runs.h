// Trying a vendor library's ranked choices in order (cuDNN's convolution algorithms): the first
// that runs wins, as PyTorch does when an algorithm the heuristics rank first fails at launch
// (CUDNN_STATUS_NOT_SUPPORTED for a shape, or its workspace cannot be allocated). Header-only and
// free of vendor types so that the emulated build tests it.
#pragma once

#include <cstddef>
#include <string>

#include "core/error.h"

namespace stoke::cuda {

// Calls try_one(0), try_one(1), ... until one returns an empty string (it ran) and returns that
// index. A non-empty string says why candidate i failed; when all fail (or there are none) the
// error names `op`, `what` and every candidate's reason.
template <class Try>
size_t first_that_runs(size_t count, Try&& try_one, const char* op, const std::string& what) {
  std::string reasons;
  for (size_t i = 0; i < count; ++i) {
    const std::string why = try_one(i);
    if (why.empty()) return i;
    reasons += ::stoke::detail::str_cat(reasons.empty() ? "" : "; ", "choice ", i, ": ", why);
  }
  STOKE_FAIL(op, "no choice ran for ", what, " (", count, " tried", reasons.empty() ? "" : ": ",
             reasons, ")");
}

}  // namespace stoke::cuda
