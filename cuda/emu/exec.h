// cuda/emu: the two ways a grid runs, chosen per launch by cuda/emu/launch.cpp
// (set_execution_mode, STOKE_EMU_THREADS): launch_threads.cpp runs every CUDA thread of a block
// on its own OS thread, launch_fibers.cpp runs a block's threads as fibers on one OS thread and
// spreads the blocks over a pool of them. Not an interface of the emulator.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

#include "cuda/emu/emu.h"

namespace stoke::emu::detail {

/// One grid to run: body(ctx) as every thread of every block.
struct Grid {
  LaunchConfig config;
  void (*body)(void*) = nullptr;
  void* ctx = nullptr;
  unsigned threads = 0;  // per block
  std::uint64_t blocks = 0;
};

/// The first failure of a grid (later ones are dropped, as a GPU reports one error).
class GridFailure {
 public:
  void record(std::string message) {
    std::lock_guard lock(m_);
    if (failed_.load(std::memory_order_relaxed)) return;
    message_ = std::move(message);
    failed_.store(true, std::memory_order_release);
  }
  /// True once a failure is recorded (checked between blocks: no further block starts).
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  std::string message() {
    std::lock_guard lock(m_);
    return message_;
  }

 private:
  std::mutex m_;
  std::atomic<bool> failed_{false};
  std::string message_;
};

/// "kernel threw in block (x,y,z) thread (x,y,z): what", for the calling CUDA thread.
std::string kernel_threw(const std::string& what);

// Each mode's entry points. run() returns when the grid has run (or stopped after a failed
// block); in_kernel() is true on a thread (or fiber) that is running one of the mode's blocks,
// and the kernel-side calls are valid only there. Both modes provide the same kernel-side calls,
// declared once here for each mode's namespace.
#define STOKE_EMU_MODE_KERNEL_CALLS                                                           \
  bool in_kernel();                                                                           \
  int syncthreads(int predicate);                                                             \
  WarpResult warp_exchange(unsigned mask, const void* value, std::size_t bytes, int src_lane, \
                           bool predicate, void* out);                                        \
  unsigned lane_id();                                                                         \
  unsigned active_mask();                                                                     \
  void* dynamic_shared_memory();

namespace os_threads {
/// Throws std::system_error when a thread cannot be started (before any block has run).
void run(const Grid& grid, GridFailure& failure);
STOKE_EMU_MODE_KERNEL_CALLS
}  // namespace os_threads

namespace fibers {
/// Runs the blocks on up to `workers` OS threads (the caller's among them); returns how many
/// times a worker switched stacks. Throws std::system_error when a pool thread cannot be started
/// (before any block has run).
std::uint64_t run(const Grid& grid, GridFailure& failure, unsigned workers);
STOKE_EMU_MODE_KERNEL_CALLS
void note_static_shared();
}  // namespace fibers

#undef STOKE_EMU_MODE_KERNEL_CALLS

}  // namespace stoke::emu::detail
