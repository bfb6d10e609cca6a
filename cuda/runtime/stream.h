// Streams and events (RAII), and the calling thread's current stream per device, which launchers
// and the caching allocator use when no stream is given (the legacy default stream until set).
#pragma once

#include "cuda/compat.h"

namespace stoke::cuda {

// Stream(StreamOptions{.device = 1}).
struct StreamOptions {
  int device = -1;           // -1: the current device
  bool non_blocking = true;  // does not synchronize with the legacy default stream
};

// An owned CUDA stream, destroyed with the object (after the work queued on it has been issued;
// cudaStreamDestroy does not wait for it, the device finishes it).
class Stream {
 public:
  explicit Stream(StreamOptions options = {});
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream();

  cudaStream_t handle() const { return handle_; }
  int device() const { return device_; }
  // Blocks the host until everything queued on the stream has finished.
  void synchronize() const;
  // True when everything queued on the stream has finished.
  bool query() const;
  // Work queued on this stream after this call waits for `event` (no host blocking).
  void wait(const class Event& event) const;

 private:
  cudaStream_t handle_ = nullptr;
  int device_ = 0;
};

// Event(EventOptions{.timing = false}) for a pure synchronization event (cheaper to record).
struct EventOptions {
  bool timing = true;          // can be used with elapsed_ms
  bool blocking_sync = false;  // synchronize() yields the CPU instead of spinning
};

// An owned CUDA event on the device that was current when it was made.
class Event {
 public:
  explicit Event(EventOptions options = {});
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event();

  cudaEvent_t handle() const { return handle_; }
  int device() const { return device_; }
  // Captures the work queued so far on `stream` (default: the current stream).
  void record(cudaStream_t stream);
  void record();
  // Blocks the host until the captured work has finished.
  void synchronize() const;
  // True when the captured work has finished (or the event was never recorded).
  bool query() const;
  // Milliseconds between this (earlier) event and `end`; both recorded with timing enabled.
  float elapsed_ms(const Event& end) const;

 private:
  cudaEvent_t handle_ = nullptr;
  int device_ = 0;
};

// For allocators freeing a block that `stream` may still use (record_stream): an event recorded
// on the stream, or nullptr when that fails (a destroyed stream, a sticky device error). Never
// throws, since frees run in destructors; the error is cleared and reported on stderr, naming
// `who`.
cudaEvent_t record_pending_use(cudaStream_t stream, const char* who) noexcept;
// Whether the work before `event` has finished: waits for it when `wait`, else asks (a not-ready
// answer's error is cleared). Event::query, and the allocators draining their pending uses.
bool event_completed(cudaEvent_t event, bool wait);

// The calling thread's current stream on `device` (-1: the current device).
cudaStream_t current_stream(int device = -1);
// Sets the calling thread's current stream on `device` (-1: the current device).
void set_current_stream(cudaStream_t stream, int device = -1);

// Makes `stream` (and its device) current for a scope; restores both on exit.
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& stream);
  // The same for a raw handle of `device` (a stream another thread had current, say).
  StreamGuard(cudaStream_t stream, int device);
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;
  ~StreamGuard();

 private:
  int previous_device_ = 0;
  int device_ = 0;
  cudaStream_t previous_stream_ = nullptr;
};

}  // namespace stoke::cuda
