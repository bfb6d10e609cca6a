// stoke's step profiler: RAII ranges recorded into per-thread buffers, written as a Chrome trace
// (chrome://tracing, ui.perfetto.dev: one track per thread) and summarized as a table (per op and
// autograd node: calls, total and self time, % of the profiled steps, GFLOP/s where the op said
// how many FLOPs it did; per step: data wait / H2D / forward / backward / comm / optimizer).
//
//   stoke::profiler::start();
//   { stoke::profiler::Range r("my block"); ... }
//   stoke::profiler::stop();
//   stoke::profiler::write_chrome_trace("trace.json");
//   std::cout << stoke::profiler::summary();
//
// What records itself: every op's backend call (ops::dispatch), every autograd node's backward,
// host<->device copies, communication waits (dist::Work::wait), the thread pool's and the data
// loader's threads; stoke-train adds the step phases (--profile). Off, a Range costs one relaxed
// atomic load and a branch. Ranges opened before start() are not recorded; ranges still open at
// stop() are recorded when they close.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace stoke::profiler {

// What a range is; the summary groups by it and the trace colours by it.
enum class Category : uint8_t {
  op,          // an ops:: backend call (forward kernels, also those run by a backward)
  backward,    // an autograd node's backward
  phase,       // a part of a training step: data wait, h2d, forward, backward, comm, optimizer
  step,        // one training step (the phases' parent)
  copy,        // host <-> device copies
  comm,        // waiting for communication (dist::Work::wait)
  collective,  // a collective's run (allreduce, reduce_scatter, ...) on the thread that ran it,
               // with its bus bytes (next_range_bus_bytes)
  data,        // the data loader's work
  pool,        // a thread-pool task
  user,        // anything else
  device,      // an op's time on a device (CUDA events), on the device's own track
};
const char* category_name(Category c);

// A device's event clock, registered by the CUDA runtime (cuda/runtime/profiler_timer.cpp):
// mark() records a timing event on the calling thread's current stream and returns its id;
// time_ns() waits for a mark and returns when the device reached it, in the profiler's host clock
// (ns since start()), or -1; device() is the mark's device index. reset() forgets every mark.
class DeviceTimer {
 public:
  virtual ~DeviceTimer() = default;
  virtual int64_t mark() = 0;
  virtual int64_t time_ns(int64_t mark) = 0;
  virtual int device(int64_t mark) = 0;
  virtual void reset() = 0;
};
void set_device_timer(DeviceTimer* timer);

namespace detail {
extern std::atomic<bool> g_enabled;
// The registered device timer while a profile with device_times runs, else null.
DeviceTimer* device_timer();
// An op's device time between two marks, shown on the device's track (name as begin()'s).
void add_device_range(const char* name, int64_t begin_mark, int64_t end_mark, double flops);
// The FLOPs the next range on this thread will carry (next_range_flops), without taking them.
double peek_next_flops();
// The profiler's clock: ns since start().
int64_t now_ns();
const char* intern(const std::string& name);
void begin(const char* name, Category category);
void begin_interned(const std::string& name, Category category);
void end();
void set_next_flops(double flops);
void set_next_bus_bytes(double bytes);
}  // namespace detail

// Whether ranges are being recorded.
inline bool enabled() {
  return detail::g_enabled.load(std::memory_order_relaxed);
}

// Records [construction, destruction) on this thread's track while the profiler is on. `name`
// must outlive the profile (a string literal); the std::string overload copies it (only when on).
class Range {
 public:
  explicit Range(const char* name, Category category = Category::user) : active_(enabled()) {
    if (active_) detail::begin(name, category);
  }
  Range(const std::string& name, Category category) : active_(enabled()) {
    if (active_) detail::begin_interned(name, category);
  }
  ~Range() {
    if (active_) detail::end();
  }
  Range(const Range&) = delete;
  Range& operator=(const Range&) = delete;

 private:
  bool active_;
};

