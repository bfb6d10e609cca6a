// cuda/emu internals shared by launch.cpp and runtime.cpp; not part of the emulator's interface.
#pragma once

#include <string>

#include "cuda/emu/emu.h"

namespace stoke::emu::detail {

/// Dynamic shared memory per block without the opt-in, and sm_80's opt-in limit.
inline constexpr std::size_t kDefaultDynamicShared = 48 * 1024;
inline constexpr int kOptinShared = 166912;

/// The device memory limit (set_device_memory_limit), reported as the device's memory.
std::size_t device_memory_limit();

/// Records `error` as the calling host thread's last error (cudaGetLastError) and returns it.
cudaError_t set_last_error(cudaError_t error);

/// Records the detail message that last_failure_detail() returns.
void set_failure_detail(std::string detail);

/// True for the default stream, cudaStreamLegacy, cudaStreamPerThread and created streams.
bool valid_stream(cudaStream_t stream);

/// The dynamic shared memory a kernel may use: cudaFuncSetAttribute's opt-in, else 48 KiB.
std::size_t max_dynamic_shared(const void* kernel);

/// Counts a finished launch in stats() and records the calling thread's current device.
void count_launch();

/// The calling host thread's current device (cudaSetDevice).
int current_device();

/// A block of device memory (page-aligned, in the guarded arena); nullptr when none is left.
void* device_alloc(std::size_t bytes);
/// Returns a block from device_alloc(bytes) to the arena.
void device_free(void* p, std::size_t bytes);

}  // namespace stoke::emu::detail
