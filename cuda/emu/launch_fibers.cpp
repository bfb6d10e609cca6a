// cuda/emu: the fiber execution mode (the default; STOKE_EMU_THREADS=fibers). Each OS thread that
// runs blocks (the launching thread and a pool of helpers, one per core) is a Worker: it takes
// blocks of the grid one at a time and runs the block's CUDA threads one after another on its own
// stack, as plain calls. Only a thread that must wait (at __syncthreads(), a shuffle, a vote,
// __syncwarp) leaves its stack: the worker continues with a released thread or starts the next
// one on another stack (cuda/emu/fiber.h), so a kernel without barriers never switches, and one
// with barriers switches once per thread and barrier. The order is fixed (threads start in index
// order, released threads resume first come first served), so a block runs the same way every
// time. Every waiting thread with nothing left to release it is a deadlock (a barrier in a
// divergent branch): the block fails with a message where the OS-thread mode would hang.
//
// __shared__ variables are function-local statics (cuda/emu/emu.h), one copy for the process, so
// two blocks of a kernel that uses them cannot run at once: the first __shared__ declaration a
// block reaches takes the launch's static-shared flag until the block ends, and the kernel is
// remembered so that its later launches run on the launching thread alone.
#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <thread>
#include <unordered_set>
#include <vector>

#include "cuda/emu/exec.h"
#include "cuda/emu/fiber.h"

namespace stoke::emu::detail::fibers {
namespace {

constexpr unsigned kMaxBlockThreads = 1024;
constexpr unsigned kWarp = 32;
constexpr unsigned kMaxWarps = kMaxBlockThreads / kWarp;
constexpr std::size_t kSlotBytes = 16;
// A CUDA thread's stack when it runs off the worker's own: kernels keep little there, but the
// emulator's error paths (message formatting, exception unwinding) and AddressSanitizer's red
// zones need more. Address space only: untouched pages cost nothing.
constexpr std::size_t kStackBytes = std::size_t{256} << 10;

// Kernels known to declare __shared__ variables: their blocks run one after another.
struct StaticSharedKernels {
  std::mutex m;
  std::unordered_set<const void*> kernels;
};
StaticSharedKernels& static_shared_kernels() {
  static StaticSharedKernels k;
  return k;
}
bool uses_static_shared(const void* kernel) {
  auto& k = static_shared_kernels();
  std::lock_guard lock(k.m);
  return k.kernels.count(kernel) != 0;
}

struct Job {
  const Grid* grid = nullptr;
  GridFailure* failure = nullptr;
  bool parallel = false;  // blocks on several workers at once
  std::atomic<std::uint64_t> next_block{0};
  std::atomic<bool> noted_static_shared{false};
  std::atomic<bool> static_shared_busy{false};  // a block of a parallel launch holds the statics
  std::atomic<std::uint64_t> switches{0};       // stack switches, all workers
};

// A warp's exchange: the OS-thread mode's rendezvous without the lock (one worker runs the whole
// block). Lanes publish, and a group is released when all live lanes of an arrived lane's mask
// have arrived.
struct Warp {
  std::uint32_t live = 0;
  std::uint32_t arrived = 0;
  std::uint32_t predicates = 0;
  std::array<std::uint32_t, kWarp> wait_mask{};
  std::array<int, kWarp> source{};
  std::array<std::uint32_t, kWarp> group{};
  std::array<std::uint32_t, kWarp> ballot{};
  alignas(16) unsigned char slot[kWarp][kSlotBytes] = {};
  alignas(16) unsigned char result[kWarp][kSlotBytes] = {};
};

struct Aborted {};  // thrown at the wait of each thread of a deadlocked block

class Worker;
thread_local Worker* t_running = nullptr;  // the worker running a block on this OS thread

class Worker {
 public:
  // Runs blocks of `job` until none are left or the grid failed.
  void run(Job& job) {
    job_ = &job;
    const Grid& grid = *job.grid;
    n_ = grid.threads;
    blockDim = grid.config.block;
    gridDim = grid.config.grid;
    // Each worker's blocks get their own dynamic shared memory, of exactly the launch's size.
    std::unique_ptr<unsigned char, AlignedFree> shared;
    if (grid.config.shared_bytes > 0) {
      shared.reset(static_cast<unsigned char*>(
          ::operator new (grid.config.shared_bytes, std::align_val_t{16})));
    }
    shared_ = shared.get();
    const dim3 g = grid.config.grid;
    while (!job.failure->failed()) {
      const std::uint64_t b = job.next_block.fetch_add(1, std::memory_order_relaxed);
      if (b >= grid.blocks) break;
      blockIdx = uint3{static_cast<unsigned>(b % g.x), static_cast<unsigned>((b / g.x) % g.y),
                       static_cast<unsigned>(b / (std::uint64_t{g.x} * g.y))};
      run_block();
    }
    shared_ = nullptr;
    job.switches.fetch_add(switches_, std::memory_order_relaxed);
    switches_ = 0;
    job_ = nullptr;
  }

