// RMSprop and Adagrad with the learning rate in device memory (Optimizer::keep_lr_on_device), as
// stoke-train --cuda-graph runs them: the rate and each parameter's step count live on the
// device, so a captured step replays under a per-step schedule (and Adagrad's lr_decay) without
// new launch arguments.
// References: an f64 loop of torch.optim's formulas (independent of the ops), with a bound
// derived beside it; and, for the replays, the same optimizer stepped eagerly with its rate on
// the device (the same kernels in the same order: bit for bit by construction). Also their skip
// on the device (step_if_finite, the GradScaler's step), against the steps taken decided on the
// host.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/sync_debug.h"
#include "cuda/runtime/graph.h"
#include "nn/optim/optimizer.h"
#include "ops_cuda_util.h"

using namespace stoke;
using namespace stoke::test;

namespace {

constexpr int kSteps = 6, kWarmup = 2;
constexpr int64_t kN = 37;  // not a multiple of any vector width

struct Config {
  const char* name;
  bool adagrad;
  nn::optim::RMSpropOptions rms;
  nn::optim::AdagradOptions ada;
};

const std::vector<Config>& configs() {
  static const std::vector<Config> c = {
      {"RMSprop", false, {.lr = 0.01}, {}},
      {"RMSprop centered, momentum 0.9, weight decay 0.01",
       false,
       {.lr = 0.01, .weight_decay = 0.01, .momentum = 0.9, .centered = true},
       {}},
      {"Adagrad", true, {}, {.lr = 0.05}},
      {"Adagrad lr_decay 0.1, weight decay 0.01, accumulator 0.1",
       true,
       {},
       {.lr = 0.05, .lr_decay = 0.1, .weight_decay = 0.01, .initial_accumulator_value = 0.1}},
  };
  return c;
}

// The schedule: another rate every step, set between the steps (between the replays).
double rate_at(const Config& c, int k) {
  return (c.adagrad ? c.ada.lr : c.rms.lr) * (1.0 - 0.1 * k);
}

std::unique_ptr<nn::optim::Optimizer> make(const Config& c, const Tensor& p) {
  if (c.adagrad) return std::make_unique<nn::optim::Adagrad>(std::vector<Tensor>{p}, c.ada);
  return std::make_unique<nn::optim::RMSprop>(std::vector<Tensor>{p}, c.rms);
}

struct Reference {
  std::vector<double> p;
  std::vector<double> scale;  // per element: max_k |p_k| + sum_k |update_k|, for the bound
};

// torch.optim.RMSprop's and torch.optim.Adagrad's single-tensor formulas in f64, with the steps
// marked in `skipped` not taken (as the GradScaler skips them): the schedule still advances, and
// Adagrad's rate decays with the steps taken (torch's state["step"]).
Reference reference(const Config& c, const std::vector<float>& p0,
                    const std::vector<std::vector<float>>& grads,
                    const std::vector<bool>& skipped = std::vector<bool>(kSteps, false)) {
  const size_t n = p0.size();
  Reference r{std::vector<double>(p0.begin(), p0.end()), std::vector<double>(n, 0)};
  std::vector<double> v(n, c.adagrad ? c.ada.initial_accumulator_value : 0), ga(n, 0), buf(n, 0);
  std::vector<double> max_p(n), sum_update(n, 0);
  for (size_t i = 0; i < n; ++i) max_p[i] = std::abs(r.p[i]);
  int taken = 0;
  for (int k = 0; k < kSteps; ++k) {
    if (skipped[k]) continue;
    const double lr = rate_at(c, k);
    for (size_t i = 0; i < n; ++i) {
      double update;
      if (c.adagrad) {
        const double g = grads[k][i] + c.ada.weight_decay * r.p[i];
        const double clr = lr / (1 + taken * c.ada.lr_decay);
        v[i] += g * g;
        update = -clr * g / (std::sqrt(v[i]) + c.ada.eps);
      } else {
        const auto& o = c.rms;
        const double g = grads[k][i] + o.weight_decay * r.p[i];
        v[i] = o.alpha * v[i] + (1 - o.alpha) * g * g;
        double avg;
        if (o.centered) {
          ga[i] = o.alpha * ga[i] + (1 - o.alpha) * g;
          avg = std::sqrt(v[i] - ga[i] * ga[i]) + o.eps;
        } else {
          avg = std::sqrt(v[i]) + o.eps;
        }
        if (o.momentum > 0) {
          buf[i] = o.momentum * buf[i] + g / avg;
          update = -lr * buf[i];
        } else {
          update = -lr * g / avg;
        }
      }
      r.p[i] += update;
      max_p[i] = std::max(max_p[i], std::abs(r.p[i]));
      sum_update[i] += std::abs(update);
    }
    ++taken;
  }
  for (size_t i = 0; i < n; ++i) r.scale[i] = max_p[i] + sum_update[i];
  return r;
}

// p against the f64 loop. Each step rounds at most 16 times on the chain from the state to an
// element of p (weight decay, the squares, the running means, sqrt, eps, the rate's cast and
// product, the division, the add), each within u of a quantity bounded by |p| or |update|; errors
// carried in the state reach later updates, at most kSteps times: 16 kSteps u (max|p| +
// sum|update|). A skipped step adds no rounding (where() selects).
void check_close(const Reference& ref, const std::vector<float>& got, const char* what) {
  INFO(what);
  for (int64_t i = 0; i < kN; ++i) {
    INFO("element " << i);
    CHECK(std::abs(got[i] - ref.p[i]) <= 16 * kSteps * kU * ref.scale[i]);
  }
}

struct Problem {
  std::vector<float> p0;
  std::vector<std::vector<float>> grads;
  Problem() {
    p0 = rand_cpu({kN}, 11).to_vector<float>();
    for (int k = 0; k < kSteps; ++k) grads.push_back(rand_cpu({kN}, 100 + k).to_vector<float>());
  }
};

// A run's result: p's values and the step count its optimizer saves (reads, expected).
std::pair<std::vector<float>, int64_t> result(const nn::optim::Optimizer& opt, const Tensor& p) {
  const ExpectedSync read("the test reads the results");
  int64_t step = -1;
  for (const auto& [name, t] : opt.state_dict())
    if (name == "state.0.step") step = *t.data<int64_t>();
  return {p.detach().to(Device::cpu()).to_vector<float>(), step};
}

// Steps the optimizer kSteps times with its rate on the device: eagerly, or (graphed, cuda only)
// kWarmup eager steps, then one capture replayed for the rest. The gradient is one static tensor
// that each step's values are copied into, as a graph's input is. Returns p and the saved step.
std::pair<std::vector<float>, int64_t> run(const Config& c, const Problem& pr, Device device,
                                           bool graphed) {
  Tensor p = from_vector<float>(pr.p0, {kN}).to(device);
  p.set_requires_grad(true);
  Tensor grad = zeros({kN}, {.device = device});
  p.set_grad(grad);
  auto opt = make(c, p);
  opt->keep_lr_on_device();
  cuda::Graph graph;
  for (int k = 0; k < kSteps; ++k) {
    grad.copy_(from_vector<float>(pr.grads[k], {kN}).to(device));
    opt->set_lr(rate_at(c, k));
    if (!graphed || k < kWarmup) {
      opt->step();
      continue;
    }
    if (k == kWarmup) {
      const DeviceActivity a0 = device_activity();
      graph.capture([&] { opt->step(); });
      CHECK((device_activity() - a0).syncs == 0);  // no host read in the step
    }
    const DeviceActivity a0 = device_activity();
    graph.replay();
    CHECK((device_activity() - a0).launches == 1);
  }
  return result(*opt, p);
}

// The skip on the device (step_if_finite under a GradScaler): steps 1 (eager) and 4 (a replay)
// have an inf and a NaN in the gradient and found_inf set, as the scaler's unscale leaves them.
const std::vector<bool> kSkipped = {false, true, false, false, true, false};

enum class Skip {
  host,     // step() on the finite steps only: the host decides, as with a read of the flag
  device,   // step_if_finite every step, eagerly
  graphed,  // step_if_finite: kWarmup eager steps, then one capture replayed (cuda only)
};

// Steps the optimizer kSteps times with its rate on the device, skipping kSkipped's steps as
// `mode` says. The gradient and the flag are static tensors that each step's values are copied
// into, as a graph's inputs are. Returns p and the saved step.
std::pair<std::vector<float>, int64_t> run_skipping(const Config& c, const Problem& pr,
                                                    Device device, Skip mode) {
  Tensor p = from_vector<float>(pr.p0, {kN}).to(device);
  p.set_requires_grad(true);
  Tensor grad = zeros({kN}, {.device = device});
  Tensor found = zeros({1}, {.device = device});
  p.set_grad(grad);
  auto opt = make(c, p);
  opt->keep_lr_on_device();
  cuda::Graph graph;
  for (int k = 0; k < kSteps; ++k) {
    std::vector<float> g = pr.grads[k];
    if (kSkipped[k]) {
      g[3] = std::numeric_limits<float>::infinity();
      g[5] = std::numeric_limits<float>::quiet_NaN();
    }
    grad.copy_(from_vector<float>(g, {kN}).to(device));
    found.copy_(full({1}, kSkipped[k] ? 1.0 : 0.0).to(device));
    opt->set_lr(rate_at(c, k));
    if (mode == Skip::host) {
      if (!kSkipped[k]) opt->step();
      continue;
    }
    if (mode == Skip::device || k < kWarmup) {
      const DeviceActivity a0 = device_activity();
      opt->step_if_finite(found);
      CHECK((device_activity() - a0).syncs == 0);  // decided on the device: no host read
      continue;
    }
    if (k == kWarmup) {
      const DeviceActivity a0 = device_activity();
      graph.capture([&] { opt->step_if_finite(found); });
      CHECK((device_activity() - a0).syncs == 0);
    }
    const DeviceActivity a0 = device_activity();
    graph.replay();
    CHECK((device_activity() - a0).launches == 1);
  }
  return result(*opt, p);
}

}  // namespace

