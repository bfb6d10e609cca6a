// cuda/emu: the subset of the CUDA runtime API the backend uses, on the host (the device itself
// and the error strings are in device.cpp). Device memory is blocks of a guarded arena that host
// code cannot touch outside launches and copies (device_memory.cpp), under a settable limit;
// streams and events are in-order host work that runs synchronously. Every failing call also
// becomes the host thread's last error, as in CUDA, so a stale error from an earlier call shows up
// in the next cudaGetLastError() exactly as on a GPU. The declarations are the toolkit's
// (cuda_runtime_api.h); these are their definitions.
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>
#include <vector>

#include "cuda/emu/internal.h"

struct CUstream_st {
  unsigned flags = 0;
  int priority = 0;
};

struct CUevent_st {
  unsigned flags = 0;
  bool recorded = false;
  std::chrono::steady_clock::time_point time;
  stoke::emu::detail::StreamMark mark;  // the last cudaEventRecord's place in its stream
  std::uint64_t capture = 0;            // the capture that recorded it (graphs.cpp), or 0
};

namespace stoke::emu {
namespace {

constexpr std::size_t kDeviceAlignment = 256;  // cudaMalloc's guarantee

struct State {
  std::mutex m;
  struct Block {
    std::size_t bytes;
    int device;  // current when it was allocated
  };
  std::map<std::uintptr_t, Block> device;      // base -> block
  std::map<std::uintptr_t, std::size_t> host;  // pinned: base -> bytes
  std::set<cudaStream_t> streams;
  std::set<cudaEvent_t> events;
  std::unordered_map<const void*, std::size_t> shared_optin;
  std::size_t limit = kDefaultDeviceMemory;
  Stats stats;
};

State& state() {
  static State s;
  return s;
}

thread_local cudaError_t last_error = cudaSuccess;
thread_local std::string failure_detail;

using detail::fail;

// True when [p, p + bytes) lies inside one cudaMalloc'd block; called with the state locked.
bool in_device_block(const State& s, const void* p, std::size_t bytes) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  auto it = s.device.upper_bound(a);
  if (it == s.device.begin()) return false;
  --it;
  return a >= it->first && a - it->first + bytes <= it->second.bytes;
}

// True when [p, p + bytes) lies inside one pinned host block; called with the state locked.
bool in_pinned_block(const State& s, const void* p, std::size_t bytes) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  auto it = s.host.upper_bound(a);
  if (it == s.host.begin()) return false;
  --it;
  return a >= it->first && a - it->first + bytes <= it->second;
}

// Pageable host memory: neither a device block nor a pinned one.
bool pageable(const void* p, std::size_t bytes) {
  State& s = state();
  std::lock_guard lock(s.m);
  return !in_device_block(s, p, bytes) && !in_pinned_block(s, p, bytes);
}

// Checks that the device side(s) of a copy are device memory, as a GPU would fault otherwise.
cudaError_t check_copy(void* dst, const void* src, std::size_t count, cudaMemcpyKind kind) {
  if (count == 0) return cudaSuccess;
  if (dst == nullptr || src == nullptr) return fail(cudaErrorInvalidValue);
  State& s = state();
  std::lock_guard lock(s.m);
  switch (kind) {
    case cudaMemcpyHostToHost:
    case cudaMemcpyDefault:
      return cudaSuccess;
    case cudaMemcpyHostToDevice:
      return in_device_block(s, dst, count) ? cudaSuccess : fail(cudaErrorInvalidValue);
    case cudaMemcpyDeviceToHost:
      return in_device_block(s, src, count) ? cudaSuccess : fail(cudaErrorInvalidValue);
    case cudaMemcpyDeviceToDevice:
      return in_device_block(s, dst, count) && in_device_block(s, src, count)
                 ? cudaSuccess
                 : fail(cudaErrorInvalidValue);
  }
  return fail(cudaErrorInvalidMemcpyDirection);
}

cudaError_t check_stream(cudaStream_t stream) {
  return detail::valid_stream(stream) ? cudaSuccess : fail(cudaErrorInvalidResourceHandle);
}

