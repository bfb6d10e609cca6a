// The records of stoke-train's JSONL metrics, one JSON object a line. Their keys and key order
// are an interface (tests, scripts and MetricsLog::drop_records_after read them): "type" first,
// then the position ("epoch", "step"), then the values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "run_dir.h"

namespace stoke::train {

// The loss scaler's state after a step (--amp fp16).
struct AmpRecord {
  double loss_scale = 0;
  int64_t skipped_steps = 0;
};

// {"type":"step",...}: after an optimizer step, every --log-every steps; with `amp`, its
// "loss_scale" and "skipped_steps" follow the values.
void log_step(MetricsLog& metrics, int64_t epoch, int64_t step, double loss, double lr,
              double data_wait_s, const std::optional<AmpRecord>& amp = std::nullopt);

// {"type":"eval",...}: after an evaluation every --eval-every steps.
void log_eval(MetricsLog& metrics, int64_t step, double test_loss, double test_acc);

// What an epoch's record (and its summary line) says; `epoch` is 1-based.
struct EpochRecord {
  int64_t epoch = 0, step = 0;
  double train_loss = 0, train_acc = 0, test_loss = 0, test_acc = 0;
  double test_acc5 = -1;  // top-5, with more than 5 classes (else -1, and not logged)
  double time_s = 0, images_per_s = 0, data_wait_s = 0, data_wait_pct = 0, lr = 0;
  double rss_mib = 0, peak_rss_mib = 0;
  // Model FLOPs per training image (measure_throughput_basis), the device's measured peak
  // (GFLOP/s) and the MFU: images/s x FLOPs per image over the job's peak, a fraction.
  double flops_per_image = 0, peak_gflops = 0;
  std::string peak_dtype = "f32";  // the peak GEMM's dtype
  double mfu = 0;
};

// {"type":"epoch",...}: at the end of each epoch.
void log_epoch(MetricsLog& metrics, const EpochRecord& r);

// {"type":"profile",...}: stoke-train --profile's step breakdown (ms per step of each phase) at the
// step where the profile ended, for stoke-report's stacked bar.
// comm_ms, exposed_comm_ms: the collectives' time and the part the step waited for, per step
// (profiler::StepBreakdown), written when a collective ran.
void log_profile(MetricsLog& metrics, int64_t step, int64_t steps, double step_ms,
                 const std::vector<std::pair<std::string, double>>& phase_ms, double other_ms,
                 double comm_ms = 0, double exposed_comm_ms = 0);

}  // namespace stoke::train
