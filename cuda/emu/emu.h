// cuda/emu: the CUDA execution model on CPU threads. Included (through cuda/compat.h) instead of
// the CUDA compiler's built-ins when STOKE_CUDA_EMU is defined, so that every kernel file also
// compiles with the host compiler and runs on the CPU.
//
// A grid runs in one of two execution modes (ExecutionMode below; docs/design-notes.md,
// "cuda/emu"):
// - fibers (the default): a block's CUDA threads run one after another on one OS thread, each
//   leaving its stack for another only where it must wait (__syncthreads(), shuffles, votes,
//   __syncwarp()); the blocks are spread over a pool of OS threads, one per core;
// - OS threads (STOKE_EMU_THREADS=os, the default in ThreadSanitizer builds): every CUDA thread of
//   a block is an OS thread from a pool that grows to the largest block size seen, blocks run one
//   after another. The barriers and warp exchanges below are then the only happens-before edges
//   between the threads of a block, so a missing __syncthreads() is a data race that
//   ThreadSanitizer reports at the kernel's line.
// The toolkit's own headers provide dim3, the vector types, __half/__nv_bfloat16 (their host code
// paths) and the runtime-API declarations; cuda/emu/runtime.cpp defines the subset of that API the
// backend uses.
#pragma once

#ifndef STOKE_CUDA_EMU
#define STOKE_CUDA_EMU 1
#endif

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

namespace stoke::emu::detail {
/// Called where a kernel declares a __shared__ variable: in fiber mode, the block takes the
/// launch's statics for itself until it ends (blocks of one launch may run at once there).
void note_static_shared();
}  // namespace stoke::emu::detail

// The toolkit's host_defines.h makes the execution-space qualifiers empty for a host compiler;
// __shared__ becomes a function-local static, one copy for the process: launches are serialized
// and no two blocks of a launch that use it run at once (note_static_shared), so a static is
// exactly "storage shared by the block". __shared__ is valid in function bodies only (as it is
// in practice in CUDA); the call before it is what a namespace-scope use would fail to compile.
#undef __shared__
#define __shared__                            \
  ::stoke::emu::detail::note_static_shared(); \
  static
#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif

// The built-in variables: per OS thread, set by the mode's workers before each block runs; in
// fiber mode threadIdx is set again each time a worker switches to another CUDA thread.
inline constinit thread_local uint3 threadIdx{};
inline constinit thread_local uint3 blockIdx{};
inline constinit thread_local dim3 blockDim{};
inline constinit thread_local dim3 gridDim{};
inline constexpr int warpSize = 32;