// Not under ThreadSanitizer, whose OS-thread emulator spends most of a minute creating threads
// for these ~900 tiny launches; what it would check (the elementwise kernels) runs under it in the
// ops tests, and this test's subject is host-side.
#if !defined(__SANITIZE_THREAD__)
TEST_CASE(
    "cuda: CUDA graph: RMSprop and Adagrad read the learning rate and step count from device "
    "memory: replays under a schedule equal eager steps bit for bit and follow an f64 loop",
    "[cuda_graph][optim]") {
  const Problem pr;
  for (const Config& c : configs()) {
    INFO(c.name);
    const Reference ref = reference(c, pr.p0, pr.grads);
    const auto [cpu, cpu_step] = run(c, pr, Device::cpu(), false);
    check_close(ref, cpu, "eager, cpu");
    CHECK(cpu_step == kSteps);
    const auto [eager, eager_step] = run(c, pr, kCuda, false);
    check_close(ref, eager, "eager, cuda");
    CHECK(eager_step == kSteps);
    const auto [graphed, graphed_step] = run(c, pr, kCuda, true);
    CHECK(graphed == eager);        // the same kernels, arguments and order: the same bits
    CHECK(graphed_step == kSteps);  // each replay counted on the device
  }
}
#endif

// Not under ThreadSanitizer, as above.
#if !defined(__SANITIZE_THREAD__)
TEST_CASE(
    "cuda: CUDA graph: RMSprop and Adagrad skip a step with an inf/NaN gradient on the device "
    "(step_if_finite, no host read): eager and replayed skips equal host-decided skips bit for "
    "bit and follow an f64 loop of the steps taken",
    "[cuda_graph][optim][amp]") {
  const Problem pr;
  int64_t taken = 0;
  for (const bool s : kSkipped) taken += s ? 0 : 1;
  for (const Config& c : configs()) {
    INFO(c.name);
    const Reference ref = reference(c, pr.p0, pr.grads, kSkipped);
    for (const Device device : {Device::cpu(), kCuda}) {
      INFO(device);
      const auto [host, host_step] = run_skipping(c, pr, device, Skip::host);
      const auto [skipped, skipped_step] = run_skipping(c, pr, device, Skip::device);
      check_close(ref, skipped, "skipped on the device, eagerly");
      // A taken step runs step()'s kernels in step()'s order, and a skipped one leaves the
      // saved bits (where() does not round): the same bits as deciding on the host.
      CHECK(skipped == host);
      CHECK(skipped_step == taken);  // the device counts advanced by 1 - found_inf
      CHECK(host_step == taken);
    }
    const auto [eager, eager_step] = run_skipping(c, pr, kCuda, Skip::device);
    const auto [graphed, graphed_step] = run_skipping(c, pr, kCuda, Skip::graphed);
    CHECK(graphed == eager);  // the same kernels, arguments and order
    CHECK(graphed_step == taken);
  }
}
#endif

