#include "core/parallel.h"

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/profiler.h"

namespace stoke {
namespace {

thread_local bool t_in_parallel = false;

class ThreadPool {
 public:
  explicit ThreadPool(int n) { resize(n); }
  ~ThreadPool() { stop(); }

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  void resize(int n) {
    stop();
    stopping_ = false;
    // New workers start at the current generation: they must not run the previous loop again.
    // (No loop is in flight: resizing holds the same mutex as parallel_chunks.)
    const uint64_t start = generation_;
    for (int i = 1; i < n; ++i) workers_.emplace_back([this, i, start] { worker_loop(i, start); });
  }

  // Runs task(i) for i in [0, n) with the caller taking i = 0; the rest go to workers 1..n-1.
  void run(int n, const std::function<void(int)>& task) {
    std::unique_lock<std::mutex> lock(mutex_);
    task_ = &task;
    tasks_ = n;
    pending_ = n - 1;
    error_ = nullptr;
    ++generation_;
    lock.unlock();
    wake_.notify_all();
    run_one(task, 0);
    lock.lock();
    done_.wait(lock, [&] { return pending_ == 0; });
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

  void worker_loop(int index, uint64_t seen) {
    profiler::set_thread_name(::stoke::detail::str_cat("pool worker ", index));
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      if (index >= tasks_) continue;
      const auto* task = task_;
      lock.unlock();
      {
        const profiler::Range range("parallel_for", profiler::Category::pool);
        run_one(*task, index);
      }
      lock.lock();
      if (--pending_ == 0) done_.notify_one();
    }
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (auto& w : workers_) w.join();
    workers_.clear();
  }

  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  const std::function<void(int)>* task_ = nullptr;
  int tasks_ = 0, pending_ = 0;
  uint64_t generation_ = 0;
  bool stopping_ = false;
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