namespace stoke::emu {

/// The launch geometry of one STOKE_LAUNCH; `kernel` identifies the function for
/// cudaFuncSetAttribute's shared-memory opt-in.
struct LaunchConfig {
  dim3 grid;
  dim3 block;
  std::size_t shared_bytes = 0;
  cudaStream_t stream = nullptr;
  const void* kernel = nullptr;
};

/// Runs body(ctx) as every thread of the grid and returns when the grid is done. Configuration
/// errors and exceptions thrown by a kernel thread are reported through cudaGetLastError
/// (cudaErrorInvalidConfiguration, cudaErrorInvalidValue, cudaErrorLaunchFailure), never thrown.
/// `keep` owns ctx until the grid has run (it may run later, in deferred-streams mode).
void launch(const LaunchConfig& config, void (*body)(void*), void* ctx, std::shared_ptr<void> keep);

/// The block's dynamic shared memory (exactly the launch's shared_bytes, so AddressSanitizer sees
/// an overrun); nullptr when the launch asked for none.
void* dynamic_shared_memory();

/// __syncthreads(): waits for every thread of the block that has not returned; returns how many
/// of them passed a non-zero predicate (for __syncthreads_count/_and/_or).
int syncthreads(int predicate = 0);

/// The result of one warp exchange: the lanes that took part and their predicate bits.
struct WarpResult {
  unsigned group;
  unsigned ballot;
};

/// The per-warp exchange behind shuffles, votes and __syncwarp: lane `this` publishes `bytes`
/// (<= 16) of `value` and `predicate`, waits for the live lanes of `mask`, and receives into
/// `out` what lane `src_lane` published (its own value when src_lane did not take part).
WarpResult warp_exchange(unsigned mask, const void* value, std::size_t bytes, int src_lane,
                         bool predicate, void* out);

/// The calling thread's lane (threadIdx linearized, modulo 32).
unsigned lane_id();

/// __activemask(): the lanes of the caller's warp that have not returned.
unsigned active_mask();

/// True on a thread that is running a kernel.
bool in_kernel();

/// cudaMalloc fails with cudaErrorMemoryAllocation once the live device bytes would exceed
/// `bytes` (default kDefaultDeviceMemory, reported as the device's memory). Returns the old limit.
std::size_t set_device_memory_limit(std::size_t bytes);
inline constexpr std::size_t kDefaultDeviceMemory = std::size_t{16} << 30;

/// While one of these lives (any thread), device memory is readable and writable by host code:
/// the emulator opens it around kernel launches and its own copies and memsets. Outside them
/// cudaMalloc'd memory is PROT_NONE, so host code touching it faults as on a GPU
/// (cuda/emu/device_memory.cpp). Tests that inspect device memory directly open one too.
class DeviceAccess {
 public:
  DeviceAccess();
  ~DeviceAccess();
  DeviceAccess(const DeviceAccess&) = delete;
  DeviceAccess& operator=(const DeviceAccess&) = delete;
};

/// Turns the fault on host access to device memory on or off (on by default; the environment
/// variable STOKE_EMU_DEVICE_GUARD=0 starts with it off). Returns the previous setting.
bool set_device_memory_guard(bool on);

/// Deferred streams: launches, asynchronous copies and memsets queue on their stream and run
/// only when something waits for them (a synchronize, a query, an event wait, a synchronous copy),
/// so missing waits show up as wrong values (cuda/emu/streams.cpp). Off by default;
/// STOKE_EMU_STREAMS=deferred starts with it on. Returns the previous setting.
bool set_deferred_streams(bool on);

/// How the CUDA threads of a block run (docs/design-notes.md, "cuda/emu").
enum class ExecutionMode {
  /// On one OS thread, one after another, switching stacks only where a thread must wait; the
  /// blocks spread over set_fiber_workers() OS threads. Fast: whole training steps in seconds.
  kFibers,
  /// An OS thread per CUDA thread, blocks one after another: ThreadSanitizer sees a missing
  /// barrier as a race between threads.
  kOsThreads,
};

/// Sets the mode of the launches that run from now on; returns the previous mode. The default is
/// kFibers, kOsThreads in ThreadSanitizer builds; STOKE_EMU_THREADS=fibers|os chooses at startup
/// (any other value fails every launch with cudaErrorInvalidValue, naming it).
ExecutionMode set_execution_mode(ExecutionMode mode);
ExecutionMode execution_mode();

/// The OS threads (the launching one included) over which fiber mode spreads a launch's blocks,
/// 1 to 1024; returns the previous count. The default is the number of cores;
/// STOKE_EMU_WORKERS=N chooses at startup (any other value fails every launch, naming it).
unsigned set_fiber_workers(unsigned workers);

/// The emulator presents this many identical devices, so that code selecting cuda:1 (the device
/// guard of every op, allocation on the tensor's device) is tested too.
inline constexpr int kDeviceCount = 2;

/// The device that was current when cudaMalloc made the block holding `p`; -1 if `p` is not in a
/// live device block.
int device_of(const void* p);

/// Counters for tests.
struct Stats {
  std::uint64_t launches = 0;          ///< kernels run to completion or failure
  std::size_t device_bytes_live = 0;   ///< cudaMalloc'd and not yet freed
  std::size_t device_bytes_peak = 0;   ///< high-water mark of device_bytes_live
  std::size_t device_allocations = 0;  ///< live cudaMalloc blocks
  std::size_t host_bytes_live = 0;     ///< cudaMallocHost/cudaHostAlloc'd and not yet freed
  int last_launch_device = -1;         ///< the launching thread's current device, last launch
  std::uint64_t stack_switches = 0;    ///< fiber mode: switches from one CUDA thread's stack to
                                       ///< another's, all launches
};
Stats stats();

/// What went wrong in the calling host thread's last failed launch ("kernel threw in block ...:
/// message"); empty when there was none. STOKE_CUDA_CHECK appends it to cudaErrorLaunchFailure.
std::string last_failure_detail();

namespace detail {
template <class... P>
struct Bound {
  void (*kernel)(P...);
  std::tuple<std::decay_t<P>...> args;
  // Each CUDA thread gets its own copy of the arguments, as with a real launch.
  static void run(void* self) {
    auto* b = static_cast<Bound*>(self);
    std::apply([b](const auto&... a) { b->kernel(a...); }, b->args);
  }
};
}  // namespace detail

/// The object STOKE_LAUNCH(kernel, grid, block, smem, stream) returns; calling it with the
/// kernel's arguments (converted to its parameter types, as <<<>>> does) runs the grid.
template <class... P>
class Launch {
 public:
  Launch(void (*kernel)(P...), dim3 grid, dim3 block, std::size_t shared_bytes, cudaStream_t stream)
      : kernel_(kernel),
        config_{grid, block, shared_bytes, stream, reinterpret_cast<const void*>(kernel)} {}

