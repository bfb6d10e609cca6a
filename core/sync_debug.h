// Host-device synchronization, counted and (on request) reported: stoke's counterpart of
// torch.cuda.set_sync_debug_mode. A device backend calls note_device_sync() wherever the host
// blocks on the device (a blocking device-to-host copy such as item() or to(cpu), a stream, event
// or device synchronize); STOKE_LAUNCH counts kernel launches. In a steady-state training step
// both tell a user what the GPU waits for:
//
//   stoke::set_sync_debug_mode(stoke::SyncDebugMode::error);   // or STOKE_SYNC_DEBUG=error
//   loss.item();   // throws: "sync debug: Tensor::item blocked the host on the device (...)"
//   { stoke::ExpectedSync read("progress"); loss.item(); }     // counted as expected, no report
//
// Counts are per thread (an op's launches and syncs happen on the thread that calls it; ranks
// run as threads in the in-process DDP tests), read with device_activity().
#pragma once

#include <cstdint>

namespace stoke {

enum class SyncDebugMode : uint8_t {
  off,    // count only
  warn,   // print one line on stderr per unexpected synchronization
  error,  // throw stoke::Error at it
};

// The process-wide mode; its first reading comes from STOKE_SYNC_DEBUG (off|warn|error; anything
// else is refused with an error naming the value).
SyncDebugMode sync_debug_mode();
void set_sync_debug_mode(SyncDebugMode mode);
// "off", "warn" or "error".
const char* sync_debug_mode_name(SyncDebugMode mode);

// What the calling thread's device work has cost since it started (monotonic counters).
struct DeviceActivity {
  int64_t syncs = 0;           // host blocked on the device outside an ExpectedSync scope
  int64_t expected_syncs = 0;  // ... inside one (a progress read, the end of an epoch)
  int64_t launches = 0;        // kernels launched through STOKE_LAUNCH
};
DeviceActivity device_activity();
// b - a, field by field: the activity of the work between two readings.
DeviceActivity operator-(const DeviceActivity& b, const DeviceActivity& a);

// Called by device backends right where the host blocks on the device. `what` names the blocking
// call ("cudaStreamSynchronize"); the outermost SyncSite names the operation that needed it. In
// warn mode prints, in error mode throws (stoke::Error), unless an ExpectedSync scope is open.
// Where throwing is not allowed (an allocator's free, a destructor) pass may_throw = false: error
// mode then prints as warn does.
void note_device_sync(const char* what, bool may_throw = true);
// The outermost SyncSite's operation on the calling thread ("Tensor::item"), or nullptr.
const char* current_sync_site() noexcept;

namespace detail {
// The calling thread's launches so far. Inline, so that a kernel source built on its own (the
// planted-bug programs compile a kernel with cuda/emu only) needs nothing else of core.
inline thread_local int64_t t_kernel_launches = 0;
}  // namespace detail

// Counts one kernel launch on the calling thread (STOKE_LAUNCH calls it).
inline void note_kernel_launch() noexcept {
  ++detail::t_kernel_launches;
}

// Names the operation whose synchronization note_device_sync reports ("Tensor::item"), for the
// rest of the scope; nested sites report the outermost (item() calls to(cpu): "Tensor::item").
class SyncSite {
 public:
  explicit SyncSite(const char* op) noexcept;
  ~SyncSite();
  SyncSite(const SyncSite&) = delete;
  SyncSite& operator=(const SyncSite&) = delete;

 private:
  const char* previous_;
};

// A scope whose synchronizations are deliberate ("read the loss sum for the progress bar"):
// counted as expected_syncs, never reported. Nests.
class ExpectedSync {
 public:
  explicit ExpectedSync(const char* why) noexcept;
  ~ExpectedSync();
  ExpectedSync(const ExpectedSync&) = delete;
  ExpectedSync& operator=(const ExpectedSync&) = delete;

 private:
  const char* previous_;
};

}  // namespace stoke
