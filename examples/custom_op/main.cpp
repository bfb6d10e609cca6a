// examples/custom_op: a differentiable op of your own, checked against finite differences and
// seen in the profiler.
//
//   build/examples/stoke-example-custom-op [--trace FILE]
//
// The op is swish(x) = x * sigmoid(x) (SiLU) as one autograd node with a hand-written backward,
// d swish / dx = s + x s (1 - s) with s = sigmoid(x), instead of the two nodes that mul(x,
// sigmoid(x)) would record. The recipe is autograd/function.h's: compute the output with ops (no
// graph), then record() a node whose backward returns one gradient per input.
#include <cstdio>
#include <string>

#include "core/profiler.h"
#include "stoke/stoke.h"

using namespace stoke;

Tensor swish(const Tensor& x) {
  // A range in the profiler's trace and summary, under the op's own name.
  profiler::Range range("swish");
  Tensor s = ops::sigmoid(x);
  Tensor y = ops::mul(x, s);
  if (autograd::any_requires_grad({x})) {
    // Capture detached tensors: the graph must not hold itself.
    autograd::record(
        "SwishBackward", {x}, {y},
        [x = x.detach(), s = s.detach()](const autograd::GradList& g, const autograd::NeedList&) {
          Tensor one_minus_s = ops::add(ops::mul(s, -1.0), 1.0);
          Tensor dy_dx = ops::add(s, ops::mul(ops::mul(x, s), one_minus_s));
          return autograd::GradList{ops::mul(g[0], dy_dx)};
        });
  }
  return y;
}

int main(int argc, char** argv) {
  std::string trace = "custom_op_trace.json";
  if (argc == 3 && std::string(argv[1]) == "--trace")
    trace = argv[2];
  else if (argc != 1)
    return std::fprintf(stderr, "usage: %s [--trace FILE]\n", argv[0]), 2;
  try {
    manual_seed(0);
    // 1. The backward against central finite differences, in f64 (gradcheck's requirement:
    // f32's rounding would swamp the differences). Its default tolerances are torch's.
    Tensor x = randn({4, 5}, {.dtype = DType::f64, .requires_grad = true});
    auto check =
        autograd::gradcheck([](const std::vector<Tensor>& in) { return swish(in[0]); }, {x});
    std::printf("gradcheck: %s, %lld elements, worst %s\n", check.ok ? "ok" : "FAILED",
                static_cast<long long>(check.checked), check.worst.c_str());
    if (!check.ok) return 1;

    // 2. The op in a model: a few SGD steps of a two-layer network that uses it, profiled.
    nn::Linear fc1(8, 32), fc2(32, 1);
    std::vector<Tensor> params = fc1.parameters();
    for (const Tensor& p : fc2.parameters()) params.push_back(p);
    nn::optim::SGD opt(params, {.lr = 0.1});
    Tensor inputs = randn({64, 8});
    Tensor targets = sum(mul(inputs, inputs), {1}, true);  // learn |x|^2
    profiler::start();
    double first = 0, last = 0;
    for (int step = 0; step < 20; ++step) {
      Tensor loss = mse_loss(fc2.forward(swish(fc1.forward(inputs))), targets);
      opt.zero_grad();
      loss.backward();
      opt.step();
      (step == 0 ? first : last) = loss.item();
    }
    profiler::stop();
    profiler::write_chrome_trace(trace);
    std::printf("mse loss %.4f -> %.4f over 20 steps; trace in %s (chrome://tracing)\n", first,
                last, trace.c_str());
    std::printf("%s", profiler::summary().c_str());
    return last < first ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "custom_op: %s\n", e.what());
    return 1;
  }
}