  // ---- the kernel side: called by the running CUDA thread ----

  int syncthreads(int predicate) {
    ++arrived_;
    if (predicate != 0) ++count_;
    if (arrived_ == live_) {
      release_barrier();
    } else {
      barrier_waiters_[waiting_at_barrier_++] = current_;
      wait();
    }
    // Safe to read: the next barrier cannot complete before this thread arrives at it.
    return last_count_;
  }

  WarpResult warp_exchange(unsigned mask, const void* value, std::size_t bytes, int src_lane,
                           bool predicate, void* out) {
    STOKE_CHECK(bytes <= kSlotBytes, "emu", "warp exchange of at most ", kSlotBytes, " bytes, got ",
                bytes);
    const unsigned me = current_;
    const unsigned lane = me % kWarp;
    const std::uint32_t bit = 1u << lane;
    Warp& w = warps_[me / kWarp];
    if (bytes > 0) std::memcpy(w.slot[lane], value, bytes);
    w.source[lane] = src_lane;
    w.wait_mask[lane] = mask | bit;
    w.predicates = predicate ? (w.predicates | bit) : (w.predicates & ~bit);
    w.arrived |= bit;
    release_warp(me / kWarp);
    if ((w.arrived & bit) != 0) wait();  // still arrived: its group is not complete yet
    if (bytes > 0) std::memcpy(out, w.result[lane], bytes);
    return WarpResult{w.group[lane], w.ballot[lane]};
  }

  unsigned lane_id() const { return current_ % kWarp; }
  unsigned active_mask() const { return warps_[current_ / kWarp].live; }
  void* dynamic_shared_memory() const { return shared_; }

  void note_static_shared() {
    if (holds_static_shared_) return;
    holds_static_shared_ = true;
    Job& job = *job_;
    if (!job.noted_static_shared.exchange(true, std::memory_order_relaxed)) {
      auto& k = static_shared_kernels();
      std::lock_guard lock(k.m);
      k.kernels.insert(job.grid->config.kernel);
    }
    if (!job.parallel) return;
    // Until this block ends, no other block of the launch may use the statics. The holder never
    // waits for another worker, so this wait ends.
    while (job.static_shared_busy.exchange(true, std::memory_order_acquire)) {
      job.static_shared_busy.wait(true, std::memory_order_relaxed);
    }
  }

 private:
  struct AlignedFree {
    void operator()(unsigned char* p) const { ::operator delete (p, std::align_val_t{16}); }
  };
  // An extra stack: a fiber that runs not-yet-started threads until none are left, then parks.
  struct Stack {
    Worker* worker = nullptr;
    std::unique_ptr<Fiber> fiber;
  };

