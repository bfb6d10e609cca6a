// The CUDA event clock of stoke::profiler (core/profiler.h, StartOptions::device_times): each op
// on a cuda tensor is bracketed by two timing events on the current stream, resolved to device
// times in the profiler's host clock when the profile is read.
#pragma once

namespace stoke::cuda {

// Registers the clock with the profiler (the CUDA backend's registration calls it).
void register_profiler_timer();

}  // namespace stoke::cuda
