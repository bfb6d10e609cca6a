#include "nn/throughput.h"

#include <algorithm>
#include <chrono>

#include "autograd/linalg.h"
#include "autograd/reduce.h"
#include "core/profiler.h"
#include "ops/creation.h"

namespace stoke::nn {

double measured_matmul_gflops(Device device, int64_t n, DType dtype) {
  Generator gen(0);  // its own: the default generator's draws (dropout's) stay where they were
  const Tensor a = randn({n, n}, {.device = device}, &gen).to(dtype),
               b = randn({n, n}, {.device = device}, &gen).to(dtype);
  double best = 0;
  for (int i = 0; i < 4; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const double sync = sum(matmul(a, b)).item();  // item() waits for the device
    (void)sync;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i > 0) best = std::max(best, 2.0 * static_cast<double>(n * n * n) / s / 1e9);
  }
  return best;
}

double training_flops(const std::function<void()>& step) {
  STOKE_CHECK(!profiler::enabled(), "training_flops",
              "the profiler is already recording; it would lose that record");
  profiler::start();
  try {
    step();
  } catch (...) {
    profiler::stop();
    throw;
  }
  profiler::stop();
  double flops = 0;
  for (const auto& s : profiler::op_stats())
    if (s.category != profiler::Category::device) flops += s.flops;
  return flops;
}

}  // namespace stoke::nn
