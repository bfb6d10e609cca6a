// cuda/emu: the OS-thread execution mode (STOKE_EMU_THREADS=os; the default in ThreadSanitizer
// builds). A pool of OS threads (grown to the largest block seen, reused across launches) runs
// thread t of every block on worker t; blocks run one after another, separated by a block-end
// barrier. __syncthreads(), the per-warp exchanges and the block-end barrier are
// std::mutex/condition_variable rendezvous: ThreadSanitizer understands them, and they are the only
// synchronization between the threads of a block, so a missing barrier is a reported race.
#include <algorithm>
#include <array>
#include <bit>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

#include "cuda/emu/exec.h"

namespace stoke::emu::detail::os_threads {
namespace {

constexpr unsigned kMaxBlockThreads = 1024;
constexpr unsigned kWarp = 32;
constexpr unsigned kMaxWarps = kMaxBlockThreads / kWarp;
constexpr std::size_t kSlotBytes = 16;

// One warp's exchange. Lanes publish a value, a predicate, the lane they want to read and the
// mask they wait for; when every live lane of an arrived lane's mask has arrived, that group is
// released at once and each member's result is copied out while the lock is held, so a fast lane
// may start its next exchange without overwriting what a slow one has yet to read.
struct Warp {
  std::mutex m;
  std::condition_variable cv;
  std::uint32_t live = 0;
  std::uint32_t arrived = 0;
  std::uint32_t released = 0;
  std::uint32_t predicates = 0;
  std::array<std::uint32_t, kWarp> wait_mask{};
  std::array<int, kWarp> source{};
  std::array<std::uint32_t, kWarp> group{};
  std::array<std::uint32_t, kWarp> ballot{};
  alignas(16) unsigned char slot[kWarp][kSlotBytes] = {};
  alignas(16) unsigned char result[kWarp][kSlotBytes] = {};

  void reset(std::uint32_t lanes) {
    live = lanes;
    arrived = released = predicates = 0;
  }

  // Called with m held after an arrival or an exit.
  void try_release() {
    bool any = false;
    std::uint32_t pending = arrived;
    while (pending != 0) {
      const int first = std::countr_zero(pending);
      const std::uint32_t need = wait_mask[first] & live;  // includes `first`: it is live
      if ((arrived & need) != need) {
        pending &= ~(1u << first);
        continue;
      }
      const std::uint32_t votes = predicates & need;
      for (std::uint32_t rest = need; rest != 0; rest &= rest - 1) {
        const int k = std::countr_zero(rest);
        const int s = source[k];
        const int from = (s >= 0 && s < static_cast<int>(kWarp) && ((need >> s) & 1u)) ? s : k;
        std::memcpy(result[k], slot[from], kSlotBytes);
        group[k] = need;
        ballot[k] = votes;
      }
      released |= need;
      arrived &= ~need;
      pending &= ~need;
      any = true;
    }
    if (any) cv.notify_all();
  }
};

// The block's barrier (__syncthreads) and the block-end barrier between consecutive blocks.
struct Block {
  std::mutex m;
  std::condition_variable cv;
  unsigned threads = 0;  // per block
  unsigned live = 0;     // not yet returned from the kernel
  unsigned arrived = 0;  // waiting at __syncthreads
  unsigned done = 0;     // returned, waiting for the next block
  int count = 0;         // __syncthreads_count accumulator
  int last_count = 0;
  std::uint64_t sync_gen = 0;
  std::uint64_t block_gen = 0;
  bool stop = false;  // a thread failed: run no further blocks

  void release_barrier() {
    arrived = 0;
    last_count = count;
    count = 0;
    ++sync_gen;
    cv.notify_all();
  }
};

struct AlignedFree {
  void operator()(unsigned char* p) const { ::operator delete (p, std::align_val_t{16}); }
};

struct Job {
  const Grid* grid = nullptr;
  GridFailure* failure = nullptr;
  std::unique_ptr<unsigned char, AlignedFree> shared;
  Block* block = nullptr;
  Warp* warps = nullptr;
  std::mutex m;
  std::condition_variable cv;
  unsigned remaining = 0;  // workers still running
};

struct ThreadContext {
  Job* job = nullptr;
  Warp* warp = nullptr;
  unsigned lane = 0;
};
thread_local ThreadContext tls;

void reset_warps(Job& job) {
  const unsigned threads = job.grid->threads;
  for (unsigned w = 0; w * kWarp < threads; ++w) {
    const unsigned lanes = std::min(kWarp, threads - w * kWarp);
    job.warps[w].reset(lanes == kWarp ? ~0u : ((1u << lanes) - 1));
  }
}

// Worker t's part of the grid: thread t of every block.
void run_thread(Job& job, unsigned t) {
  const Grid& grid = *job.grid;
  const dim3 bd = grid.config.block;
  const dim3 gd = grid.config.grid;
  blockDim = bd;
  gridDim = gd;
  threadIdx = uint3{t % bd.x, (t / bd.x) % bd.y, t / (bd.x * bd.y)};
  Warp& warp = job.warps[t / kWarp];
  const std::uint32_t bit = 1u << (t % kWarp);
  tls = ThreadContext{&job, &warp, t % kWarp};
  Block& block = *job.block;
  for (std::uint64_t b = 0; b < grid.blocks; ++b) {
    blockIdx = uint3{static_cast<unsigned>(b % gd.x), static_cast<unsigned>((b / gd.x) % gd.y),
                     static_cast<unsigned>(b / (std::uint64_t{gd.x} * gd.y))};
    try {
      grid.body(grid.ctx);
    } catch (const std::exception& e) {
      job.failure->record(kernel_threw(e.what()));
    } catch (...) {
      job.failure->record(kernel_threw("an exception not derived from std::exception"));
    }
    {  // A returned thread drops out of its warp's exchanges...
      std::lock_guard lock(warp.m);
      warp.live &= ~bit;
      warp.try_release();
    }
    // ... and out of the block's barrier; the last one to return starts the next block.
    std::unique_lock lock(block.m);
    --block.live;
    ++block.done;
    if (block.arrived > 0 && block.arrived == block.live) block.release_barrier();
    if (block.done == block.threads) {
      block.live = block.threads;
      block.done = 0;
      reset_warps(job);
      block.stop = job.failure->failed();
      ++block.block_gen;
      block.cv.notify_all();
    } else {
      const std::uint64_t gen = block.block_gen;
      block.cv.wait(lock, [&] { return block.block_gen != gen; });
    }
    if (block.stop) break;
  }
  tls = ThreadContext{};
}

class Pool {
 public:
  ~Pool() {
    for (auto& w : workers_) {
      {
        std::lock_guard lock(w->m);
        w->quit = true;
      }
      w->cv.notify_one();
      w->thread.join();
    }
  }

