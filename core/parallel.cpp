#include "core/parallel.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "core/error.h"
#include "core/profiler.h"

namespace stoke {
namespace {

thread_local bool t_in_parallel = false;

// How long a pool thread spins for the next loop (a worker) or for the others' chunks (the caller)
// before sleeping.
constexpr int kSpinMicros = 50;

class ThreadPool {
 public:
  explicit ThreadPool(int n) { resize(n); }
  ~ThreadPool() { stop(); }

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  void resize(int n) {
    stop();
    stopping_.store(false, std::memory_order_relaxed);
    // New workers start at the current generation: they must not run the previous loop again.
    // (No loop is in flight: resizing holds the same mutex as parallel_chunks.)
    const uint64_t start = generation_.load(std::memory_order_relaxed);
    for (int i = 1; i < n; ++i) workers_.emplace_back([this, i, start] { worker_loop(i, start); });
  }

  // Runs task(i) for i in [0, n) with the caller taking i = 0; the rest go to workers 1..n-1.
  void run(int n, const std::function<void(int)>& task) {
    std::unique_lock<std::mutex> lock(mutex_);
    task_ = &task;
    tasks_ = n;
    pending_.store(n - 1, std::memory_order_relaxed);
    error_ = nullptr;
    generation_.fetch_add(1, std::memory_order_release);
    lock.unlock();
    wake_.notify_all();
    run_one(task, 0);
    spin_until([&] { return pending_.load(std::memory_order_acquire) == 0; });
    lock.lock();
    done_.wait(lock, [&] { return pending_.load(std::memory_order_acquire) == 0; });
    task_ = nullptr;
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }

 private:
  void run_one(const std::function<void(int)>& task, int i) {
    t_in_parallel = true;
    try {
      task(i);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
    t_in_parallel = false;
  }

  // Waits up to kSpinMicros for ready() without sleeping. A thread that sleeps on a condition
  // variable between two loops of a training step pays the wake-up twice per loop, and a vCPU
  // that went idle comes back slow: a memory-bound op (hardswish over 6.4 MB) took 0.115-0.138 ms
  // with sleeping threads and 0.097 with spinning ones (OpenMP, which PyTorch uses, spins too).
  // Bounded, and yielding now and then, so that idle pool threads leave the cores to the data
  // loader's workers and to other processes (MPI ranks sharing the cores).
  template <class Ready>
  static void spin_until(Ready&& ready) {
    if (ready()) return;
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(kSpinMicros);
    for (int i = 1;; ++i) {
      if (ready()) return;
#if defined(__x86_64__) || defined(__i386__)
      _mm_pause();
#endif
      if (i % 64 == 0) {
        if (std::chrono::steady_clock::now() >= until) return;
        // Lets another runnable thread on this core go first (MPI ranks or loader workers sharing
        // the cores); returns at once when there is none.
        std::this_thread::yield();
      }
    }
  }

  void worker_loop(int index, uint64_t seen) {
    profiler::set_thread_name(::stoke::detail::str_cat("pool worker ", index));
    for (;;) {
      spin_until([&] {
        return stopping_.load(std::memory_order_relaxed) ||
               generation_.load(std::memory_order_acquire) != seen;
      });
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] {
        return stopping_.load(std::memory_order_relaxed) ||
               generation_.load(std::memory_order_relaxed) != seen;
      });
      if (stopping_.load(std::memory_order_relaxed)) return;
      seen = generation_.load(std::memory_order_relaxed);
      if (index >= tasks_) continue;
      const auto* task = task_;
      lock.unlock();
      {
        const profiler::Range range("parallel_for", profiler::Category::pool);
        run_one(*task, index);
      }
      lock.lock();
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) done_.notify_one();
    }
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_.store(true, std::memory_order_relaxed);
    }
    wake_.notify_all();
    for (auto& w : workers_) w.join();
    workers_.clear();
  }

  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  const std::function<void(int)>* task_ = nullptr;
  int tasks_ = 0;
  // Written under mutex_ (so that a thread waiting on a condition variable misses no change), read
  // without it while spinning.
  std::atomic<int> pending_{0};
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stopping_{false};
  std::exception_ptr error_;
};

int default_threads() {
  if (const char* env = std::getenv("STOKE_NUM_THREADS")) {
    const int n = std::atoi(env);
    if (n >= 1) return n;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

std::mutex& pool_mutex() {
  static std::mutex m;
  return m;
}

ThreadPool& pool() {
  static ThreadPool* p = new ThreadPool(default_threads());  // lives until exit
  return *p;
}

}  // namespace

int num_threads() {
  return pool().size();
}

void set_num_threads(int n) {
  STOKE_CHECK(n >= 1, "set_num_threads", "expected n >= 1, got ", n);
  STOKE_CHECK(!t_in_parallel, "set_num_threads", "cannot resize the pool inside a parallel loop");
  std::lock_guard<std::mutex> lock(pool_mutex());
  if (pool().size() != n) pool().resize(n);
}

bool in_parallel_region() {
  return t_in_parallel;
}

int64_t parallel_chunk_count(int64_t n, int64_t grain) {
  if (n <= 0) return 0;
  grain = std::max<int64_t>(grain, 1);
  const int64_t by_grain = (n + grain - 1) / grain;
  return std::max<int64_t>(1, std::min<int64_t>(num_threads(), by_grain));
}

void parallel_chunks(int64_t begin, int64_t end, int64_t grain,
                     const std::function<void(int64_t, int64_t, int64_t)>& f) {
  const int64_t n = end - begin;
  if (n <= 0) return;
  const int64_t chunks = t_in_parallel ? 1 : parallel_chunk_count(n, grain);
  if (chunks == 1) {
    f(0, begin, end);
    return;
  }
  const std::function<void(int)> task = [&](int i) {
    const int64_t b = begin + n * i / chunks, e = begin + n * (i + 1) / chunks;
    if (b < e) f(i, b, e);
  };
  std::lock_guard<std::mutex> lock(pool_mutex());  // one parallel loop at a time
  pool().run(static_cast<int>(chunks), task);
}

}  // namespace stoke