// step_if_finite decides on the parameters' device: a flag elsewhere, or not one f32 element,
// is refused, naming what was wrong.
TEST_CASE("cuda: RMSprop and Adagrad refuse a found_inf flag they cannot skip with, saying why",
          "[optim][amp]") {
  Tensor p = zeros({4}, {.device = kCuda});
  p.set_requires_grad(true);
  p.set_grad(zeros({4}, {.device = kCuda}));
  nn::optim::RMSprop rms({p}, {});
  CHECK_THROWS_WITH(rms.step_if_finite(zeros({1})),
                    Catch::Contains("RMSprop::step_if_finite") &&
                        Catch::Contains("the skip is decided on the parameters' device"));
  nn::optim::Adagrad ada({p}, {});
  CHECK_THROWS_WITH(ada.step_if_finite(zeros({2}, {.device = kCuda})),
                    Catch::Contains("Adagrad::step_if_finite") &&
                        Catch::Contains("expected a one-element f32 found_inf tensor"));
}

// An optimizer that keeps the rate on the host refuses keep_lr_on_device, naming the ones that
// read it from the device.
TEST_CASE(
    "cuda: CUDA graph: an optimizer whose update takes the rate as a host value refuses "
    "to keep it on the device",
    "[cuda_graph][optim]") {
  struct HostRate : nn::optim::Optimizer {
    explicit HostRate(std::vector<Tensor> p)
        : Optimizer({{.params = std::move(p)}}, 0.1, 0, "HostRate") {}
    void step() override {}
    nn::NamedTensors state_dict() const override { return {}; }
    void load_state_dict(const nn::NamedTensors&) override {}
  };
  Tensor c = ones({2});
  c.set_requires_grad(true);
  HostRate opt({c});
  CHECK_THROWS_WITH(opt.keep_lr_on_device(),
                    Catch::Contains("takes its learning rate as a host value") &&
                        Catch::Contains("RMSprop and Adagrad read it from device memory"));
}