  // Runs the job on workers [0, threads); the caller holds the launch mutex.
  void run(Job& job) {
    const unsigned threads = job.grid->threads;
    while (workers_.size() < threads) {
      auto w = std::make_unique<Worker>();
      const auto index = static_cast<unsigned>(workers_.size());
      Worker* raw = w.get();
      w->thread = std::thread([raw, index] { loop(*raw, index); });
      workers_.push_back(std::move(w));
    }
    block_.threads = threads;
    block_.live = threads;
    block_.arrived = block_.done = 0;
    block_.count = 0;
    block_.stop = false;
    job.block = &block_;
    job.warps = warps_.data();
    reset_warps(job);
    job.remaining = threads;
    for (unsigned i = 0; i < threads; ++i) {
      Worker& w = *workers_[i];
      {
        std::lock_guard lock(w.m);
        w.job = &job;
      }
      w.cv.notify_one();
    }
    std::unique_lock lock(job.m);
    job.cv.wait(lock, [&] { return job.remaining == 0; });
  }

 private:
  struct Worker {
    std::mutex m;
    std::condition_variable cv;
    Job* job = nullptr;
    bool quit = false;
    std::thread thread;
  };

  static void loop(Worker& w, unsigned index) {
    for (;;) {
      Job* job = nullptr;
      {
        std::unique_lock lock(w.m);
        w.cv.wait(lock, [&] { return w.job != nullptr || w.quit; });
        if (w.quit) return;
        job = std::exchange(w.job, nullptr);
      }
      run_thread(*job, index);
      std::lock_guard lock(job->m);
      if (--job->remaining == 0) job->cv.notify_one();
    }
  }

  std::vector<std::unique_ptr<Worker>> workers_;
  Block block_;
  std::array<Warp, kMaxWarps> warps_;
};

Pool& pool() {
  static Pool instance;
  return instance;
}

ThreadContext& kernel_context(const char* what) {
  if (tls.job == nullptr) STOKE_FAIL("emu", what, " called outside a kernel");
  return tls;
}

}  // namespace

void run(const Grid& grid, GridFailure& failure) {
  Job job;
  job.grid = &grid;
  job.failure = &failure;
  if (grid.config.shared_bytes > 0) {
    job.shared.reset(static_cast<unsigned char*>(
        ::operator new (grid.config.shared_bytes, std::align_val_t{16})));
  }
  pool().run(job);
}

bool in_kernel() {
  return tls.job != nullptr;
}

void* dynamic_shared_memory() {
  return kernel_context("STOKE_DYNAMIC_SHARED").job->shared.get();
}

int syncthreads(int predicate) {
  Block& b = *kernel_context("__syncthreads()").job->block;
  std::unique_lock lock(b.m);
  ++b.arrived;
  if (predicate != 0) ++b.count;
  if (b.arrived == b.live) {
    b.release_barrier();
  } else {
    const std::uint64_t gen = b.sync_gen;
    b.cv.wait(lock, [&] { return b.sync_gen != gen; });
  }
  // Safe to read: the next barrier cannot complete before this thread arrives at it.
  return b.last_count;
}

WarpResult warp_exchange(unsigned mask, const void* value, std::size_t bytes, int src_lane,
                         bool predicate, void* out) {
  ThreadContext& c = kernel_context("a warp shuffle, vote or __syncwarp()");
  STOKE_CHECK(bytes <= kSlotBytes, "emu", "warp exchange of at most ", kSlotBytes, " bytes, got ",
              bytes);
  Warp& w = *c.warp;
  const unsigned lane = c.lane;
  const std::uint32_t bit = 1u << lane;
  std::unique_lock lock(w.m);
  if (bytes > 0) std::memcpy(w.slot[lane], value, bytes);
  w.source[lane] = src_lane;
  w.wait_mask[lane] = mask | bit;
  w.predicates = predicate ? (w.predicates | bit) : (w.predicates & ~bit);
  w.arrived |= bit;
  w.try_release();
  w.cv.wait(lock, [&] { return (w.released & bit) != 0; });
  w.released &= ~bit;
  if (bytes > 0) std::memcpy(out, w.result[lane], bytes);
  return WarpResult{w.group[lane], w.ballot[lane]};
}

unsigned lane_id() {
  return kernel_context("the lane id").lane;
}

unsigned active_mask() {
  ThreadContext& c = kernel_context("__activemask()");
  std::lock_guard lock(c.warp->m);
  return c.warp->live;
}

}  // namespace stoke::emu::detail::os_threads
