// cuda/emu: streams whose work is deferred. By default the emulator runs every launch, copy and
// memset when it is issued, which hides a whole class of GPU bugs: a read-back that does not wait
// for the stream that computes the data, a missing event wait between two streams, a pinned buffer
// refilled before its asynchronous copy ran. In deferred mode (set_deferred_streams(true), or
// STOKE_EMU_STREAMS=deferred in the environment) work queues on its stream and runs only when
// something waits for it, as late as CUDA's ordering rules allow:
//
// - cudaStreamSynchronize / cudaEventSynchronize / cudaDeviceSynchronize / cudaFree run the work
//   they wait for; cudaStreamQuery and cudaEventQuery say cudaErrorNotReady while it is pending;
// - cudaStreamWaitEvent makes the stream's later work wait for the event's stream up to the event;
// - the legacy default stream (0, cudaStreamLegacy) waits for the blocking streams' earlier work
//   and they wait for its earlier work; streams created with cudaStreamNonBlocking do neither, so a
//   synchronous cudaMemcpy does not wait for them (the bug this mode exists to show);
// - asynchronous copies from pageable host memory read the source when issued (CUDA stages them)
//   and to pageable host memory run synchronously; pinned and device memory are read and written
//   when the copy runs.
//
// One recursive mutex serializes the scheduler; work runs on the thread that waits for it.
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "cuda/emu/internal.h"

namespace stoke::emu {
namespace {

struct Task {
  std::uint64_t seq;
  std::vector<detail::StreamMark> after;  // run these streams up to these marks first
  std::function<void()> work;
};

struct Queue {
  std::deque<Task> pending;
  std::vector<detail::StreamMark> waits;  // cudaStreamWaitEvent: for the next task enqueued
  std::uint64_t issued = 0;               // sequence number of the last task enqueued
  std::uint64_t executed = 0;             // sequence number of the last task run
  bool blocking = true;                   // synchronizes with the legacy default stream
};

struct Scheduler {
  std::recursive_mutex m;
  bool deferred = false;
  std::map<cudaStream_t, Queue> queues;  // the legacy stream under nullptr

  Scheduler() {
    const char* env = std::getenv("STOKE_EMU_STREAMS");
    deferred = env != nullptr && std::strcmp(env, "deferred") == 0;
  }
};

Scheduler& scheduler() {
  static Scheduler s;
  return s;
}

// The legacy stream's key: the null stream, cudaStreamLegacy and (treated as legacy here)
// cudaStreamPerThread.
cudaStream_t key_of(cudaStream_t stream) {
  return (stream == cudaStreamLegacy || stream == cudaStreamPerThread) ? nullptr : stream;
}

// The queue of a live stream, made on first use.
Queue& queue_of(Scheduler& s, cudaStream_t stream) {
  const cudaStream_t key = key_of(stream);
  auto [it, inserted] = s.queues.try_emplace(key);
  if (inserted && key != nullptr)
    it->second.blocking = (detail::stream_flags(key) & cudaStreamNonBlocking) == 0;
  return it->second;
}

// Runs `key`'s tasks up to `seq`; a stream destroyed since (its queue was run then) has none.
void run_to(Scheduler& s, cudaStream_t key, std::uint64_t seq) {
  const auto it = s.queues.find(key);
  if (it == s.queues.end()) return;
  Queue& q = it->second;
  while (q.executed < seq && !q.pending.empty()) {
    Task task = std::move(q.pending.front());
    q.pending.pop_front();
    for (const detail::StreamMark& m : task.after) run_to(s, m.stream, m.seq);
    task.work();
    q.executed = task.seq;
  }
}

}  // namespace

namespace detail {

StreamMark enqueue(cudaStream_t stream, std::function<void()> work) {
  // A capturing stream records the work for its graph instead (graphs.cpp).
  if (capture_work(stream, work)) return {key_of(stream), 0};
  Scheduler& s = scheduler();
  std::unique_lock lock(s.m);
  if (!s.deferred) {
    lock.unlock();  // immediate mode: run now, concurrently with other host threads as before
    work();
    return {key_of(stream), 0};
  }
  const cudaStream_t key = key_of(stream);
  Queue& q = queue_of(s, key);
  Task task{++q.issued, std::exchange(q.waits, {}), std::move(work)};
  // Implicit ordering with the legacy default stream.
  if (key == nullptr) {
    for (auto& [other, oq] : s.queues)
      if (other != nullptr && oq.blocking && oq.executed < oq.issued)
        task.after.push_back({other, oq.issued});
  } else if (q.blocking) {
    Queue& legacy = queue_of(s, nullptr);
    if (legacy.executed < legacy.issued) task.after.push_back({nullptr, legacy.issued});
  }
  q.pending.push_back(std::move(task));
  return {key, q.issued};
}

void wait_for(cudaStream_t stream, const std::function<void()>& host_work) {
  Scheduler& s = scheduler();
  std::unique_lock lock(s.m);
  if (s.deferred) {
    const StreamMark m = enqueue(stream, [] {});
    run_to(s, m.stream, m.seq);
  } else {
    lock.unlock();
  }
  if (host_work) host_work();
}

bool deferred_streams() {
  Scheduler& s = scheduler();
  std::lock_guard lock(s.m);
  return s.deferred;
}

void add_wait(cudaStream_t stream, StreamMark mark) {
  Scheduler& s = scheduler();
  std::lock_guard lock(s.m);
  if (s.deferred && mark.seq > 0) queue_of(s, stream).waits.push_back(mark);
}

void run_until(StreamMark mark) {
  Scheduler& s = scheduler();
  std::lock_guard lock(s.m);
  if (s.deferred) run_to(s, mark.stream, mark.seq);
}

bool reached(StreamMark mark) {
  Scheduler& s = scheduler();
  std::lock_guard lock(s.m);
  if (!s.deferred) return true;
  const auto it = s.queues.find(mark.stream);
  return it == s.queues.end() || it->second.executed >= mark.seq;
}

bool idle(cudaStream_t stream) {
  Scheduler& s = scheduler();
  std::lock_guard lock(s.m);
  const auto it = s.queues.find(key_of(stream));
  return it == s.queues.end() || it->second.pending.empty();
}

void run_all() {
  Scheduler& s = scheduler();
  std::lock_guard lock(s.m);
  for (auto& [key, q] : s.queues) run_to(s, key, q.issued);
}

void forget_stream(cudaStream_t stream) {
  Scheduler& s = scheduler();
  std::lock_guard lock(s.m);
  const auto it = s.queues.find(stream);
  if (it == s.queues.end()) return;
  run_to(s, stream, it->second.issued);
  s.queues.erase(stream);
}

}  // namespace detail

bool set_deferred_streams(bool on) {
  Scheduler& s = scheduler();
  std::lock_guard lock(s.m);
  if (!on) detail::run_all();
  return std::exchange(s.deferred, on);
}

}  // namespace stoke::emu