bool live_event(cudaEvent_t e) {
  State& s = state();
  std::lock_guard lock(s.m);
  return s.events.count(e) != 0;
}

}  // namespace

namespace detail {
cudaError_t set_last_error(cudaError_t error) {
  if (error != cudaSuccess) last_error = error;
  return error;
}
void set_failure_detail(std::string detail) {
  failure_detail = std::move(detail);
}
bool valid_stream(cudaStream_t stream) {
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread) return true;
  State& s = state();
  std::lock_guard lock(s.m);
  return s.streams.count(stream) != 0;
}
std::size_t max_dynamic_shared(const void* kernel) {
  State& s = state();
  std::lock_guard lock(s.m);
  const auto it = s.shared_optin.find(kernel);
  return it == s.shared_optin.end() ? detail::kDefaultDynamicShared : it->second;
}
unsigned stream_flags(cudaStream_t stream) {
  State& s = state();
  std::lock_guard lock(s.m);
  return s.streams.count(stream) != 0 ? stream->flags : 0;
}
std::size_t device_memory_limit() {
  State& s = state();
  std::lock_guard lock(s.m);
  return s.limit;
}
void count_launch(std::uint64_t stack_switches) {
  State& s = state();
  std::lock_guard lock(s.m);
  ++s.stats.launches;
  s.stats.stack_switches += stack_switches;
}
void note_launch(int device) {
  State& s = state();
  std::lock_guard lock(s.m);
  s.stats.last_launch_device = device;
}
}  // namespace detail

std::size_t set_device_memory_limit(std::size_t bytes) {
  State& s = state();
  std::lock_guard lock(s.m);
  return std::exchange(s.limit, bytes);
}

int device_of(const void* p) {
  State& s = state();
  std::lock_guard lock(s.m);
  if (!in_device_block(s, p, 1)) return -1;
  return std::prev(s.device.upper_bound(reinterpret_cast<std::uintptr_t>(p)))->second.device;
}

Stats stats() {
  State& s = state();
  std::lock_guard lock(s.m);
  return s.stats;
}

std::string last_failure_detail() {
  return failure_detail;
}

}  // namespace stoke::emu

using stoke::emu::fail;
using stoke::emu::state;

