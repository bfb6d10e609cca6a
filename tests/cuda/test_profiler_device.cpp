// stoke::profiler with StartOptions::device_times on cuda tensors (cuda/emu): every op on the
// device gets a range on the device's own track, timed by CUDA events, which nests, lies inside the
// profile, keeps the FLOPs the op said, and becomes its own `device` row in the summary; CPU ops
// and profiles without device_times record no device range.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "core/profiler.h"
#include "cuda/ops_cuda_util.h"
#include "stoke/stoke.h"

using namespace stoke;
namespace prof = stoke::profiler;

namespace {

struct Session {
  explicit Session(prof::StartOptions options) { prof::start(options); }
  ~Session() { prof::stop(); }
};

std::vector<prof::Event> device_events() {
  std::vector<prof::Event> out;
  for (const prof::Event& e : prof::events())
    if (e.category == prof::Category::device) out.push_back(e);
  return out;
}

}  // namespace

TEST_CASE("cuda: profiler device times: each op on a cuda tensor has a range on the device track",
          "[profiler][ops_cuda]") {
  const Tensor a = test::rand_cpu({64, 96}, 1).to(test::kCuda);
  const Tensor b = test::rand_cpu({96, 32}, 2).to(test::kCuda);
  {
    Session session({.device_times = true});
    Tensor c = matmul(a, b);
    Tensor d = relu(c);
    Tensor s = sum(d);
    (void)s.to(Device::cpu());  // waits for the device
    prof::stop();

    const std::vector<prof::Event> host = prof::events();
    const std::vector<prof::Event> device = device_events();
    REQUIRE(device.size() >= 3);
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (const prof::Event& e : host)
      if (e.category != prof::Category::device && e.end_ns >= 0)
        lo = std::min(lo, e.begin_ns), hi = std::max(hi, e.end_ns);
    bool saw_matmul = false;
    for (const prof::Event& e : device) {
      CHECK(e.tid == 1000);  // device 0's track
      CHECK(e.begin_ns >= 0);
      CHECK(e.end_ns >= e.begin_ns);
      CHECK(e.begin_ns >= lo - 1000000);  // within the profile (the reference mark waits ~µs)
      CHECK(e.end_ns <= hi + 1000000);
      if (std::string(e.name) == "matmul") {
        saw_matmul = true;
        CHECK(e.flops == 2.0 * 64 * 96 * 32);  // an integer count: exact
      }
    }
    CHECK(saw_matmul);
    // Ranges on one track nest: each begins after the one before it ends, or lies inside it.
    for (size_t i = 1; i < device.size(); ++i) CHECK(device[i].begin_ns >= device[i - 1].begin_ns);

    bool host_row = false, device_row = false;
    for (const prof::OpStat& s : prof::op_stats())
      if (s.name == "matmul") (s.category == prof::Category::device ? device_row : host_row) = true;
    CHECK(host_row);
    CHECK(device_row);
    const std::string trace = prof::chrome_trace_json();
    CHECK(trace.find("\"cuda:0 (device)\"") != std::string::npos);
    CHECK(trace.find("\"cat\":\"device\"") != std::string::npos);
  }
  SECTION("without device_times, or on CPU tensors, there is no device range") {
    {
      Session session({});
      (void)sum(relu(matmul(a, b))).to(Device::cpu());
    }
    CHECK(device_events().empty());
    const Tensor a_cpu = a.to(Device::cpu()), b_cpu = b.to(Device::cpu());
    {
      Session session({.device_times = true});
      (void)sum(relu(matmul(a_cpu, b_cpu)));
    }
    CHECK(device_events().empty());
  }
}
