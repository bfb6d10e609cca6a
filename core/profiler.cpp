#include "core/profiler.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_set>

#include "core/allocator.h"
#include "core/enum_name.h"
#include "core/error.h"
#include "core/files.h"
#include "core/sync_debug.h"

namespace stoke::profiler {

std::atomic<bool> detail::g_enabled{false};
namespace {
std::atomic<DeviceTimer*> g_active_timer{nullptr};  // set by start() with device_times
}  // namespace

namespace {

// One thread's events. Its own thread appends under the mutex (uncontended unless a reader is
// copying), so events() and the trace can run while the training goes on.
struct ThreadBuffer {
  std::mutex mutex;
  std::vector<Event> events;
  std::vector<size_t> open;  // indices of the ranges open now, innermost last
  std::string name;
  int tid = 0;
};

// An op's device range: the marks, then (once resolved) its device times.
struct DeviceRange {
  const char* name;
  int64_t begin_mark, end_mark;
  double flops;
  bool resolved = false;
  int64_t begin_ns = -1, end_ns = -1;
  int device = 0;
};

struct Registry {
  std::mutex mutex;
  DeviceTimer* timer = nullptr;                        // under mutex
  std::vector<DeviceRange> device_ranges;              // under mutex
  std::vector<std::shared_ptr<ThreadBuffer>> buffers;  // kept after their threads end
  std::unordered_set<std::string> interned;            // node-based: c_str() stays put
  // start()'s time on the steady clock, in ns: atomic, as a range opened before a start() may
  // close (and read it) while start() sets it.
  std::atomic<int64_t> epoch_ns{0};
  DeviceActivity step_activity;  // under mutex: summed over the step ranges closed since start()
  int64_t step_device_allocs = 0;
};
Registry& registry() {
  static Registry* r = new Registry;  // lives until exit: threads may record during shutdown
  return *r;
}

thread_local std::shared_ptr<ThreadBuffer> t_buffer;
thread_local std::string t_name;
thread_local double t_next_flops = 0;
thread_local double t_next_bus_bytes = 0;
// Per open step range of this thread: the device activity and allocations when it opened.
thread_local std::vector<std::pair<DeviceActivity, size_t>> t_step_marks;

ThreadBuffer& buffer() {
  if (!t_buffer) {
    auto b = std::make_shared<ThreadBuffer>();
    b->events.reserve(4096);
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    b->tid = static_cast<int>(r.buffers.size());
    b->name = t_name.empty() ? (b->tid == 0 ? "main" : "thread " + std::to_string(b->tid)) : t_name;
    r.buffers.push_back(b);
    t_buffer = std::move(b);
  }
  return *t_buffer;
}

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t clock_ns() {
  return steady_ns() - registry().epoch_ns.load(std::memory_order_relaxed);
}

std::vector<std::shared_ptr<ThreadBuffer>> all_buffers() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.buffers;
}

// Walks one thread's events (pre-order, properly nested) keeping the stack of enclosing closed
// ranges: visit(event, parent or nullptr). Open ranges are skipped.
template <class F>
void walk(const std::vector<Event>& events, F&& visit) {
  std::vector<const Event*> stack;
  for (const Event& e : events) {
    if (e.end_ns < 0) continue;
    while (!stack.empty() && stack.back()->end_ns <= e.begin_ns && stack.back()->end_ns < e.end_ns)
      stack.pop_back();
    visit(e, stack.empty() ? nullptr : stack.back());
    stack.push_back(&e);
  }
}

std::string json_escape(const char* s) {
  std::string out;
  for (; *s; ++s) {
    const unsigned char c = static_cast<unsigned char>(*s);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

}  // namespace

const char* category_name(Category c) {
  static constexpr const char* names[] = {"op",   "backward", "phase",      "step",
                                          "copy", "comm",     "collective", "data",
                                          "pool", "user",     "device"};
  static_assert(std::size(names) == enum_count(Category::device));
  return enum_name(c, names, "?");
}

void detail::begin(const char* name, Category category) {
  ThreadBuffer& b = buffer();
  const double flops = t_next_flops, bus_bytes = t_next_bus_bytes;
  t_next_flops = 0;
  t_next_bus_bytes = 0;
  const int64_t t = clock_ns();
  if (category == Category::step)
    t_step_marks.emplace_back(device_activity(), device_system_allocs());
  std::lock_guard<std::mutex> lock(b.mutex);
  b.open.push_back(b.events.size());
  b.events.push_back(
      {name, category, t, -1, flops, static_cast<int>(b.open.size()) - 1, b.tid, bus_bytes});
}

const char* detail::intern(const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.interned.insert(name).first->c_str();
}

void detail::begin_interned(const std::string& name, Category category) {
  begin(intern(name), category);
}

double detail::peek_next_flops() {
  return t_next_flops;
}

int64_t detail::now_ns() {
  return clock_ns();
}

DeviceTimer* detail::device_timer() {
  return enabled() ? g_active_timer.load(std::memory_order_relaxed) : nullptr;
}

void detail::add_device_range(const char* name, int64_t begin_mark, int64_t end_mark,
                              double flops) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.device_ranges.push_back({name, begin_mark, end_mark, flops});
}

void set_device_timer(DeviceTimer* timer) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.timer = timer;
}

