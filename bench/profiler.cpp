// What stoke::profiler costs on a training step (issue 13's budget: off <= 1 %, on <= 5 % of a
// ResNet-8 step). Runs the same SGD steps with the profiler off and on, alternating rounds so that
// drift hits both; "off" cannot be compared with a build without the ranges (they are always
// compiled in), so its cost is estimated: the ranges one step opens (counted in the "on" rounds)
// times the measured cost of an off range (a relaxed load and a branch).
//
//   stoke-bench-profiler [--model resnet8] [--batch 64] [--steps 20] [--rounds 3] [--quick]
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "core/profiler.h"
#include "stoke/stoke.h"

using namespace stoke;

namespace {

struct Args {
  std::string model = "resnet8";
  int64_t batch = 64, steps = 20, rounds = 3;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Nanoseconds per Range constructed and destroyed while the profiler is off.
double off_range_ns() {
  const int64_t n = 20'000'000;
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < n; ++i) {
    const profiler::Range r("off");
    asm volatile("" ::: "memory");  // keep the loop and the range's load
  }
  return seconds_since(t0) * 1e9 / static_cast<double>(n);
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "stoke-bench-profiler: %s needs a value\n", arg.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--model") {
      a.model = next();
    } else if (arg == "--batch") {
      a.batch = std::stoll(next());
    } else if (arg == "--steps") {
      a.steps = std::stoll(next());
    } else if (arg == "--rounds") {
      a.rounds = std::stoll(next());
    } else if (arg == "--quick") {
      a.model = "lenet5";
      a.batch = 16;
      a.steps = 2;
      a.rounds = 1;
    } else {
      std::fprintf(stderr, "stoke-bench-profiler: unknown flag %s\n", arg.c_str());
      return 2;
    }
  }
  Generator g(0);
  auto model = nn::models::make_model(a.model, {.generator = &g});
  nn::optim::SGD opt(model->parameters(), {.lr = 0.01, .momentum = 0.9});
  const Tensor x = randn({a.batch, 1, 28, 28}, {}, &g);
  const Tensor y = randint(0, 10, {a.batch}, {.dtype = DType::i64}, &g);
  auto steps_ms = [&](int64_t n) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < n; ++i) {
      const profiler::Range step("step", profiler::Category::step);
      Tensor loss = cross_entropy((*model)(x), y);
      loss.backward();
      opt.step();
      opt.zero_grad();
      (void)loss.item();
    }
    return seconds_since(t0) * 1e3 / static_cast<double>(n);
  };
  steps_ms(2);  // warm-up: caches, the allocator, the thread pool
  std::vector<double> off, on;
  double ranges_per_step = 0;
  for (int64_t r = 0; r < a.rounds; ++r) {
    const bool on_first = r % 2 == 1;
    for (int k = 0; k < 2; ++k) {
      if ((k == 0) == on_first) {
        profiler::start();
        on.push_back(steps_ms(a.steps));
        profiler::stop();
        ranges_per_step =
            static_cast<double>(profiler::events().size()) / static_cast<double>(a.steps);
      } else {
        off.push_back(steps_ms(a.steps));
      }
    }
  }
  const double off_ms = bench::median(off), on_ms = bench::median(on);
  const double ns = off_range_ns();
  const double on_pct = 100.0 * (on_ms - off_ms) / off_ms;
  const double off_pct = 100.0 * ranges_per_step * ns / (off_ms * 1e6);
  std::printf("profiler overhead: %s, batch %lld, %lld steps x %lld rounds (median), %d threads\n",
              a.model.c_str(), static_cast<long long>(a.batch), static_cast<long long>(a.steps),
              static_cast<long long>(a.rounds), num_threads());
  bench::Table t({"model", "state", "ms/step", "overhead %", "how"});
  t.add({a.model, "off", bench::fmt(off_ms, 2), bench::fmt(off_pct, 4),
         "estimated: " + bench::fmt(ranges_per_step, 0) + " ranges/step x " + bench::fmt(ns, 2) +
             " ns per off range"});
  t.add({a.model, "on", bench::fmt(on_ms, 2), bench::fmt(on_pct, 2),
         "measured: on vs off, same steps, alternating rounds"});
  t.print(std::cout);
  bench::JsonObject j;
  j.add("bench", "profiler")
      .add("model", a.model)
      .add("batch", static_cast<double>(a.batch))
      .add("threads", static_cast<double>(num_threads()))
      .add("off_ms_per_step", off_ms)
      .add("on_ms_per_step", on_ms)
      .add("on_overhead_pct", on_pct)
      .add("off_overhead_pct_estimated", off_pct)
      .add("ranges_per_step", ranges_per_step)
      .add("off_range_ns", ns);
  std::cout << j.str() << '\n';
  return 0;
}