  template <class... A>
  void operator()(A&&... args) const {
    static_assert(sizeof...(A) == sizeof...(P),
                  "STOKE_LAUNCH: the number of arguments differs from the kernel's parameters");
    auto bound = std::make_shared<detail::Bound<P...>>(
        detail::Bound<P...>{kernel_, std::tuple<std::decay_t<P>...>(std::forward<A>(args)...)});
    void* ctx = bound.get();
    launch(config_, &detail::Bound<P...>::run, ctx, std::move(bound));
  }

 private:
  void (*kernel_)(P...);
  LaunchConfig config_;
};

/// Deduces the kernel's parameter types for STOKE_LAUNCH.
template <class... P>
Launch<P...> make_launch(void (*kernel)(P...), dim3 grid, dim3 block, std::size_t shared_bytes,
                         cudaStream_t stream) {
  return Launch<P...>(kernel, grid, block, shared_bytes, stream);
}

}  // namespace stoke::emu

// ---- synchronization ------------------------------------------------------------------------

/// Block barrier; threads that have returned from the kernel drop out of it.
inline void __syncthreads() {
  stoke::emu::syncthreads(0);
}
/// Block barrier returning how many threads passed a non-zero predicate.
inline int __syncthreads_count(int predicate) {
  return stoke::emu::syncthreads(predicate);
}
/// Block barrier returning non-zero if every thread passed a non-zero predicate.
inline int __syncthreads_and(int predicate) {
  // Count the threads whose predicate is zero: the barrier reports that count.
  return stoke::emu::syncthreads(predicate == 0 ? 1 : 0) == 0;
}
/// Block barrier returning non-zero if any thread passed a non-zero predicate.
inline int __syncthreads_or(int predicate) {
  return stoke::emu::syncthreads(predicate) != 0;
}

/// Barrier among the live lanes of `mask` in the caller's warp.
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  stoke::emu::warp_exchange(mask, nullptr, 0, 0, false, nullptr);
}
/// The live lanes of the caller's warp.
inline unsigned __activemask() {
  return stoke::emu::active_mask();
}

/// Bit i set when lane i of `mask` (and live) passed a non-zero predicate.
inline unsigned __ballot_sync(unsigned mask, int predicate) {
  return stoke::emu::warp_exchange(mask, nullptr, 0, 0, predicate != 0, nullptr).ballot;
}
/// Non-zero when any participating lane passed a non-zero predicate.
inline int __any_sync(unsigned mask, int predicate) {
  return __ballot_sync(mask, predicate) != 0;
}
/// Non-zero when every participating lane passed a non-zero predicate.
inline int __all_sync(unsigned mask, int predicate) {
  const auto r = stoke::emu::warp_exchange(mask, nullptr, 0, 0, predicate != 0, nullptr);
  return r.ballot == r.group;
}

namespace stoke::emu::detail {
// Shuffles copy the value's bytes, so any trivially copyable type of at most 16 bytes works
// (int, float, double, __half, __half2, __nv_bfloat16, ...), as the overloads of CUDA do.
template <class T>
T shuffle(unsigned mask, T var, int src) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 16,
                "warp shuffle: the type must be trivially copyable and at most 16 bytes");
  T out = var;
  warp_exchange(mask, &var, sizeof(T), src, false, &out);
  return out;
}
}  // namespace stoke::emu::detail

/// Value of lane srcLane (modulo width, within the caller's width-sized segment).
template <class T>
T __shfl_sync(unsigned mask, T var, int srcLane, int width = warpSize) {
  const int lane = static_cast<int>(stoke::emu::lane_id());
  const int base = lane & ~(width - 1);
  return stoke::emu::detail::shuffle(mask, var, base + (srcLane & (width - 1)));
}
/// Value of lane (lane - delta); the own value where that leaves the segment.
template <class T>
T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {
  const int lane = static_cast<int>(stoke::emu::lane_id());
  const int base = lane & ~(width - 1);
  const int src = lane - static_cast<int>(delta);
  return stoke::emu::detail::shuffle(mask, var, src < base ? lane : src);
}
/// Value of lane (lane + delta); the own value where that leaves the segment.
template <class T>
T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {
  const int lane = static_cast<int>(stoke::emu::lane_id());
  const int base = lane & ~(width - 1);
  const int src = lane + static_cast<int>(delta);
  return stoke::emu::detail::shuffle(mask, var, src >= base + width ? lane : src);
}
/// Value of lane (lane ^ laneMask); the own value where that is in a later segment.
template <class T>
T __shfl_xor_sync(unsigned mask, T var, int laneMask, int width = warpSize) {
  const int lane = static_cast<int>(stoke::emu::lane_id());
  const int base = lane & ~(width - 1);
  const int src = lane ^ laneMask;
  return stoke::emu::detail::shuffle(mask, var, src >= base + width ? lane : src);
}

#include "cuda/emu/intrinsics.h"