void detail::end() {
  const int64_t t = clock_ns();
  ThreadBuffer& b = buffer();
  std::unique_lock<std::mutex> lock(b.mutex);
  if (b.open.empty()) return;  // opened before a start() that cleared it
  Event& e = b.events[b.open.back()];
  e.end_ns = t;
  b.open.pop_back();
  if (e.category != Category::step || t_step_marks.empty()) return;
  lock.unlock();
  const auto [a0, m0] = t_step_marks.back();
  t_step_marks.pop_back();
  const DeviceActivity d = device_activity() - a0;
  const size_t m = device_system_allocs();
  Registry& r = registry();
  std::lock_guard<std::mutex> rlock(r.mutex);
  r.step_activity.syncs += d.syncs;
  r.step_activity.expected_syncs += d.expected_syncs;
  r.step_activity.launches += d.launches;
  r.step_device_allocs += static_cast<int64_t>(m - m0);
}

void detail::set_next_flops(double flops) {
  t_next_flops = flops;
}

void detail::set_next_bus_bytes(double bytes) {
  t_next_bus_bytes = bytes;
}

void set_thread_name(const std::string& name) {
  t_name = name;
  if (t_buffer) {
    std::lock_guard<std::mutex> lock(t_buffer->mutex);
    t_buffer->name = name;
  }
}

void start(StartOptions options) {
  detail::g_enabled.store(false);
  g_active_timer.store(nullptr);
  Registry& r = registry();
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    r.device_ranges.clear();
    if (r.timer) r.timer->reset();
    if (options.device_times) g_active_timer.store(r.timer);
    for (auto& b : r.buffers) {
      std::lock_guard<std::mutex> block(b->mutex);
      b->events.clear();
      b->open.clear();
    }
    r.epoch_ns.store(steady_ns());
    r.step_activity = {};
    r.step_device_allocs = 0;
  }
  detail::g_enabled.store(true);
}

void stop() {
  detail::g_enabled.store(false);
}

std::vector<std::string> thread_names() {
  std::vector<std::string> out;
  for (auto& b : all_buffers()) {
    std::lock_guard<std::mutex> lock(b->mutex);
    out.push_back(b->name);
  }
  return out;
}