  void run_block() {
    next_ = 0;
    live_ = n_;
    done_ = 0;
    arrived_ = 0;
    count_ = 0;
    waiting_at_barrier_ = 0;
    run_head_ = run_tail_ = 0;
    aborting_ = false;
    holds_static_shared_ = false;
    for (unsigned w = 0; w * kWarp < n_; ++w) {
      const unsigned lanes = std::min(kWarp, n_ - w * kWarp);
      warps_[w].live = lanes == kWarp ? ~0u : ((1u << lanes) - 1);
      warps_[w].arrived = 0;
      warps_[w].predicates = 0;
    }
    t_running = this;
    run_threads(native_);
    // The threads that had to wait finish on the other stacks; the last one switches back here.
    if (done_ != n_) schedule(native_);
    t_running = nullptr;
    if (holds_static_shared_ && job_->parallel) {
      job_->static_shared_busy.store(false, std::memory_order_release);
      job_->static_shared_busy.notify_one();
    }
    holds_static_shared_ = false;
  }

  // Runs the threads not yet started, one after another as plain calls on `self`'s stack.
  void run_threads(Fiber& self) {
    while (next_ < n_) {
      const unsigned t = next_++;
      fiber_of_[t] = &self;
      enter(t);
      run_body();
      finish_thread(t);
    }
  }

  void enter(unsigned t) {
    current_ = t;
    const dim3 bd = blockDim;
    threadIdx = uint3{t % bd.x, (t / bd.x) % bd.y, t / (bd.x * bd.y)};
  }

  void run_body() {
    const Grid& grid = *job_->grid;
    try {
      grid.body(grid.ctx);
    } catch (const Aborted&) {
      // The deadlock is already recorded.
    } catch (const std::exception& e) {
      job_->failure->record(kernel_threw(e.what()));
    } catch (...) {
      job_->failure->record(kernel_threw("an exception not derived from std::exception"));
    }
  }

  // A returned thread drops out of its warp's exchanges and of the block's barrier.
  void finish_thread(unsigned t) {
    ++done_;
    if (aborting_) return;
    --live_;
    warps_[t / kWarp].live &= ~(1u << (t % kWarp));
    release_warp(t / kWarp);
    if (arrived_ > 0 && arrived_ == live_) release_barrier();
  }

  void release_barrier() {
    arrived_ = 0;
    last_count_ = count_;
    count_ = 0;
    for (unsigned i = 0; i < waiting_at_barrier_; ++i) make_runnable(barrier_waiters_[i]);
    waiting_at_barrier_ = 0;
  }

  // Releases every complete group of warp `wi`; its members other than the running thread
  // resume, in lane order, when the running thread next waits.
  void release_warp(unsigned wi) {
    Warp& w = warps_[wi];
    std::uint32_t pending = w.arrived;
    while (pending != 0) {
      const int first = std::countr_zero(pending);
      const std::uint32_t need = w.wait_mask[first] & w.live;  // includes `first`: it is live
      if ((w.arrived & need) != need) {
        pending &= ~(1u << first);
        continue;
      }
      const std::uint32_t votes = w.predicates & need;
      for (std::uint32_t rest = need; rest != 0; rest &= rest - 1) {
        const int k = std::countr_zero(rest);
        const int s = w.source[k];
        const int from = (s >= 0 && s < static_cast<int>(kWarp) && ((need >> s) & 1u)) ? s : k;
        std::memcpy(w.result[k], w.slot[from], kSlotBytes);
        w.group[k] = need;
        w.ballot[k] = votes;
        const unsigned t = wi * kWarp + static_cast<unsigned>(k);
        if (t != current_) make_runnable(t);
      }
      w.arrived &= ~need;
      pending &= ~need;
    }
  }

  void make_runnable(unsigned t) { runnable_[run_tail_++ % kMaxBlockThreads] = t; }

  // Suspends the running thread until it is released (or its block is abandoned).
  void wait() {
    schedule(*fiber_of_[current_]);
    if (aborting_) throw Aborted{};
  }

