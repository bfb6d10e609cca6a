#include "cuda/runtime/stream.h"

#include <array>
#include <cstdio>
#include <utility>

#include "core/error.h"
#include "cuda/runtime/deferred_checks.h"
#include "cuda/runtime/device.h"

namespace stoke::cuda {
namespace {

constexpr int kMaxDevices = 64;

// Per thread, as in PyTorch: a worker thread that switches streams does not affect the others.
thread_local std::array<cudaStream_t, kMaxDevices> t_current_streams{};

int resolve(int device) {
  const int d = device < 0 ? current_device() : device;
  STOKE_CHECK(d < kMaxDevices, "cuda::current_stream", "expected a device index below ",
              kMaxDevices, ", got ", d);
  return d;
}

}  // namespace

Stream::Stream(StreamOptions options) {
  device_ = options.device < 0 ? current_device() : options.device;
  DeviceGuard guard(device_);
  STOKE_CUDA_CHECK(cudaStreamCreateWithFlags(
      &handle_, options.non_blocking ? cudaStreamNonBlocking : cudaStreamDefault));
}

Stream::Stream(Stream&& other) noexcept
    : handle_(std::exchange(other.handle_, nullptr)), device_(other.device_) {}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    if (handle_) (void)cudaStreamDestroy(handle_);
    handle_ = std::exchange(other.handle_, nullptr);
    device_ = other.device_;
  }
  return *this;
}

Stream::~Stream() {
  // Destruction must not throw; a failure here means the context is already gone.
  if (handle_) (void)cudaStreamDestroy(handle_);
}

void Stream::synchronize() const {
  STOKE_CUDA_CHECK(cudaStreamSynchronize(handle_));
  note_device_sync("Stream::synchronize");
  check_deferred_errors();  // a synchronization point (cuda/runtime/deferred_checks.h)
}

bool Stream::query() const {
  const cudaError_t err = cudaStreamQuery(handle_);
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  STOKE_CUDA_CHECK(err);
  return true;
}

void Stream::wait(const Event& event) const {
  STOKE_CUDA_CHECK(cudaStreamWaitEvent(handle_, event.handle(), 0));
}

Event::Event(EventOptions options) {
  device_ = current_device();
  unsigned flags = options.timing ? cudaEventDefault : cudaEventDisableTiming;
  if (options.blocking_sync) flags |= cudaEventBlockingSync;
  STOKE_CUDA_CHECK(cudaEventCreateWithFlags(&handle_, flags));
}

Event::Event(Event&& other) noexcept
    : handle_(std::exchange(other.handle_, nullptr)), device_(other.device_) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (handle_) (void)cudaEventDestroy(handle_);
    handle_ = std::exchange(other.handle_, nullptr);
    device_ = other.device_;
  }
  return *this;
}

Event::~Event() {
  if (handle_) (void)cudaEventDestroy(handle_);
}

void Event::record(cudaStream_t stream) {
  STOKE_CUDA_CHECK(cudaEventRecord(handle_, stream));
}

void Event::record() {
  record(current_stream(device_));
}

void Event::synchronize() const {
  STOKE_CUDA_CHECK(cudaEventSynchronize(handle_));
  note_device_sync("Event::synchronize");
}

bool Event::query() const {
  return event_completed(handle_, false);
}

bool event_completed(cudaEvent_t event, bool wait) {
  if (wait) {
    STOKE_CUDA_CHECK(cudaEventSynchronize(event));
    // An allocator draining its pending uses may call this where throwing is not allowed.
    note_device_sync("cudaEventSynchronize (a pending use of freed memory)", false);
    return true;
  }
  const cudaError_t err = cudaEventQuery(event);
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  STOKE_CUDA_CHECK(err);
  return true;
}

float Event::elapsed_ms(const Event& end) const {
  float ms = 0;
  STOKE_CUDA_CHECK(cudaEventElapsedTime(&ms, handle_, end.handle_));
  return ms;
}

cudaEvent_t record_pending_use(cudaStream_t stream, const char* who) noexcept {
  cudaEvent_t event = nullptr;
  cudaError_t err = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
  if (err == cudaSuccess) {
    err = cudaEventRecord(event, stream);
    if (err != cudaSuccess) {
      (void)cudaEventDestroy(event);
      event = nullptr;
    }
  }
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    std::fprintf(stderr,
                 "stoke: %s: cannot record the pending use of a freed block on stream %p (%s); "
                 "the block is not reused\n",
                 who, static_cast<void*>(stream), cudaGetErrorString(err));
  }
  return event;
}

cudaStream_t current_stream(int device) {
  return t_current_streams[static_cast<size_t>(resolve(device))];
}

void set_current_stream(cudaStream_t stream, int device) {
  t_current_streams[static_cast<size_t>(resolve(device))] = stream;
}

StreamGuard::StreamGuard(const Stream& stream) : StreamGuard(stream.handle(), stream.device()) {}

StreamGuard::StreamGuard(cudaStream_t stream, int device) : device_(device) {
  previous_device_ = current_device();
  if (previous_device_ != device_) set_device(device_);
  previous_stream_ = current_stream(device_);
  set_current_stream(stream, device_);
}

StreamGuard::~StreamGuard() {
  t_current_streams[static_cast<size_t>(device_)] = previous_stream_;
  if (previous_device_ != device_) (void)cudaSetDevice(previous_device_);
}

}  // namespace stoke::cuda