namespace {

// Each thread's events, copied under its lock, and its name.
struct ThreadEvents {
  int tid;
  std::string name;
  std::vector<Event> events;
};
// The device ranges, resolved (this waits for their events), one track per device after the
// threads': tid 1000 + device index.
void append_device_tracks(std::vector<ThreadEvents>& out) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::map<int, std::vector<Event>> by_device;
  for (DeviceRange& d : r.device_ranges) {
    if (!d.resolved && r.timer) {
      d.begin_ns = r.timer->time_ns(d.begin_mark);
      d.end_ns = r.timer->time_ns(d.end_mark);
      d.device = r.timer->device(d.begin_mark);
      d.resolved = true;
    }
    if (d.begin_ns < 0 || d.end_ns < d.begin_ns) continue;
    by_device[d.device].push_back(
        {d.name, Category::device, d.begin_ns, d.end_ns, d.flops, 0, 1000 + d.device});
  }
  for (auto& [device, events] : by_device) {
    // Pre-order: by start, the enclosing (longer) range first.
    std::sort(events.begin(), events.end(), [](const Event& a, const Event& b) {
      return a.begin_ns != b.begin_ns ? a.begin_ns < b.begin_ns : a.end_ns > b.end_ns;
    });
    // One track must nest. Ops from two host threads (or streams) on one device can overlap in
    // part; such a range is cut at its enclosing range's end, so that B/E stay balanced and self
    // times never go negative.
    std::vector<Event*> stack;
    for (Event& e : events) {
      while (!stack.empty() && stack.back()->end_ns <= e.begin_ns) stack.pop_back();
      if (!stack.empty()) e.end_ns = std::min(e.end_ns, stack.back()->end_ns);
      e.depth = static_cast<int>(stack.size());
      stack.push_back(&e);
    }
    out.push_back({1000 + device, "cuda:" + std::to_string(device) + " (device)", events});
  }
}

std::vector<ThreadEvents> snapshot() {
  std::vector<ThreadEvents> out;
  for (auto& b : all_buffers()) {
    std::lock_guard<std::mutex> lock(b->mutex);
    if (!b->events.empty()) out.push_back({b->tid, b->name, b->events});
  }
  append_device_tracks(out);
  return out;
}

}  // namespace

std::vector<Event> events() {
  std::vector<Event> out;
  for (const ThreadEvents& t : snapshot()) out.insert(out.end(), t.events.begin(), t.events.end());
  return out;
}

