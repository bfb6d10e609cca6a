// Communication in the profiler: every collective is a range on the track of the thread that ran
// it (Category::collective) with its bus bytes, and the step breakdown sums the collectives' time
// and the part the steps waited for.
#include <catch2/catch.hpp>

#include <map>
#include <string>

#include "core/profiler.h"
#include "dist_util.h"

using namespace stoke;
using namespace stoke::dist;

TEST_CASE("dist profiler: each collective is one range with nccl-tests' bus bytes",
          "[dist][profiler]") {
  constexpr int kRanks = 3;
  constexpr int64_t kN = 999;  // f32: 3,996 bytes, 333 per rank
  profiler::start();
  run_ranks(kRanks, [&](Communicator& c) {
    Tensor t = ones({kN});
    c.allreduce(t);
    ring_allreduce(c, t);
    Tensor part = empty({kN / kRanks});
    c.reduce_scatter(t, part);
    c.allgather(part, t);
    c.broadcast(t, 0);
  });
  profiler::stop();
  std::map<std::string, std::pair<int, double>> seen;  // name -> (ranges, bus bytes of the last)
  for (const auto& e : profiler::events())
    if (e.category == profiler::Category::collective) {
      auto& s = seen[e.name];
      s.first += 1;
      s.second = e.bus_bytes;
    }
  // Closed forms (nccl-tests' PERFORMANCE.md): allreduce 2 (n - 1) / n of the buffer, the sharded
  // pair (n - 1) / n of the whole buffer, broadcast all of it; a double or two of rounding.
  const double bytes = 4.0 * kN;
  const std::map<std::string, double> want = {{"allreduce", 2 * bytes * 2 / 3},
                                              {"ring_allreduce", 2 * bytes * 2 / 3},
                                              {"reduce_scatter", bytes * 2 / 3},
                                              {"allgather", bytes * 2 / 3},
                                              {"broadcast", bytes}};
  REQUIRE(seen.size() == want.size());  // nothing nested inside a collective recorded again
  for (const auto& [name, b] : want) {
    INFO(name);
    CHECK(seen[name].first == kRanks);
    CHECK(seen[name].second == Approx(b).epsilon(1e-12));
  }
  CHECK_THAT(profiler::chrome_trace_json(),
             Catch::Contains("\"cat\":\"collective\"") && Catch::Contains("\"busbw_GBps\":"));
}

TEST_CASE("dist profiler: the step breakdown sums the collectives and the waits the steps made",
          "[dist][profiler]") {
  constexpr int kRanks = 2;
  profiler::start();
  run_ranks(kRanks, [&](Communicator& c) {
    for (int step = 0; step < 3; ++step) {
      const profiler::Range s("step", profiler::Category::step);
      Tensor t = ones({1 << 16});
      Work w = c.allreduce_async(t);  // on the communicator's worker thread
      w.wait();                       // this thread waits: exposed
    }
  });
  profiler::stop();
  const profiler::StepBreakdown b = profiler::step_breakdown();
  // The reference, from the events themselves: every collective ran inside its rank's step (begun
  // after the step opened, waited for before it closed), so the breakdown's collective time is
  // their summed durations; the steps waited exactly in their "comm wait" ranges.
  double collectives = 0, waits = 0;
  int n_collectives = 0;
  for (const auto& e : profiler::events()) {
    const double ms = static_cast<double>(e.end_ns - e.begin_ns) / 1e6;
    if (e.category == profiler::Category::collective) collectives += ms, ++n_collectives;
    if (e.category == profiler::Category::comm) waits += ms;
  }
  CHECK(n_collectives == 3 * kRanks);
  CHECK(b.steps == 3 * kRanks);
  CHECK(b.comm_ms == Approx(collectives).epsilon(1e-9));  // the same ns, summed in other orders
  CHECK(b.exposed_comm_ms == Approx(waits).epsilon(1e-9));
  CHECK(b.exposed_comm_ms <= b.step_ms);
  CHECK_THAT(profiler::summary(), Catch::Contains("collectives") && Catch::Contains("exposed"));
}