  // Leaves `from` (a waiting thread, a stack out of threads, or the block's end) for the next
  // thing to run: a released thread, else the next thread on a free stack, else (all done) the
  // worker's own stack. Returns when something switches back to `from`.
  void schedule(Fiber& from) {
    for (;;) {
      if (run_head_ != run_tail_) {
        const unsigned t = runnable_[run_head_++ % kMaxBlockThreads];
        enter(t);
        switch_to(from, *fiber_of_[t]);
        return;
      }
      if (next_ < n_) {
        switch_to(from, free_stack());
        return;
      }
      if (done_ == n_) {
        switch_to(from, native_);
        return;
      }
      abandon_block();
    }
  }

  void switch_to(Fiber& from, Fiber& to) {
    if (&from == &to) return;
    ++switches_;
    Fiber::switch_to(from, to);
  }

  // Every thread not done waits for one that never comes: fail the launch and resume each of
  // them to throw Aborted from its wait, so its stack unwinds.
  void abandon_block() {
    STOKE_CHECK(!aborting_, "emu",
                "fiber scheduler: an abandoned block has a thread that neither "
                "runs nor waits");
    aborting_ = true;
    const unsigned at_barrier = waiting_at_barrier_;
    unsigned in_warps = 0;
    for (unsigned i = 0; i < waiting_at_barrier_; ++i) make_runnable(barrier_waiters_[i]);
    waiting_at_barrier_ = 0;
    for (unsigned wi = 0; wi * kWarp < n_; ++wi) {
      for (std::uint32_t rest = warps_[wi].arrived; rest != 0; rest &= rest - 1) {
        make_runnable(wi * kWarp + static_cast<unsigned>(std::countr_zero(rest)));
        ++in_warps;
      }
      warps_[wi].arrived = 0;
    }
    job_->failure->record(stoke::detail::str_cat(
        "deadlock in block (", blockIdx.x, ",", blockIdx.y, ",", blockIdx.z, "): ", at_barrier,
        " thread(s) wait at __syncthreads() and ", in_warps,
        " at a warp shuffle, vote or __syncwarp() that the block's other threads never reach (a "
        "barrier or full-mask warp operation in a divergent branch?)"));
  }

  Fiber& free_stack() {
    if (free_.empty()) {
      auto stack = std::make_unique<Stack>();
      stack->worker = this;
      try {
        stack->fiber = std::make_unique<Fiber>(&stack_main, stack.get(), kStackBytes);
      } catch (const std::bad_alloc&) {
        // A thread is half-way into a wait here: there is no consistent way back into the block.
        std::fputs(
            "cuda/emu: cannot map a stack for a waiting CUDA thread (address space "
            "exhausted?); STOKE_EMU_THREADS=os runs blocks without extra stacks\n",
            stderr);
        std::abort();
      }
      free_.push_back(stack.get());
      stacks_.push_back(std::move(stack));
    }
    Stack* s = free_.back();
    free_.pop_back();
    return *s->fiber;
  }

  // An extra stack's life: run threads while any are unstarted, then park until needed again.
  static void stack_main(void* arg) {
    auto* stack = static_cast<Stack*>(arg);
    Worker& w = *stack->worker;
    for (;;) {
      w.run_threads(*stack->fiber);
      w.free_.push_back(stack);
      w.schedule(*stack->fiber);
    }
  }

  Job* job_ = nullptr;
  unsigned n_ = 0;  // threads per block
  unsigned char* shared_ = nullptr;
  std::uint64_t switches_ = 0;
  // The running block.
  unsigned current_ = 0;  // the running thread
  unsigned next_ = 0;     // the next thread to start
  unsigned live_ = 0;     // not yet returned
  unsigned done_ = 0;     // returned
  unsigned arrived_ = 0;  // waiting at __syncthreads
  int count_ = 0;         // __syncthreads_count accumulator
  int last_count_ = 0;
  bool aborting_ = false;
  bool holds_static_shared_ = false;
  unsigned waiting_at_barrier_ = 0;
  std::array<unsigned, kMaxBlockThreads> barrier_waiters_{};
  std::array<unsigned, kMaxBlockThreads> runnable_{};  // a ring: each thread is in it at most once
  unsigned run_head_ = 0;
  unsigned run_tail_ = 0;
  std::array<Fiber*, kMaxBlockThreads> fiber_of_{};  // the stack each started thread runs on
  std::array<Warp, kMaxWarps> warps_;
  // Stacks: the OS thread's own and the extra ones, kept across blocks and launches.
  Fiber native_;
  std::vector<std::unique_ptr<Stack>> stacks_;
  std::vector<Stack*> free_;
};

Worker& this_thread_worker() {
  thread_local std::unique_ptr<Worker> worker = std::make_unique<Worker>();
  return *worker;
}

// Helper OS threads for the blocks of parallel launches (the launching thread works too).
class Pool {
 public:
  ~Pool() {
    {
      std::lock_guard lock(m_);
      quit_ = true;
    }
    start_.notify_all();
    for (auto& t : threads_) t.join();
  }