extern "C" {

cudaError_t cudaGetLastError(void) {
  return std::exchange(stoke::emu::last_error, cudaSuccess);
}
cudaError_t cudaPeekAtLastError(void) {
  return stoke::emu::last_error;
}

cudaError_t cudaMalloc(void** devPtr, size_t size) {
  if (devPtr == nullptr) return fail(cudaErrorInvalidValue);
  *devPtr = nullptr;
  if (size == 0) return cudaSuccess;  // as CUDA: success and a null pointer
  auto& s = state();
  std::lock_guard lock(s.m);
  if (size > s.limit || s.stats.device_bytes_live > s.limit - size)
    return fail(cudaErrorMemoryAllocation);
  // A page-aligned block that host code cannot touch (device_memory.cpp).
  void* p = stoke::emu::detail::device_alloc(size);
  if (p == nullptr) return fail(cudaErrorMemoryAllocation);
  s.device.emplace(reinterpret_cast<std::uintptr_t>(p),
                   stoke::emu::State::Block{size, stoke::emu::detail::current_device()});
  s.stats.device_bytes_live += size;
  s.stats.device_bytes_peak = std::max(s.stats.device_bytes_peak, s.stats.device_bytes_live);
  ++s.stats.device_allocations;
  *devPtr = p;
  return cudaSuccess;
}

cudaError_t cudaFree(void* devPtr) {
  if (devPtr == nullptr) return cudaSuccess;
  stoke::emu::detail::run_all();  // as CUDA: cudaFree waits for the device
  auto& s = state();
  std::lock_guard lock(s.m);
  const auto it = s.device.find(reinterpret_cast<std::uintptr_t>(devPtr));
  if (it == s.device.end()) return fail(cudaErrorInvalidValue);
  s.stats.device_bytes_live -= it->second.bytes;
  --s.stats.device_allocations;
  stoke::emu::detail::device_free(devPtr, it->second.bytes);
  s.device.erase(it);
  return cudaSuccess;
}

cudaError_t cudaMallocAsync(void** devPtr, size_t size, cudaStream_t stream) {
  if (const cudaError_t e = stoke::emu::check_stream(stream); e != cudaSuccess) return e;
  return cudaMalloc(devPtr, size);
}

cudaError_t cudaFreeAsync(void* devPtr, cudaStream_t stream) {
  if (const cudaError_t e = stoke::emu::check_stream(stream); e != cudaSuccess) return e;
  stoke::emu::detail::enqueue(stream, [devPtr] { cudaFree(devPtr); });
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void** pHost, size_t size, unsigned int /*flags*/) {
  if (pHost == nullptr) return fail(cudaErrorInvalidValue);
  *pHost = nullptr;
  if (size == 0) return cudaSuccess;
  void* p = nullptr;
  if (posix_memalign(&p, stoke::emu::kDeviceAlignment, size) != 0)
    return fail(cudaErrorMemoryAllocation);
  auto& s = state();
  std::lock_guard lock(s.m);
  s.host.emplace(reinterpret_cast<std::uintptr_t>(p), size);
  s.stats.host_bytes_live += size;
  *pHost = p;
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** ptr, size_t size) {
  return cudaHostAlloc(ptr, size, 0);
}

cudaError_t cudaFreeHost(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  stoke::emu::detail::run_all();  // as CUDA: freeing pinned memory waits for the device
  auto& s = state();
  std::lock_guard lock(s.m);
  const auto it = s.host.find(reinterpret_cast<std::uintptr_t>(ptr));
  if (it == s.host.end()) return fail(cudaErrorInvalidValue);
  s.stats.host_bytes_live -= it->second;
  s.host.erase(it);
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind) {
  // Synchronous work on the legacy stream would wait for a captured blocking stream.
  if (stoke::emu::detail::blocking_capture())
    return stoke::emu::detail::refuse_in_capture(0, cudaErrorStreamCaptureImplicit);
  if (const cudaError_t e = stoke::emu::check_copy(dst, src, count, kind); e != cudaSuccess)
    return e;
  if (count == 0) return cudaSuccess;
  // Synchronous: on the legacy default stream, which waits for the blocking streams' work but not
  // for streams created with cudaStreamNonBlocking.
  stoke::emu::detail::wait_for(nullptr, [=] {
    const stoke::emu::DeviceAccess access;
    std::memmove(dst, src, count);
  });
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t stream) {
  if (const cudaError_t e = stoke::emu::check_stream(stream); e != cudaSuccess) return e;
  if (const cudaError_t e = stoke::emu::check_copy(dst, src, count, kind); e != cudaSuccess)
    return e;
  if (count == 0) return cudaSuccess;
  if (const std::uint64_t capture = stoke::emu::detail::capture_id(stream);
      capture != 0 && (stoke::emu::pageable(dst, count) || stoke::emu::pageable(src, count))) {
    // A copy to or from pageable memory is synchronous (or staged now): a graph cannot hold it.
    return stoke::emu::detail::refuse_in_capture(capture, cudaErrorStreamCaptureUnsupported);
  }
  using stoke::emu::detail::enqueue;
  auto copy = [dst, count](const void* from) {
    const stoke::emu::DeviceAccess access;
    std::memmove(dst, from, count);
  };
  if (stoke::emu::pageable(dst, count)) {
    // To pageable host memory CUDA copies synchronously (after the stream's work).
    stoke::emu::detail::wait_for(stream, [&] { copy(src); });
  } else if (stoke::emu::pageable(src, count)) {
    // From pageable host memory CUDA stages the source before returning: read it now.
    auto staged = std::make_shared<std::vector<unsigned char>>(
        static_cast<const unsigned char*>(src), static_cast<const unsigned char*>(src) + count);
    enqueue(stream, [copy, staged] { copy(staged->data()); });
  } else {
    enqueue(stream, [copy, src] { copy(src); });  // pinned or device memory: read when it runs
  }
  return cudaSuccess;
}

cudaError_t cudaMemset(void* devPtr, int value, size_t count) {
  if (count == 0) return cudaSuccess;
  if (stoke::emu::detail::blocking_capture())
    return stoke::emu::detail::refuse_in_capture(0, cudaErrorStreamCaptureImplicit);
  {
    auto& s = state();
    std::lock_guard lock(s.m);
    if (devPtr == nullptr || !stoke::emu::in_device_block(s, devPtr, count))
      return fail(cudaErrorInvalidValue);
  }
  stoke::emu::detail::wait_for(nullptr, [=] {
    const stoke::emu::DeviceAccess access;
    std::memset(devPtr, value, count);
  });
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* devPtr, int value, size_t count, cudaStream_t stream) {
  if (const cudaError_t e = stoke::emu::check_stream(stream); e != cudaSuccess) return e;
  if (count == 0) return cudaSuccess;
  {
    auto& s = state();
    std::lock_guard lock(s.m);
    if (devPtr == nullptr || !stoke::emu::in_device_block(s, devPtr, count))
      return fail(cudaErrorInvalidValue);
  }
  stoke::emu::detail::enqueue(stream, [=] {
    const stoke::emu::DeviceAccess access;
    std::memset(devPtr, value, count);
  });
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithPriority(cudaStream_t* pStream, unsigned int flags, int priority) {
  if (pStream == nullptr) return fail(cudaErrorInvalidValue);
  auto* stream = new CUstream_st{flags, priority};
  auto& s = state();
  std::lock_guard lock(s.m);
  s.streams.insert(stream);
  *pStream = stream;
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* pStream, unsigned int flags) {
  return cudaStreamCreateWithPriority(pStream, flags, 0);
}

cudaError_t cudaStreamCreate(cudaStream_t* pStream) {
  return cudaStreamCreateWithPriority(pStream, cudaStreamDefault, 0);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (stoke::emu::detail::valid_stream(stream)) stoke::emu::detail::forget_stream(stream);
  auto& s = state();
  std::lock_guard lock(s.m);
  if (s.streams.erase(stream) == 0) return fail(cudaErrorInvalidResourceHandle);
  delete stream;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  if (const cudaError_t e = stoke::emu::check_stream(stream); e != cudaSuccess) return e;
  if (const std::uint64_t capture = stoke::emu::detail::capture_id(stream); capture != 0)
    return stoke::emu::detail::refuse_in_capture(capture, cudaErrorStreamCaptureUnsupported);
  stoke::emu::detail::wait_for(stream, nullptr);
  return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  if (const cudaError_t e = stoke::emu::check_stream(stream); e != cudaSuccess) return e;
  if (const std::uint64_t capture = stoke::emu::detail::capture_id(stream); capture != 0)
    return stoke::emu::detail::refuse_in_capture(capture, cudaErrorStreamCaptureUnsupported);
  return stoke::emu::detail::idle(stream) ? cudaSuccess : cudaErrorNotReady;  // not sticky
}

cudaError_t cudaStreamGetFlags(cudaStream_t stream, unsigned int* flags) {
  if (const cudaError_t e = stoke::emu::check_stream(stream); e != cudaSuccess) return e;
  if (flags == nullptr) return fail(cudaErrorInvalidValue);
  const bool created =
      stream != nullptr && stream != cudaStreamLegacy && stream != cudaStreamPerThread;
  *flags = created ? stream->flags : 0;
  return cudaSuccess;
}

cudaError_t cudaStreamGetPriority(cudaStream_t stream, int* priority) {
  if (const cudaError_t e = stoke::emu::check_stream(stream); e != cudaSuccess) return e;
  if (priority == nullptr) return fail(cudaErrorInvalidValue);
  const bool created =
      stream != nullptr && stream != cudaStreamLegacy && stream != cudaStreamPerThread;
  *priority = created ? stream->priority : 0;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetStreamPriorityRange(int* leastPriority, int* greatestPriority) {
  if (leastPriority != nullptr) *leastPriority = 0;
  if (greatestPriority != nullptr) *greatestPriority = -5;
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int /*flags*/) {
  if (const cudaError_t e = stoke::emu::check_stream(stream); e != cudaSuccess) return e;
  if (!stoke::emu::live_event(event)) return fail(cudaErrorInvalidResourceHandle);
  // The stream's later work waits for the event's stream up to the record made before this call.
  // An event recorded in a capture brings the stream into it (CUDA's fork into a side stream).
  if (stoke::emu::detail::capture_live(event->capture))
    stoke::emu::detail::join_capture(stream, event->capture);
  stoke::emu::detail::add_wait(stream, event->mark);
  return cudaSuccess;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* userData) {
  if (const cudaError_t e = stoke::emu::check_stream(stream); e != cudaSuccess) return e;
  if (fn == nullptr) return fail(cudaErrorInvalidValue);
  stoke::emu::detail::enqueue(stream, [fn, userData] { fn(userData); });
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  if (event == nullptr) return fail(cudaErrorInvalidValue);
  auto* e = new CUevent_st{};
  e->flags = flags;
  auto& s = state();
  std::lock_guard lock(s.m);
  s.events.insert(e);
  *event = e;
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (stoke::emu::live_event(event)) stoke::emu::detail::run_until(event->mark);
  auto& s = state();
  std::lock_guard lock(s.m);
  if (s.events.erase(event) == 0) return fail(cudaErrorInvalidResourceHandle);
  delete event;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (const cudaError_t e = stoke::emu::check_stream(stream); e != cudaSuccess) return e;
  if (!stoke::emu::live_event(event)) return fail(cudaErrorInvalidResourceHandle);
  // The event completes when the stream's earlier work has run (now, unless streams are deferred).
  event->recorded = false;
  event->capture = stoke::emu::detail::capture_id(stream);
  event->mark = stoke::emu::detail::enqueue(stream, [event] {
    event->recorded = true;
    event->time = std::chrono::steady_clock::now();
  });
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (!stoke::emu::live_event(event)) return fail(cudaErrorInvalidResourceHandle);
  if (stoke::emu::detail::capture_live(event->capture))
    return stoke::emu::detail::refuse_in_capture(event->capture, cudaErrorStreamCaptureUnsupported);
  stoke::emu::detail::run_until(event->mark);
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (!stoke::emu::live_event(event)) return fail(cudaErrorInvalidResourceHandle);
  if (stoke::emu::detail::capture_live(event->capture))
    return stoke::emu::detail::refuse_in_capture(event->capture, cudaErrorStreamCaptureUnsupported);
  return stoke::emu::detail::reached(event->mark) ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (ms == nullptr) return fail(cudaErrorInvalidValue);
  if (!stoke::emu::live_event(start) || !stoke::emu::live_event(end))
    return fail(cudaErrorInvalidResourceHandle);
  if ((start->flags & cudaEventDisableTiming) != 0 || (end->flags & cudaEventDisableTiming) != 0)
    return fail(cudaErrorInvalidResourceHandle);
  if (!start->recorded || !end->recorded) return fail(cudaErrorInvalidResourceHandle);
  *ms = std::chrono::duration<float, std::milli>(end->time - start->time).count();
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
  if (stoke::emu::detail::any_capture())
    return stoke::emu::detail::refuse_in_capture(0, cudaErrorStreamCaptureUnsupported);
  stoke::emu::detail::run_all();
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  if (free == nullptr || total == nullptr) return fail(cudaErrorInvalidValue);
  auto& s = state();
  std::lock_guard lock(s.m);
  *total = s.limit;
  *free = s.limit > s.stats.device_bytes_live ? s.limit - s.stats.device_bytes_live : 0;
  return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void* func, enum cudaFuncAttribute attr, int value) {
  if (func == nullptr) return fail(cudaErrorInvalidDeviceFunction);
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
    if (value < 0 || value > stoke::emu::detail::kOptinShared) return fail(cudaErrorInvalidValue);
    auto& s = state();
    std::lock_guard lock(s.m);
    s.shared_optin[func] = static_cast<std::size_t>(value);
  }
  return cudaSuccess;  // other attributes (carveout, cluster shape) only tune a GPU
}

}  // extern "C"