std::string chrome_trace_json() {
  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[";
  bool first = true;
  auto emit = [&](const std::string& e) {
    if (!first) out += ",\n";
    first = false;
    out += e;
  };
  char ts[64];
  for (const ThreadEvents& t : snapshot()) {
    emit(
        ::stoke::detail::str_cat("{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":1,\"tid\":", t.tid,
                                 ",\"args\":{\"name\":\"", json_escape(t.name.c_str()), "\"}}"));
    std::vector<const Event*> stack;
    auto close = [&](const Event* e) {
      std::snprintf(ts, sizeof ts, "%.3f", static_cast<double>(e->end_ns) / 1e3);
      emit(
          ::stoke::detail::str_cat("{\"ph\":\"E\",\"pid\":1,\"tid\":", t.tid, ",\"ts\":", ts, "}"));
    };
    for (const Event& e : t.events) {
      if (e.end_ns < 0) continue;
      while (!stack.empty() && stack.back()->end_ns <= e.begin_ns &&
             stack.back()->end_ns < e.end_ns) {
        close(stack.back());
        stack.pop_back();
      }
      std::snprintf(ts, sizeof ts, "%.3f", static_cast<double>(e.begin_ns) / 1e3);
      std::string args;
      if (e.flops > 0) args = ::stoke::detail::str_cat(",\"args\":{\"flops\":", e.flops, "}");
      if (e.bus_bytes > 0 && e.end_ns > e.begin_ns)  // bytes per ns: GB/s
        args = ::stoke::detail::str_cat(
            ",\"args\":{\"bus_bytes\":", e.bus_bytes,
            ",\"busbw_GBps\":", e.bus_bytes / static_cast<double>(e.end_ns - e.begin_ns), "}");
      emit(::stoke::detail::str_cat("{\"ph\":\"B\",\"pid\":1,\"tid\":", t.tid, ",\"ts\":", ts,
                                    ",\"name\":\"", json_escape(e.name), "\",\"cat\":\"",
                                    category_name(e.category), "\"", args, "}"));
      stack.push_back(&e);
    }
    while (!stack.empty()) {
      close(stack.back());
      stack.pop_back();
    }
  }
  out += "]}\n";
  return out;
}

void write_chrome_trace(const std::string& path) {
  const std::string json = chrome_trace_json();
  // Never blocks on a FIFO, and names a directory or other special file (core/files.h).
  const int fd = open_output_file(path, O_TRUNC, "profiler", "the trace file");
  size_t done = 0;
  while (done < json.size()) {
    const ssize_t n = ::write(fd, json.data() + done, json.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : ENOSPC;
      ::close(fd);
      STOKE_FAIL("profiler", "cannot write ", path, ": ", std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  STOKE_CHECK(::close(fd) == 0, "profiler", "cannot write ", path, ": ", std::strerror(errno));
}

std::vector<OpStat> op_stats() {
  std::map<std::pair<std::string, Category>, OpStat> by_name;  // host and device rows apart
  for (const ThreadEvents& t : snapshot()) {
    std::map<const Event*, double> child_ms;
    walk(t.events, [&](const Event& e, const Event* parent) {
      if (parent) child_ms[parent] += static_cast<double>(e.end_ns - e.begin_ns) / 1e6;
    });
    walk(t.events, [&](const Event& e, const Event*) {
      OpStat& s = by_name[{e.name, e.category}];
      s.name = e.name;
      s.category = e.category;
      const double ms = static_cast<double>(e.end_ns - e.begin_ns) / 1e6;
      s.calls += 1;
      s.total_ms += ms;
      const auto c = child_ms.find(&e);
      s.self_ms += ms - (c == child_ms.end() ? 0.0 : c->second);
      s.flops += e.flops;
    });
  }
  std::vector<OpStat> out;
  for (auto& [key, s] : by_name) out.push_back(s);
  std::sort(out.begin(), out.end(),
            [](const OpStat& a, const OpStat& b) { return a.self_ms > b.self_ms; });
  return out;
}

StepBreakdown step_breakdown() {
  StepBreakdown out;
  const std::vector<ThreadEvents> threads = snapshot();
  // Communication: the steps' intervals (every thread's, merged), and each thread's own.
  std::vector<std::pair<int64_t, int64_t>> all_steps;
  std::vector<std::vector<std::pair<int64_t, int64_t>>> own_steps(threads.size());
  for (size_t i = 0; i < threads.size(); ++i)
    for (const Event& e : threads[i].events)
      if (e.category == Category::step && e.end_ns >= 0) {
        all_steps.emplace_back(e.begin_ns, e.end_ns);
        own_steps[i].emplace_back(e.begin_ns, e.end_ns);
      }
  std::sort(all_steps.begin(), all_steps.end());
  std::vector<std::pair<int64_t, int64_t>> merged;
  for (const auto& s : all_steps)
    if (!merged.empty() && s.first <= merged.back().second)
      merged.back().second = std::max(merged.back().second, s.second);
    else
      merged.push_back(s);
  auto overlap_ms = [](const std::vector<std::pair<int64_t, int64_t>>& steps, const Event& e) {
    int64_t ns = 0;
    for (const auto& [b, en] : steps)
      ns += std::max<int64_t>(0, std::min(en, e.end_ns) - std::max(b, e.begin_ns));
    return static_cast<double>(ns) / 1e6;
  };
  auto is_comm = [](const Event* e) {
    return e && (e->category == Category::comm || e->category == Category::collective);
  };
  for (size_t i = 0; i < threads.size(); ++i) {
    walk(threads[i].events, [&](const Event& e, const Event* parent) {
      if (!is_comm(&e) || is_comm(parent)) return;  // the outermost communication ranges
      if (e.category == Category::collective) out.comm_ms += overlap_ms(merged, e);
      out.exposed_comm_ms += overlap_ms(own_steps[i], e);
    });
  }
  for (const ThreadEvents& t : threads) {
    walk(t.events, [&](const Event& e, const Event* parent) {
      const double ms = static_cast<double>(e.end_ns - e.begin_ns) / 1e6;
      if (e.category == Category::step) {
        out.steps += 1;
        out.step_ms += ms;
      } else if (e.category == Category::phase && parent && parent->category == Category::step) {
        auto it = std::find_if(out.phases.begin(), out.phases.end(),
                               [&](const auto& p) { return p.first == e.name; });
        if (it == out.phases.end())
          out.phases.emplace_back(e.name, ms);
        else
          it->second += ms;
      }
    });
  }
  double in_phases = 0;
  for (const auto& p : out.phases) in_phases += p.second;
  out.other_ms = std::max(0.0, out.step_ms - in_phases);
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  out.syncs = r.step_activity.syncs;
  out.expected_syncs = r.step_activity.expected_syncs;
  out.launches = r.step_activity.launches;
  out.device_allocs = r.step_device_allocs;
  return out;
}

std::string summary(int top, double peak_gflops) {
  const StepBreakdown steps = step_breakdown();
  const std::vector<OpStat> stats = op_stats();
  double wall_ms = steps.step_ms;
  if (steps.steps == 0) {
    int64_t lo = INT64_MAX, hi = 0;
    for (const Event& e : events())
      if (e.end_ns >= 0) lo = std::min(lo, e.begin_ns), hi = std::max(hi, e.end_ns);
    wall_ms = hi > lo ? static_cast<double>(hi - lo) / 1e6 : 0;
  }
  std::string out;
  char line[256];
  if (steps.steps > 0) {
    const double n = static_cast<double>(steps.steps);
    std::snprintf(line, sizeof line, "profile: %lld steps, %.1f ms (%.2f ms per step)\n",
                  static_cast<long long>(steps.steps), steps.step_ms, steps.step_ms / n);
    out += line;
    out += "  step breakdown          ms/step    % of step\n";
    auto row = [&](const std::string& name, double ms) {
      std::snprintf(line, sizeof line, "  %-22s %8.3f %11.1f\n", name.c_str(), ms / n,
                    steps.step_ms > 0 ? 100.0 * ms / steps.step_ms : 0.0);
      out += line;
    };
    for (const auto& [name, ms] : steps.phases) row(name, ms);
    row("(other)", steps.other_ms);
    if (steps.comm_ms > 0 || steps.exposed_comm_ms > 0) {
      out += "  communication (beside the phases above, overlapping them):\n";
      row("collectives", steps.comm_ms);
      row("exposed (waited for)", steps.exposed_comm_ms);
    }
    std::snprintf(line, sizeof line,
                  "  per step: %.1f kernel launches, %.2f host waits on the device (%.2f more "
                  "expected: metric reads, checkpoints), %.2f device allocations\n",
                  static_cast<double>(steps.launches) / n, static_cast<double>(steps.syncs) / n,
                  static_cast<double>(steps.expected_syncs) / n,
                  static_cast<double>(steps.device_allocs) / n);
    out += line;
  } else {
    std::snprintf(line, sizeof line, "profile: %.1f ms, no steps recorded\n", wall_ms);
    out += line;
  }
  std::snprintf(line, sizeof line, "  %-36s %-9s %8s %10s %10s %7s %9s%s\n", "name (by self time)",
                "category", "calls", "total ms", "self ms", "% wall", "GFLOP/s",
                peak_gflops > 0 ? "  % peak" : "");
  out += line;
  int shown = 0;
  for (const OpStat& s : stats) {
    if (shown++ >= top) break;
    std::string gflops = "-", peak;
    if (s.flops > 0 && s.total_ms > 0) {
      const double g = s.flops / (s.total_ms * 1e6);
      gflops = ::stoke::detail::str_cat(static_cast<int64_t>(g + 0.5));
      if (peak_gflops > 0) {
        std::snprintf(line, sizeof line, "  %6.1f", 100.0 * g / peak_gflops);
        peak = line;
      }
    }
    std::snprintf(line, sizeof line, "  %-36.36s %-9s %8lld %10.3f %10.3f %7.1f %9s%s\n",
                  s.name.c_str(), category_name(s.category), static_cast<long long>(s.calls),
                  s.total_ms, s.self_ms, wall_ms > 0 ? 100.0 * s.self_ms / wall_ms : 0.0,
                  gflops.c_str(), peak.c_str());
    out += line;
  }
  return out;
}

}  // namespace stoke::profiler
