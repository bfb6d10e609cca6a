// stoke::profiler: ranges nest and balance per thread in a Chrome trace that parses as JSON,
// every op and autograd node records itself, self time and the step breakdown add up, and nothing
// is recorded while it is off.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "core/parallel.h"
#include "core/profiler.h"
#include "stoke/stoke.h"

using namespace stoke;
namespace prof = stoke::profiler;

namespace {

void sleep_ms(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

const prof::Event* find_event(const std::vector<prof::Event>& events, const std::string& name) {
  for (const prof::Event& e : events)
    if (name == e.name) return &e;
  return nullptr;
}

const prof::OpStat* find_stat(const std::vector<prof::OpStat>& stats, const std::string& name) {
  for (const prof::OpStat& s : stats)
    if (s.name == name) return &s;
  return nullptr;
}

// Stops the profiler however a test ends, so that no other test records.
struct Session {
  Session() { prof::start(); }
  ~Session() { prof::stop(); }
};

}  // namespace

TEST_CASE("profiler: nothing is recorded while it is off", "[profiler]") {
  prof::start();
  prof::stop();
  REQUIRE_FALSE(prof::enabled());
  {
    const prof::Range r("off range");
    (void)matmul(ones({4, 4}), ones({4, 4}));
  }
  CHECK(prof::events().empty());
}

TEST_CASE("profiler: ranges nest, and a Chrome trace balances B/E per thread", "[profiler]") {
  {
    Session s;
    prof::set_thread_name("training");
    {
      const prof::Range outer("outer", prof::Category::user);
      {
        const prof::Range inner("inner \"quoted\"", prof::Category::user);
        sleep_ms(2);
      }
      (void)matmul(ones({8, 16}), ones({16, 4}));
    }
    std::thread worker([] {
      prof::set_thread_name("helper thread");
      const prof::Range a("on another thread", prof::Category::data);
      const prof::Range b("nested there", prof::Category::data);
    });
    worker.join();
  }
  const auto events = prof::events();
  const prof::Event* outer = find_event(events, "outer");
  const prof::Event* inner = find_event(events, "inner \"quoted\"");
  const prof::Event* mm = find_event(events, "matmul");
  REQUIRE(outer);
  REQUIRE(inner);
  REQUIRE(mm);
  CHECK(inner->depth == outer->depth + 1);
  CHECK(inner->begin_ns >= outer->begin_ns);
  CHECK(inner->end_ns <= outer->end_ns);
  CHECK(mm->category == prof::Category::op);
  CHECK(mm->flops == 2.0 * 8 * 16 * 4);  // said by ops::matmul's entry point
  CHECK(mm->tid == outer->tid);
  const prof::Event* other = find_event(events, "on another thread");
  REQUIRE(other);
  CHECK(other->tid != outer->tid);

  const nlohmann::json trace = nlohmann::json::parse(prof::chrome_trace_json());
  REQUIRE(trace.contains("traceEvents"));
  std::map<int, std::vector<std::string>> open;  // per tid, the names begun and not ended
  std::map<int, double> last_ts;
  std::map<int, std::string> names;
  int begins = 0;
  for (const auto& e : trace["traceEvents"]) {
    const std::string ph = e["ph"];
    const int tid = e["tid"];
    if (ph == "M") {
      names[tid] = e["args"]["name"];
      continue;
    }
    const double ts = e["ts"];
    CHECK(ts >= last_ts[tid]);  // each thread's events in time order
    last_ts[tid] = ts;
    if (ph == "B") {
      open[tid].push_back(e["name"]);
      ++begins;
    } else {
      REQUIRE(ph == "E");
      REQUIRE_FALSE(open[tid].empty());  // an E closes the innermost open B
      open[tid].pop_back();
    }
  }
  for (const auto& [tid, stack] : open) CHECK(stack.empty());
  CHECK(begins == static_cast<int>(events.size()));
  CHECK(names[outer->tid] == "training");
  CHECK(names[other->tid] == "helper thread");
}

TEST_CASE("profiler: self time leaves out the nested ranges", "[profiler]") {
  {
    Session s;
    const prof::Range outer("self outer");
    sleep_ms(20);
    const prof::Range inner("self inner");
    sleep_ms(20);
  }
  const auto stats = prof::op_stats();
  const prof::OpStat* outer = find_stat(stats, "self outer");
  const prof::OpStat* inner = find_stat(stats, "self inner");
  REQUIRE(outer);
  REQUIRE(inner);
  CHECK(outer->calls == 1);
  CHECK(outer->total_ms >= 40);
  // Exact: self time is the range's time minus its one child's, the subtraction done here.
  CHECK(outer->self_ms == outer->total_ms - inner->total_ms);
  CHECK(inner->self_ms == inner->total_ms);
}

TEST_CASE("profiler: autograd nodes, the thread pool and the step breakdown", "[profiler]") {
  const int threads = num_threads();
  set_num_threads(2);
  {
    Session s;
    Tensor x = randn({256, 256}).set_requires_grad(true);
    for (int step = 0; step < 3; ++step) {
      const prof::Range st("step", prof::Category::step);
      Tensor loss;
      {
        const prof::Range ph("forward", prof::Category::phase);
        loss = sum(x * x);
        sleep_ms(3);
      }
      {
        const prof::Range ph("backward", prof::Category::phase);
        loss.backward();
      }
      parallel_for(0, 2, 1, [](int64_t, int64_t) { sleep_ms(1); });
    }
  }
  set_num_threads(threads);
  const auto events = prof::events();
  bool node = false;
  for (const prof::Event& e : events) node = node || e.category == prof::Category::backward;
  CHECK(node);
  bool pool_track = false;
  for (const std::string& n : prof::thread_names()) pool_track = pool_track || n == "pool worker 1";
  CHECK(pool_track);
  const prof::StepBreakdown b = prof::step_breakdown();
  CHECK(b.steps == 3);
  REQUIRE(b.phases.size() == 2);
  CHECK(b.phases[0].first == "forward");
  CHECK(b.phases[1].first == "backward");
  const double sum = b.phases[0].second + b.phases[1].second + b.other_ms;
  // other = step - (phases) rounds once, adding it back once more: within 2 u of step_ms.
  CHECK(sum == Approx(b.step_ms).epsilon(2 * 0x1p-53));
  CHECK(b.phases[0].second >= 9);
  const std::string text = prof::summary();
  CHECK_THAT(text, Catch::Contains("3 steps") && Catch::Contains("forward") &&
                       Catch::Contains("(other)") && Catch::Contains("binary mul"));
}

TEST_CASE("profiler: a dtype cast is an op range, in forward and in ToCopyBackward", "[profiler]") {
  {
    Session s;
    Tensor x = randn({64, 64}).set_requires_grad(true);
    CHECK(x.to(DType::f32).data_ptr() == x.data_ptr());  // no cast, no range
    sum(x.to(DType::bf16).to(DType::f32)).backward();
  }
  int casts = 0, in_node = 0;
  const auto events = prof::events();
  for (const prof::Event& e : events) {
    if (std::strcmp(e.name, "to_copy") != 0) continue;
    CHECK(e.category == prof::Category::op);
    ++casts;
    for (const prof::Event& p : events)
      if (p.tid == e.tid && std::strcmp(p.name, "ToCopyBackward") == 0 &&
          p.begin_ns <= e.begin_ns && e.end_ns <= p.end_ns)
        ++in_node;
  }
  // Forward: f32 -> bf16 -> f32. Backward: each ToCopyBackward casts the gradient back.
  CHECK(casts == 4);
  CHECK(in_node == 2);
}

TEST_CASE("profiler: a trace that cannot be written names the path", "[profiler]") {
  CHECK_THROWS_WITH(prof::write_chrome_trace("/nonexistent-dir/trace.json"),
                    Catch::Contains("/nonexistent-dir/trace.json"));
}
