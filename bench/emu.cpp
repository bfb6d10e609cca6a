// bench/emu: what cuda/emu's execution modes cost (issue 45): one launch of an elementwise kernel
// (a + b on 2^20 floats), one reduction with barriers and shuffles (sum of 2^20 floats), a LeNet-5
// training step at batch 32 and a ResNet-8 training step at batch 16 (28x28x1 inputs, SGD with
// momentum, all on the emulated "cuda" device), each in the OS-thread mode (one OS thread per CUDA
// thread, the emulator's only mode before fibers) and in fiber mode on one worker and on every
// core. A benchmark, not a test: it prints a table and one JSON line.
//
//   stoke-bench-emu [--modes os,fibers1,fibers] [--cases elementwise,reduction,lenet5,resnet8]
//                   [--steps 3] [--os-steps 1] [--quick]
//
// --steps: timed repetitions per case in fiber mode (the median is reported), after one untimed
// warm-up; --os-steps: the same in OS-thread mode, where a training step takes minutes. --quick:
// fiber mode on every core, one timed repetition (a smoke run).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "autograd/loss.h"
#include "bench/bench_util.h"
#include "cuda/emu/emu.h"
#include "nn/models/models.h"
#include "nn/optim/optimizer.h"
#include "stoke/stoke.h"

using namespace stoke;

namespace {

struct Args {
  std::vector<std::string> modes = {"os", "fibers1", "fibers"};
  std::vector<std::string> cases = {"elementwise", "reduction", "lenet5", "resnet8"};
  int steps = 3;
  int os_steps = 1;
};

struct Mode {
  std::string name;
  emu::ExecutionMode mode;
  unsigned workers;  // fiber mode's OS threads
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t comma = s.find(',', start);
    const size_t end = comma == std::string::npos ? s.size() : comma;
    if (end > start) out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

[[noreturn]] void usage_error(const std::string& what) {
  std::fprintf(stderr, "stoke-bench-emu: %s\n", what.c_str());
  std::exit(2);
}

int whole_number(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  const long n = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || n < 1 || n > 1000) {
    usage_error(flag + " expects a whole number from 1 to 1000, got '" + v + "'");
  }
  return static_cast<int>(n);
}

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto next = [&] {
      if (i + 1 >= argc) usage_error(arg + " needs a value");
      return std::string(argv[++i]);
    };
    if (arg == "--modes") {
      a.modes = split(next());
    } else if (arg == "--cases") {
      a.cases = split(next());
    } else if (arg == "--steps") {
      a.steps = whole_number(arg, next());
    } else if (arg == "--os-steps") {
      a.os_steps = whole_number(arg, next());
    } else if (arg == "--quick") {
      a.modes = {"fibers"};
      a.steps = 1;
    } else {
      usage_error("unknown flag '" + arg +
                  "' (expected --modes, --cases, --steps, --os-steps or --quick)");
    }
  }
  for (const auto& m : a.modes) {
    if (m != "os" && m != "fibers1" && m != "fibers") {
      usage_error("unknown mode '" + m + "' in --modes (expected os, fibers1 or fibers)");
    }
  }
  for (const auto& c : a.cases) {
    if (c != "elementwise" && c != "reduction" && c != "lenet5" && c != "resnet8") {
      usage_error("unknown case '" + c +
                  "' in --cases (expected elementwise, reduction, lenet5 or resnet8)");
    }
  }
  if (a.modes.empty() || a.cases.empty()) usage_error("--modes and --cases need an entry");
  return a;
}

// One case: what a repetition runs, built once per mode (the model and optimizer state persist
// across its repetitions, as in training).
struct Case {
  std::string name;
  std::string what;
  std::function<std::function<void()>()> make;
};

