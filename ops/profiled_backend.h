// The profiling decorator of ops::Backend: while stoke::profiler is on, ops::dispatch hands out a
// backend that opens a profiler range (Category::op) around every method of the real one, so that
// every op on every device is recorded without a line in any entry point.
#pragma once

#include "ops/backend.h"

namespace stoke::ops {

// The decorator of `inner`, made once per backend object and kept until exit.
Backend& profiled(Backend& inner);

}  // namespace stoke::ops
