// stoke-train --profile FILE [--profile-steps A:B]: records optimizer steps A..B-1 with
// stoke::profiler (core/profiler.h), then writes FILE (a Chrome trace) and prints the summary: the
// step breakdown (data wait, h2d, forward, backward, optimizer, ...) and the ops and backward nodes
// by self time, with GFLOP/s against this device's measured matmul rate. Rank 0 only.
#pragma once

#include <cstdint>
#include <string>

#include "core/device.h"
#include "flags.h"
#include "run_dir.h"
#include "setup.h"

namespace stoke::train {

class StepProfiler {
 public:
  // `peak`: the run's measured matmul rate (measure_throughput_basis), the summary's "% peak".
  StepProfiler(const Flags& f, bool root, Device device, const ThroughputBasis& peak,
               MetricsLog& metrics);
  // Around each batch, with the number of optimizer steps done so far.
  void before_batch(int64_t global_step);
  void after_batch(int64_t global_step);
  // At the end of the run: a profile still recording (a run shorter than B) is reported now.
  void finish(int64_t global_step);

 private:
  void report(int64_t global_step);
  const std::string path_;
  const int64_t begin_, end_;
  const bool enabled_;
  const bool device_times_;
  const Device device_;
  const ThroughputBasis& peak_;
  MetricsLog& metrics_;
  bool recording_ = false, done_ = false;
};

}  // namespace stoke::train