std::vector<Case> all_cases() {
  const Device cuda = Device::cuda(0);
  auto launch_case = [cuda](bool reduce) {
    return [cuda, reduce]() -> std::function<void()> {
      Generator g(1);
      auto a = std::make_shared<Tensor>(randn({1 << 20}, {}, &g).to(cuda));
      auto b = std::make_shared<Tensor>(randn({1 << 20}, {}, &g).to(cuda));
      if (reduce) return [a] { static_cast<void>(ops::sum(*a)); };
      return [a, b] { static_cast<void>(ops::add(*a, *b)); };
    };
  };
  auto step_case = [cuda](const std::string& model_name, int64_t batch) {
    return [cuda, model_name, batch]() -> std::function<void()> {
      Generator g(0);
      std::shared_ptr<nn::Module> model = nn::models::make_model(model_name, {.generator = &g});
      model->to(cuda);
      auto opt = std::make_shared<nn::optim::SGD>(
          model->parameters(), nn::optim::SGDOptions{.lr = 0.01, .momentum = 0.9});
      const Tensor x = randn({batch, 1, 28, 28}, {}, &g).to(cuda);
      const Tensor y = randint(0, 10, {batch}, {.dtype = DType::i64}, &g).to(cuda);
      return [model, opt, x, y] {
        Tensor loss = cross_entropy((*model)(x), y);
        opt->zero_grad();
        loss.backward();
        opt->step();
        static_cast<void>(loss.item());
      };
    };
  };
  return {
      {"elementwise", "a + b, 2^20 f32 (one launch)", launch_case(false)},
      {"reduction", "sum, 2^20 f32 (barriers, shuffles)", launch_case(true)},
      {"lenet5", "LeNet-5 SGD step, batch 32", step_case("lenet5", 32)},
      {"resnet8", "ResNet-8 SGD step, batch 16", step_case("resnet8", 16)},
  };
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse_args(argc, argv);
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  std::vector<Mode> modes;
  for (const auto& m : args.modes) {
    if (m == "os") modes.push_back({"os", emu::ExecutionMode::kOsThreads, 1});
    if (m == "fibers1") modes.push_back({"fibers", emu::ExecutionMode::kFibers, 1});
    if (m == "fibers") modes.push_back({"fibers", emu::ExecutionMode::kFibers, cores});
  }
  bench::Table table({"case", "mode", "workers", "ms", "launches", "switches", "vs os"});
  std::vector<std::string> records;
  for (const Case& c : all_cases()) {
    if (std::find(args.cases.begin(), args.cases.end(), c.name) == args.cases.end()) continue;
    double os_ms = std::nan("");
    for (const Mode& m : modes) {
      emu::set_execution_mode(m.mode);
      emu::set_fiber_workers(m.workers);
      const std::function<void()> run = c.make();
      const int reps = m.mode == emu::ExecutionMode::kOsThreads ? args.os_steps : args.steps;
      run();  // warm-up: first-touch allocations, the mode's threads and stacks
      const emu::Stats before = emu::stats();
      const double ms = bench::median_ms(run, reps, 0);
      const emu::Stats after = emu::stats();
      const double launches =
          static_cast<double>(after.launches - before.launches) / static_cast<double>(reps);
      const double switches = static_cast<double>(after.stack_switches - before.stack_switches) /
                              static_cast<double>(reps);
      if (m.mode == emu::ExecutionMode::kOsThreads) os_ms = ms;
      table.add({c.name, m.name, std::to_string(m.workers), bench::fmt(ms, 1),
                 bench::fmt(launches, 0), bench::fmt(switches, 0),
                 std::isnan(os_ms) || m.mode == emu::ExecutionMode::kOsThreads
                     ? "-"
                     : bench::fmt(os_ms / ms, 1) + "x"});
      records.push_back(bench::JsonObject()
                            .add("case", c.name)
                            .add("what", c.what)
                            .add("mode", m.name)
                            .add("workers", static_cast<int>(m.workers))
                            .add("ms", ms)
                            .add("reps", reps)
                            .add("launches", launches)
                            .add("stack_switches", switches)
                            .str());
      std::fprintf(stderr, "%s, %s on %u worker(s): %.1f ms\n", c.name.c_str(), m.name.c_str(),
                   m.workers, ms);
    }
  }
  std::cout << "cuda/emu: one launch, and one training step, per execution mode (median of the "
               "timed repetitions; 'workers' are fiber mode's OS threads, 'switches' its stack "
               "switches per repetition)\n";
  table.print(std::cout);
  std::cout << bench::JsonObject()
                   .add("bench", "emu")
                   .add("cores", static_cast<int>(cores))
                   .raw("results", bench::json_array(records))
                   .str()
            << std::endl;
  return 0;
}