// The next range opened on this thread did `flops` floating-point operations (an op's entry point
// says so before its backend call; the summary turns it into GFLOP/s).
inline void next_range_flops(double flops) {
  if (enabled()) detail::set_next_flops(flops);
}

// The next range opened on this thread is a collective that moved `bytes` by nccl-tests' bus
// accounting (allreduce 2 (n-1)/n of the buffer, reduce_scatter and allgather (n-1)/n of the whole
// buffer, broadcast all of it): its bytes / time is the bus bandwidth, comparable across algorithms
// and rank counts. The trace shows both.
inline void next_range_bus_bytes(double bytes) {
  if (enabled()) detail::set_next_bus_bytes(bytes);
}

// The name of this thread's track ("training", "loader worker 2", "pool worker 1"). Cheap when
// the profiler is off: kept for when this thread first records.
void set_thread_name(const std::string& name);

// Clears what an earlier profile recorded and starts recording.
struct StartOptions {
  // Also time every op on cuda tensors on the device, with a CUDA event before and after it (a few
  // microseconds of host time per op, so off by default): the device's own track in the trace
  // and `device` rows in the summary, whose GFLOP/s are against the device time.
  bool device_times = false;
};
void start(StartOptions options = {});
// Stops recording (what was recorded stays until the next start()).
void stop();

// One recorded range. Times in nanoseconds since start().
struct Event {
  const char* name;
  Category category;
  int64_t begin_ns, end_ns;  // end_ns < 0: still open
  double flops;              // 0: not said
  int depth;                 // nesting depth on its thread, 0 outermost
  int tid;                   // the thread's track
  double bus_bytes = 0;      // a collective's (next_range_bus_bytes); 0: not said
};
// Every recorded range, each thread's in the order opened. Safe while other threads record.
std::vector<Event> events();
// Track id -> thread name (index = tid).
std::vector<std::string> thread_names();

// The Chrome trace event format (a JSON object with "traceEvents": B/E pairs per range, balanced
// per thread, and thread-name metadata); ranges still open are left out.
std::string chrome_trace_json();
// Writes chrome_trace_json() to path; throws naming the path if it cannot.
void write_chrome_trace(const std::string& path);

// Per-name totals over the closed ranges of every thread.
struct OpStat {
  std::string name;
  Category category;
  int64_t calls = 0;
  double total_ms = 0, self_ms = 0;  // self: minus the time in ranges nested directly inside
  double flops = 0;                  // summed over the calls that said
};
std::vector<OpStat> op_stats();

// Per step (the Category::step ranges of one thread): wall time and the time of each phase
// directly inside it, in the order the phases first appear.
struct StepBreakdown {
  int64_t steps = 0;
  double step_ms = 0;                                  // summed over the steps
  std::vector<std::pair<std::string, double>> phases;  // name, ms summed over the steps
  double other_ms = 0;                                 // step time in no phase
  // What the steps cost the host and the device, summed over the steps (of every thread's step
  // ranges): host waits on the device outside and inside ExpectedSync scopes, kernel launches
  // (STOKE_LAUNCH), and device allocations that reached cudaMalloc (core/sync_debug.h).
  int64_t syncs = 0, expected_syncs = 0, launches = 0, device_allocs = 0;
  // Communication, summed over the steps: the collectives' time within the steps (the outermost
  // Category::collective ranges of any thread, clipped to the steps), and the part the steps
  // waited for (comm waits and collectives on a step's own thread, inside the step): what the
  // overlap with computation did not hide.
  double comm_ms = 0, exposed_comm_ms = 0;
};
StepBreakdown step_breakdown();

// The summary table: the step breakdown (when steps were recorded), then the `top` names by self
// time with calls, total, self, % of the profiled wall time (the steps', or first to last event),
// and GFLOP/s against peak_gflops (0: no % of peak column).
std::string summary(int top = 25, double peak_gflops = 0);

}  // namespace stoke::profiler
