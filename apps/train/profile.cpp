#include "profile.h"

#include <cstdio>

#include "core/profiler.h"
#include "metrics_records.h"
#include "setup.h"
#include "stoke/stoke.h"

namespace stoke::train {
StepProfiler::StepProfiler(const Flags& f, bool root, Device device, const ThroughputBasis& peak,
                           MetricsLog& metrics)
    : path_(f.profile),
      begin_(f.profile_begin),
      end_(f.profile_end),
      enabled_(root && !f.profile.empty()),
      device_times_(f.profile_device),
      device_(device),
      peak_(peak),
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
  std::printf("profile: wrote %s (open it in ui.perfetto.dev or chrome://tracing)\n",
              path_.c_str());
  std::printf("%s", profiler::summary(25, peak_.peak_gflops).c_str());
  std::printf(
      "  (%% peak: against %.0f GFLOP/s, the best 1024^3 %s matmul measured on %s at start)\n",
      peak_.peak_gflops, dtype_name(peak_.peak_dtype), device_.str().c_str());
  std::fflush(stdout);
  const profiler::StepBreakdown b = profiler::step_breakdown();
  if (b.steps > 0) {
    const double n = static_cast<double>(b.steps);
    std::vector<std::pair<std::string, double>> per_step;
    for (const auto& [name, ms] : b.phases) per_step.emplace_back(name, ms / n);
    log_profile(metrics_, global_step, b.steps, b.step_ms / n, per_step, b.other_ms / n,
                b.comm_ms / n, b.exposed_comm_ms / n);
  }
}

}  // namespace stoke::train