  // Runs `job` on the calling thread and `helpers` pool threads; returns when all are done.
  void run(Job& job, unsigned helpers) {
    while (threads_.size() < helpers) {
      threads_.emplace_back(
          [this, index = static_cast<unsigned>(threads_.size())] { loop(index); });
    }
    {
      std::lock_guard lock(m_);
      job_ = &job;
      wanted_ = helpers;
      remaining_ = helpers;
      ++generation_;
    }
    start_.notify_all();
    this_thread_worker().run(job);
    std::unique_lock lock(m_);
    done_.wait(lock, [&] { return remaining_ == 0; });
    job_ = nullptr;
  }

 private:
  void loop(unsigned index) {
    std::uint64_t seen = 0;
    for (;;) {
      Job* job = nullptr;
      {
        std::unique_lock lock(m_);
        start_.wait(lock, [&] { return quit_ || (generation_ != seen && index < wanted_); });
        if (quit_) return;
        seen = generation_;
        job = job_;
      }
      this_thread_worker().run(*job);
      std::lock_guard lock(m_);
      if (--remaining_ == 0) done_.notify_one();
    }
  }

  std::mutex m_;
  std::condition_variable start_;
  std::condition_variable done_;
  Job* job_ = nullptr;
  unsigned wanted_ = 0;
  unsigned remaining_ = 0;
  std::uint64_t generation_ = 0;
  bool quit_ = false;
  std::vector<std::thread> threads_;
};

Pool& pool() {
  static Pool instance;
  return instance;
}

Worker& running(const char* what) {
  if (t_running == nullptr) STOKE_FAIL("emu", what, " called outside a kernel");
  return *t_running;
}

}  // namespace

std::uint64_t run(const Grid& grid, GridFailure& failure, unsigned workers) {
  Job job;
  job.grid = &grid;
  job.failure = &failure;
  const std::uint64_t helpers =
      std::min<std::uint64_t>(workers > 0 ? workers - 1 : 0, grid.blocks - 1);
  job.parallel = helpers > 0 && !uses_static_shared(grid.config.kernel);
  if (job.parallel) {
    pool().run(job, static_cast<unsigned>(helpers));
  } else {
    this_thread_worker().run(job);
  }
  return job.switches.load(std::memory_order_relaxed);
}

bool in_kernel() {
  return t_running != nullptr;
}

int syncthreads(int predicate) {
  return running("__syncthreads()").syncthreads(predicate);
}

WarpResult warp_exchange(unsigned mask, const void* value, std::size_t bytes, int src_lane,
                         bool predicate, void* out) {
  return running("a warp shuffle, vote or __syncwarp()")
      .warp_exchange(mask, value, bytes, src_lane, predicate, out);
}

unsigned lane_id() {
  return running("the lane id").lane_id();
}

unsigned active_mask() {
  return running("__activemask()").active_mask();
}

void* dynamic_shared_memory() {
  return running("STOKE_DYNAMIC_SHARED").dynamic_shared_memory();
}

void note_static_shared() {
  if (t_running != nullptr) t_running->note_static_shared();
}

}  // namespace stoke::emu::detail::fibers
