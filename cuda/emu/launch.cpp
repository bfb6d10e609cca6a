// cuda/emu: running a grid. A pool of OS threads (grown to the largest block seen, reused across
// launches) runs thread t of every block on worker t; blocks run one after another, separated by
// a block-end barrier. __syncthreads(), the per-warp exchanges and the block-end barrier are
// std::mutex/condition_variable rendezvous: ThreadSanitizer understands them, and they are the only
// synchronization between the threads of a block, so a missing barrier is a reported race.
#include <array>
#include <bit>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <system_error>
#include <thread>
#include <vector>

#include "cuda/emu/internal.h"

namespace stoke::emu {
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
  LaunchConfig config;
  void (*body)(void*) = nullptr;
  void* ctx = nullptr;
  unsigned threads = 0;
  std::uint64_t blocks = 0;
  std::unique_ptr<unsigned char, AlignedFree> shared;
  Block* block = nullptr;
  Warp* warps = nullptr;
  std::mutex m;
  std::condition_variable cv;
  unsigned remaining = 0;  // workers still running
  bool failed = false;
  std::string failure;

  void fail(const std::string& what) {
    std::lock_guard lock(m);
    if (failed) return;  // the first failure is the one reported
    failed = true;
    failure = stoke::detail::str_cat("kernel threw in block (", blockIdx.x, ",", blockIdx.y, ",",
                                     blockIdx.z, ") thread (", threadIdx.x, ",", threadIdx.y, ",",
                                     threadIdx.z, "): ", what);
  }
};

struct ThreadContext {
  Job* job = nullptr;
  Warp* warp = nullptr;
  unsigned lane = 0;
};
thread_local ThreadContext tls;

void reset_warps(Job& job) {
  for (unsigned w = 0; w * kWarp < job.threads; ++w) {
    const unsigned lanes = std::min(kWarp, job.threads - w * kWarp);
    job.warps[w].reset(lanes == kWarp ? ~0u : ((1u << lanes) - 1));
  }
}

// Worker t's part of the grid: thread t of every block.
void run_thread(Job& job, unsigned t) {
  const dim3 bd = job.config.block;
  const dim3 gd = job.config.grid;
  blockDim = bd;
  gridDim = gd;
  threadIdx = uint3{t % bd.x, (t / bd.x) % bd.y, t / (bd.x * bd.y)};
  Warp& warp = job.warps[t / kWarp];
  const std::uint32_t bit = 1u << (t % kWarp);
  tls = ThreadContext{&job, &warp, t % kWarp};
  Block& block = *job.block;
  for (std::uint64_t b = 0; b < job.blocks; ++b) {
    blockIdx = uint3{static_cast<unsigned>(b % gd.x), static_cast<unsigned>((b / gd.x) % gd.y),
                     static_cast<unsigned>(b / (std::uint64_t{gd.x} * gd.y))};
    try {
      job.body(job.ctx);
    } catch (const std::exception& e) {
      job.fail(e.what());
    } catch (...) {
      job.fail("an exception not derived from std::exception");
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
      {
        std::lock_guard failure_lock(job.m);
        block.stop = job.failed;
      }
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

  // Runs the job on workers [0, job.threads); the caller holds the launch mutex.
  void run(Job& job) {
    while (workers_.size() < job.threads) {
      auto w = std::make_unique<Worker>();
      const auto index = static_cast<unsigned>(workers_.size());
      Worker* raw = w.get();
      w->thread = std::thread([raw, index] { loop(*raw, index); });
      workers_.push_back(std::move(w));
    }
    block_.threads = job.threads;
    block_.live = job.threads;
    block_.arrived = block_.done = 0;
    block_.count = 0;
    block_.stop = false;
    job.block = &block_;
    job.warps = warps_.data();
    reset_warps(job);
    job.remaining = job.threads;
    for (unsigned i = 0; i < job.threads; ++i) {
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

std::mutex& launch_mutex() {
  static std::mutex m;
  return m;
}

ThreadContext& kernel_context(const char* what) {
  if (tls.job == nullptr) STOKE_FAIL("emu", what, " called outside a kernel");
  return tls;
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

void run_grid(const LaunchConfig& config, void (*body)(void*), void* ctx);

cudaError_t fail_launch(cudaError_t error, const std::string& why) {
  detail::set_failure_detail(stoke::detail::str_cat("launch rejected: ", why));
  return detail::set_last_error(error);
}

}  // namespace

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

namespace {
void run_grid(const LaunchConfig& config, void (*body)(void*), void* ctx) {
  std::lock_guard serialize(launch_mutex());
  Job job;
  job.config = config;
  job.body = body;
  job.ctx = ctx;
  job.threads = config.block.x * config.block.y * config.block.z;
  job.blocks = std::uint64_t{config.grid.x} * config.grid.y * config.grid.z;
  if (config.shared_bytes > 0) {
    job.shared.reset(
        static_cast<unsigned char*>(::operator new (config.shared_bytes, std::align_val_t{16})));
  }
  try {
    const DeviceAccess access;  // the kernel's threads may touch device memory
    pool().run(job);
  } catch (const std::system_error& e) {
    // Only thread creation throws here, and only before any worker of this job started.
    fail_launch(cudaErrorLaunchOutOfResources,
                stoke::detail::str_cat("cannot start threads: ", e.what()));
    return;
  }
  detail::count_launch();
  if (job.failed) {
    detail::set_failure_detail(job.failure);
    detail::set_last_error(cudaErrorLaunchFailure);
  }
}
}  // namespace

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

bool in_kernel() {
  return tls.job != nullptr;
}

}  // namespace stoke::emu
