// cuda/emu: launching a grid. The launch is checked like CUDA's, queued on its stream
// (cuda/emu/streams.cpp), and run under one process-wide mutex (launches are serialized, so the
// device-memory window and the __shared__ statics belong to one grid at a time) in the execution
// mode of the moment: fibers (launch_fibers.cpp) or an OS thread per CUDA thread
// (launch_threads.cpp). The kernel-side calls go to the mode that runs the calling thread.
#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <system_error>
#include <thread>

#include "cuda/emu/exec.h"
#include "cuda/emu/fiber.h"
#include "cuda/emu/internal.h"

namespace stoke::emu {
namespace {

constexpr unsigned kMaxBlockThreads = 1024;
constexpr unsigned kMaxWorkers = 1024;

// The execution mode and the fiber mode's worker count: from the environment at first use, then
// from set_execution_mode / set_fiber_workers. A malformed variable fails every launch with its
// name and value (until the program sets the setting itself).
struct Settings {
  std::mutex m;
  ExecutionMode mode;
  unsigned workers;
  std::string mode_error;
  std::string workers_error;

  Settings() {
#if defined(STOKE_EMU_TSAN)
    mode =
        ExecutionMode::kOsThreads;  // ThreadSanitizer sees a missing barrier only between threads
#else
    mode = ExecutionMode::kFibers;
#endif
    if (const char* env = std::getenv("STOKE_EMU_THREADS"); env != nullptr && *env != '\0') {
      if (std::strcmp(env, "os") == 0) {
        mode = ExecutionMode::kOsThreads;
      } else if (std::strcmp(env, "fibers") == 0) {
        mode = ExecutionMode::kFibers;
      } else {
        mode_error =
            stoke::detail::str_cat("STOKE_EMU_THREADS='", env, "': expected 'fibers' or 'os'");
      }
    }
    workers = std::max(1u, std::thread::hardware_concurrency());
    if (const char* env = std::getenv("STOKE_EMU_WORKERS"); env != nullptr && *env != '\0') {
      unsigned n = 0;
      const char* end = env + std::strlen(env);
      const auto r = std::from_chars(env, end, n);
      if (r.ec == std::errc() && r.ptr == end && n >= 1 && n <= kMaxWorkers) {
        workers = n;
      } else {
        workers_error = stoke::detail::str_cat(
            "STOKE_EMU_WORKERS='", env, "': expected a whole number from 1 to ", kMaxWorkers);
      }
    }
  }
};

Settings& settings() {
  static Settings s;
  return s;
}

std::mutex& launch_mutex() {
  static std::mutex m;
  return m;
}

cudaError_t check_config(const LaunchConfig& c, std::string& why) {
  const dim3 b = c.block;
  const dim3 g = c.grid;
  const std::uint64_t threads = std::uint64_t{b.x} * b.y * b.z;
  if (b.x == 0 || b.y == 0 || b.z == 0 || b.x > 1024 || b.y > 1024 || b.z > 64 ||
      threads > kMaxBlockThreads) {
    why = stoke::detail::str_cat("block (", b.x, ",", b.y, ",", b.z,
                                 "): expected 1..1024 threads with x, y <= 1024 and z <= 64");
    return cudaErrorInvalidConfiguration;
  }
  if (g.x == 0 || g.y == 0 || g.z == 0 || g.x > 0x7fffffffu || g.y > 65535 || g.z > 65535) {
    why = stoke::detail::str_cat("grid (", g.x, ",", g.y, ",", g.z,
                                 "): expected x in 1..2^31-1 and y, z in 1..65535");
    return cudaErrorInvalidConfiguration;
  }
  const std::size_t limit = detail::max_dynamic_shared(c.kernel);
  if (c.shared_bytes > limit) {
    why = stoke::detail::str_cat("dynamic shared memory of ", c.shared_bytes,
                                 " bytes: expected at most ", limit,
                                 " (cudaFuncSetAttribute raises the limit)");
    return cudaErrorInvalidValue;
  }
  if (!detail::valid_stream(c.stream)) {
    why = "the stream is not a live stream";
    return cudaErrorInvalidResourceHandle;
  }
  return cudaSuccess;
}

cudaError_t fail_launch(cudaError_t error, const std::string& why) {
  detail::set_failure_detail(stoke::detail::str_cat("launch rejected: ", why));
  return detail::set_last_error(error);
}

void run_grid(const LaunchConfig& config, void (*body)(void*), void* ctx) {
  std::lock_guard serialize(launch_mutex());
  ExecutionMode mode;
  unsigned workers;
  {
    Settings& s = settings();
    std::lock_guard lock(s.m);
    const std::string& error = !s.mode_error.empty() ? s.mode_error : s.workers_error;
    if (!error.empty()) {
      fail_launch(cudaErrorInvalidValue, error);
      return;
    }
    mode = s.mode;
    workers = s.workers;
  }
  detail::Grid grid;
  grid.config = config;
  grid.body = body;
  grid.ctx = ctx;
  grid.threads = config.block.x * config.block.y * config.block.z;
  grid.blocks = std::uint64_t{config.grid.x} * config.grid.y * config.grid.z;
  detail::GridFailure failure;
  std::uint64_t switches = 0;
  try {
    const DeviceAccess access;  // the kernel's threads may touch device memory
    if (mode == ExecutionMode::kFibers) {
      switches = detail::fibers::run(grid, failure, workers);
    } else {
      detail::os_threads::run(grid, failure);
    }
  } catch (const std::system_error& e) {
    // Only thread creation throws here, and only before any block of this grid started.
    fail_launch(cudaErrorLaunchOutOfResources,
                stoke::detail::str_cat("cannot start threads: ", e.what()));
    return;
  }
  detail::count_launch(switches);
  if (failure.failed()) {
    detail::set_failure_detail(failure.message());
    detail::set_last_error(cudaErrorLaunchFailure);
  }
}

}  // namespace

namespace detail {
std::string kernel_threw(const std::string& what) {
  return stoke::detail::str_cat("kernel threw in block (", blockIdx.x, ",", blockIdx.y, ",",
                                blockIdx.z, ") thread (", threadIdx.x, ",", threadIdx.y, ",",
                                threadIdx.z, "): ", what);
}
}  // namespace detail

ExecutionMode set_execution_mode(ExecutionMode mode) {
  Settings& s = settings();
  std::lock_guard lock(s.m);
  s.mode_error.clear();
  return std::exchange(s.mode, mode);
}

ExecutionMode execution_mode() {
  Settings& s = settings();
  std::lock_guard lock(s.m);
  return s.mode;
}

unsigned set_fiber_workers(unsigned workers) {
  STOKE_CHECK(workers >= 1 && workers <= kMaxWorkers, "emu", "set_fiber_workers(", workers,
              "): expected 1 to ", kMaxWorkers);
  Settings& s = settings();
  std::lock_guard lock(s.m);
  s.workers_error.clear();
  return std::exchange(s.workers, workers);
}

void launch(const LaunchConfig& config, void (*body)(void*), void* ctx,
            std::shared_ptr<void> keep) {
  std::string why;
  if (const cudaError_t e = check_config(config, why); e != cudaSuccess) {
    fail_launch(e, why);
    return;
  }
  if (in_kernel()) {
    fail_launch(cudaErrorNotSupported, "a kernel launched from a kernel (no dynamic parallelism)");
    return;
  }
  // Configuration errors are reported at the launch; the grid runs on its stream (now, or when
  // waited for in deferred-streams mode), on the device that was current at the launch.
  int device = 0;
  cudaGetDevice(&device);
  detail::note_launch(device);
  detail::enqueue(config.stream, [config, body, ctx, keep = std::move(keep), device] {
    int current = 0;
    cudaGetDevice(&current);
    if (current != device) cudaSetDevice(device);
    run_grid(config, body, ctx);
    if (current != device) cudaSetDevice(current);
  });
}

void* dynamic_shared_memory() {
  if (detail::fibers::in_kernel()) return detail::fibers::dynamic_shared_memory();
  return detail::os_threads::dynamic_shared_memory();
}

int syncthreads(int predicate) {
  if (detail::fibers::in_kernel()) return detail::fibers::syncthreads(predicate);
  return detail::os_threads::syncthreads(predicate);
}

WarpResult warp_exchange(unsigned mask, const void* value, std::size_t bytes, int src_lane,
                         bool predicate, void* out) {
  if (detail::fibers::in_kernel()) {
    return detail::fibers::warp_exchange(mask, value, bytes, src_lane, predicate, out);
  }
  return detail::os_threads::warp_exchange(mask, value, bytes, src_lane, predicate, out);
}

unsigned lane_id() {
  if (detail::fibers::in_kernel()) return detail::fibers::lane_id();
  return detail::os_threads::lane_id();
}

unsigned active_mask() {
  if (detail::fibers::in_kernel()) return detail::fibers::active_mask();
  return detail::os_threads::active_mask();
}

bool in_kernel() {
  return detail::fibers::in_kernel() || detail::os_threads::in_kernel();
}

namespace detail {
void note_static_shared() {
  fibers::note_static_shared();
}
}  // namespace detail

}  // namespace stoke::emu
