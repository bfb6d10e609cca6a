// What a training step costs in floating-point work, and what the machine can do: the two halves
// of the MFU (model FLOPs utilization) that stoke-bench-train-cpu reports.
#pragma once

#include <cstdint>
#include <functional>

#include "core/device.h"
#include "core/dtype.h"

namespace stoke::nn {

// The best of a few n^3 f32 matrix products on `device`, in GFLOP/s (2 n^3 FLOPs each; the first
// one warms up and is not counted): the peak that "% peak" and the MFU are against is what this
// machine's GEMM reaches now, not a datasheet figure. Draws from its own generator, not the
// default one.
// `dtype`: f32, or f16/bf16 for a mixed-precision run's peak (on a GPU, the tensor cores').
double measured_matmul_gflops(Device device, int64_t n = 1024, DType dtype = DType::f32);

// Runs `step` once with the profiler recording and returns the FLOPs its ops said they did
// (profiler::next_range_flops): the convolutions', linear layers' and matrix products' forward and
// backward, 2 per multiply-add, the usual count of a model's FLOPs (elementwise ops, norms and the
// optimizer's update are not counted; the device track's copies of the same ops are left out).
// The profiler must not be recording already; it is stopped again afterwards, and its earlier
// record is lost.
double training_flops(const std::function<void()>& step);

}  // namespace stoke::nn
