// cuda/emu internals shared by launch.cpp and runtime.cpp; not part of the emulator's interface.
#pragma once

#include <cstdint>
#include <functional>
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
/// The runtime API's error return: set_last_error(e), named for the call sites that return it.
inline cudaError_t fail(cudaError_t e) {
  return set_last_error(e);
}

/// Records the detail message that last_failure_detail() returns.
void set_failure_detail(std::string detail);

/// True for the default stream, cudaStreamLegacy, cudaStreamPerThread and created streams.
bool valid_stream(cudaStream_t stream);

/// A created stream's flags (cudaStreamNonBlocking); 0 for the default streams and unknown ones.
unsigned stream_flags(cudaStream_t stream);

/// The dynamic shared memory a kernel may use: cudaFuncSetAttribute's opt-in, else 48 KiB.
std::size_t max_dynamic_shared(const void* kernel);

/// Counts a finished launch in stats(), with the fiber stack switches it made.
void count_launch(std::uint64_t stack_switches);
/// Records the device of a launch as it is issued (stats().last_launch_device).
void note_launch(int device);

/// The calling host thread's current device (cudaSetDevice).
int current_device();

/// A block of device memory (page-aligned, in the guarded arena); nullptr when none is left.
void* device_alloc(std::size_t bytes);
/// Returns a block from device_alloc(bytes) to the arena.
void device_free(void* p, std::size_t bytes);

// ---- streams (streams.cpp) ----

/// A point in a stream's work: done once the stream has run its task number `seq`.
struct StreamMark {
  cudaStream_t stream = nullptr;  // nullptr: the legacy default stream
  std::uint64_t seq = 0;
};
/// Queues `work` on `stream` (deferred mode) or runs it now; returns the mark of its completion.
StreamMark enqueue(cudaStream_t stream, std::function<void()> work);
/// Runs everything `stream` must have finished by now (deferred mode), then `host_work` (may be
/// empty): a synchronous operation ordered after the stream's work.
void wait_for(cudaStream_t stream, const std::function<void()>& host_work);
/// Whether work is deferred (set_deferred_streams): a task then runs under the scheduler's lock.
bool deferred_streams();
/// Makes the next work queued on `stream` wait for `mark` (cudaStreamWaitEvent).
void add_wait(cudaStream_t stream, StreamMark mark);
/// Runs work until `mark` is reached.
void run_until(StreamMark mark);
/// True once `mark` has run.
bool reached(StreamMark mark);
/// True when `stream` has no queued work.
bool idle(cudaStream_t stream);
/// Runs all queued work of every stream.
void run_all();
/// Runs and drops the queue of a stream being destroyed.
void forget_stream(cudaStream_t stream);

// ---- stream capture (graphs.cpp) ----

/// When `stream` is being captured, moves `work` into the capture and returns true.
bool capture_work(cudaStream_t stream, std::function<void()>& work);
/// The id of the capture `stream` belongs to; 0 when it is not capturing.
std::uint64_t capture_id(cudaStream_t stream);
/// True while capture `id` (non-zero) has not ended.
bool capture_live(std::uint64_t id);
/// True while any stream is being captured.
bool any_capture();
/// True while a stream that synchronizes with the legacy default stream is being captured.
bool blocking_capture();
/// Invalidates capture `id` (0: every live capture) and returns fail(error): what a GPU does
/// when a capture meets an operation it cannot record.
cudaError_t refuse_in_capture(std::uint64_t id, cudaError_t error);
/// `stream` joins capture `id` (it waited for an event recorded in the capture).
void join_capture(cudaStream_t stream, std::uint64_t id);

}  // namespace stoke::emu::detail
