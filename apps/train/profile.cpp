#include "profile.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "core/profiler.h"
#include "metrics_records.h"
#include "stoke/stoke.h"

namespace stoke::train {
namespace {

// The best of a few 1024^3 f32 matrix products on `device`, in GFLOP/s: the summary's "% peak"
// is against what this machine's GEMM reaches, not a datasheet figure.
double measured_matmul_gflops(Device device) {
#if defined(STOKE_TRAIN_EMU)
  // stoke-train-emu's "GPU" is the CUDA emulator on CPU threads: its rate is no peak of anything,
  // and four 1024^3 products there take minutes. A small product keeps the column's format.
  const int64_t n = 128;
#else
  const int64_t n = 1024;
#endif
  const Tensor a = randn({n, n}, {.device = device}), b = randn({n, n}, {.device = device});
  double best = 0;
  for (int i = 0; i < 4; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const double sync = sum(matmul(a, b)).item();  // item() waits for the device
    (void)sync;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i > 0) best = std::max(best, 2.0 * n * n * n / s / 1e9);  // the first one warms up
  }
  return best;
}

}  // namespace

StepProfiler::StepProfiler(const Flags& f, bool root, Device device, MetricsLog& metrics)
    : path_(f.profile),
      begin_(f.profile_begin),
      end_(f.profile_end),
      enabled_(root && !f.profile.empty()),
      device_times_(f.profile_device),
      device_(device),
      metrics_(metrics) {}

void StepProfiler::before_batch(int64_t global_step) {
  if (!enabled_ || recording_ || done_ || global_step < begin_) return;
  profiler::set_thread_name("training");
  profiler::start({.device_times = device_times_});
  recording_ = true;
}

void StepProfiler::after_batch(int64_t global_step) {
  if (recording_ && global_step >= end_) report(global_step);
}

void StepProfiler::finish(int64_t global_step) {
  if (recording_) report(global_step);
}

void StepProfiler::report(int64_t global_step) {
  profiler::stop();
  recording_ = false;
  done_ = true;
  profiler::write_chrome_trace(path_);
  const double peak = measured_matmul_gflops(device_);
  std::printf("profile: wrote %s (open it in ui.perfetto.dev or chrome://tracing)\n",
              path_.c_str());
  std::printf("%s", profiler::summary(25, peak).c_str());
  std::printf("  (%% peak: against %.0f GFLOP/s, the best 1024^3 f32 matmul measured on %s now)\n",
              peak, device_.str().c_str());
  std::fflush(stdout);
  const profiler::StepBreakdown b = profiler::step_breakdown();
  if (b.steps > 0) {
    const double n = static_cast<double>(b.steps);
    std::vector<std::pair<std::string, double>> per_step;
    for (const auto& [name, ms] : b.phases) per_step.emplace_back(name, ms / n);
    log_profile(metrics_, global_step, b.steps, b.step_ms / n, per_step, b.other_ms / n);
  }
}

}  // namespace stoke::train
