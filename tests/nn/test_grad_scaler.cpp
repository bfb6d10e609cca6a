// nn::amp::GradScaler against a hand-computed sequence: an inf injected into one gradient at steps
// 2 and 7 skips those steps (parameters and optimizer state bit-identical to before), halves the
// scale, and after growth_interval (3) finite steps the scale doubles; the unscaled gradients and
// the steps taken equal an unscaled SGD's; a state_dict round trip resumes the same sequence; the
// ceiling, the collapse error naming the step, the call-order errors, the disabled scaler and the
// found-inf reducer hook (data parallel training's MAX allreduce).
//
// No PyTorch fixture: torch 1.13's GradScaler disables itself without CUDA and its
// _amp_update_scale_ has no CPU kernel, so the sequence is checked against its documented rule.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "autograd/elementwise.h"
#include "autograd/reduce.h"
#include "core/grad_mode.h"
#include "nn/amp/grad_scaler.h"
#include "nn/optim/optimizer.h"
#include "stoke/stoke.h"

using namespace stoke;
using nn::amp::GradScaler;

namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.numel() == b.numel() &&
         std::memcmp(a.data_ptr(), b.data_ptr(),
                     static_cast<size_t>(a.numel()) * a.element_size()) == 0;
}

// loss = sum(w * x): the gradient of w is x, scaled by the scaler's scale.
void backward(GradScaler& scaler, const Tensor& w, const Tensor& x, bool inject_inf) {
  scaler.scale(stoke::sum(stoke::mul(w, x))).backward();
  if (inject_inf) {
    NoGradGuard no_grad;
    Tensor g = w.grad();
    g.data<float>()[g.numel() - 1] = INFINITY;
  }
}

}  // namespace

TEST_CASE("GradScaler: skips inf steps, backs off, grows after growth_interval",
          "[nn][amp][grad_scaler]") {
  GradScaler scaler({.growth_interval = 3});
  CHECK(scaler.get_scale() == 65536.0);
  const Tensor w0 = from_vector<float>({0.5f, -1.0f, 2.0f, 0.25f}, {4});
  const Tensor x = from_vector<float>({1e-3f, -2e-4f, 3e-2f, 5.0f}, {4});
  Tensor w = w0.clone().set_requires_grad(true);
  Tensor ref = w0.clone().set_requires_grad(true);
  nn::optim::SGD opt({w}, {.lr = 0.1, .momentum = 0.9});
  nn::optim::SGD ref_opt({ref}, {.lr = 0.1, .momentum = 0.9});
  // The rule: inf -> scale * 0.5 and the tracker resets; 3 finite steps in a row -> scale * 2.
  const std::vector<double> want = {65536, 65536, 32768, 32768, 32768,
                                    65536, 65536, 32768, 32768, 32768};
  for (int s = 0; s < 10; ++s) {
    INFO("step " << s);
    const bool inf = s == 2 || s == 7;
    backward(scaler, w, x, inf);
    const Tensor w_before = w.detach().clone();
    const nn::NamedTensors state_before = opt.state_dict();
    std::vector<Tensor> buf_before;
    for (const auto& [k, t] : state_before) buf_before.push_back(t.clone());
    scaler.unscale_(opt);
    if (!inf) CHECK(same_bits(w.grad(), x));  // power-of-two scales unscale exactly
    const bool skipped = scaler.step(opt);
    CHECK(skipped == inf);
    if (inf) {
      CHECK(same_bits(w.detach(), w_before));
      const nn::NamedTensors after = opt.state_dict();
      REQUIRE(after.size() == buf_before.size());
      for (size_t i = 0; i < after.size(); ++i) CHECK(same_bits(after[i].second, buf_before[i]));
    } else {
      ref.set_grad(x);
      ref_opt.step();
    }
    scaler.update();
    CHECK(scaler.get_scale() == want[static_cast<size_t>(s)]);
    // Bit for bit: the same SGD step on the same values (the unscaled gradient is x exactly),
    // taken by both optimizers at the same steps.
    CHECK(same_bits(w.detach(), ref.detach()));
    opt.zero_grad();
  }
  CHECK(scaler.skipped_steps() == 2);
  CHECK(scaler.growth_tracker() == 2);
}

TEST_CASE("GradScaler: a state_dict round trip resumes the same scale sequence",
          "[nn][amp][grad_scaler]") {
  const Tensor x = from_vector<float>({1.0f, 2.0f}, {2});
  auto run = [&](GradScaler& scaler, int from, int to, std::vector<double>& scales) {
    Tensor w = zeros({2}).set_requires_grad(true);
    nn::optim::SGD opt({w}, {.lr = 0.1});
    for (int s = from; s < to; ++s) {
      backward(scaler, w, x, s == 1 || s == 9);
      scaler.step(opt);
      scaler.update();
      scales.push_back(scaler.get_scale());
      opt.zero_grad();
    }
  };
  GradScaler a({.init_scale = 1024, .growth_interval = 2});
  std::vector<double> straight, resumed;
  run(a, 0, 12, straight);
  GradScaler b({.init_scale = 1024, .growth_interval = 2});
  run(b, 0, 6, resumed);
  const nn::NamedTensors state = b.state_dict();
  GradScaler c;  // defaults: the state brings the scale, the tracker and the factors
  c.load_state_dict(state);
  CHECK(c.get_scale() == b.get_scale());
  CHECK(c.growth_tracker() == b.growth_tracker());
  CHECK(c.options().growth_interval == 2);
  run(c, 6, 12, resumed);
  CHECK(resumed == straight);
  CHECK(c.skipped_steps() == a.skipped_steps());
  // The sequence is not constant: it both backed off and grew.
  CHECK(*std::min_element(straight.begin(), straight.end()) < 1024);
  CHECK(*std::max_element(straight.begin(), straight.end()) > 1024);
  nn::NamedTensors bad = state;
  bad.emplace_back("extra", zeros({}));
  CHECK_THROWS_WITH(c.load_state_dict(bad), Catch::Contains("unexpected key 'extra'"));
  CHECK_THROWS_WITH(c.load_state_dict({state[1]}), Catch::Contains("missing 'scale'"));
}

TEST_CASE("GradScaler: the scale stops at max_scale and a collapse names the step",
          "[nn][amp][grad_scaler]") {
  const Tensor x = from_vector<float>({1.0f}, {1});
  Tensor w = zeros({1}).set_requires_grad(true);
  nn::optim::SGD opt({w}, {.lr = 0.1});
  {
    GradScaler scaler({.init_scale = 4, .growth_interval = 1, .max_scale = 16});
    for (double want : {8.0, 16.0, 16.0}) {
      backward(scaler, w, x, false);
      scaler.step(opt);
      scaler.update();
      CHECK(scaler.get_scale() == want);
      opt.zero_grad();
    }
  }
  GradScaler scaler({.init_scale = 4, .min_scale = 1});
  for (int s = 1; s <= 2; ++s) {
    backward(scaler, w, x, true);
    CHECK(scaler.step(opt));
    scaler.update();
    opt.zero_grad();
  }
  CHECK(scaler.get_scale() == 1);
  backward(scaler, w, x, true);
  CHECK(scaler.step(opt));
  CHECK_THROWS_WITH(scaler.update(), Catch::Contains("the loss scale collapsed at step 3") &&
                                         Catch::Contains("below min_scale 1"));
}

TEST_CASE("GradScaler: call order, disabled scaler, the found-inf reducer",
          "[nn][amp][grad_scaler]") {
  const Tensor x = from_vector<float>({1.0f, 3.0f}, {2});
  Tensor w = zeros({2}).set_requires_grad(true);
  nn::optim::SGD opt({w}, {.lr = 1});
  GradScaler scaler;
  CHECK_THROWS_WITH(scaler.update(), Catch::Contains("call step(optimizer) before update()"));
  backward(scaler, w, x, false);
  scaler.unscale_(opt);
  CHECK_THROWS_WITH(scaler.unscale_(opt),
                    Catch::Contains("unscale_() has already been called on this optimizer"));
  CHECK_FALSE(scaler.step(opt));
  CHECK_THROWS_WITH(scaler.step(opt), Catch::Contains("step() has already been called"));
  scaler.update();
  opt.zero_grad();
  CHECK_THROWS_WITH(GradScaler({.backoff_factor = 1}),
                    Catch::Contains("backoff_factor must be in (0, 1)"));

  // The reducer sees every flag before it is read: another rank's inf skips this rank's step.
  int calls = 0;
  scaler.found_inf_reducer = [&](Tensor& f) {
    ++calls;
    CHECK(f.item() == 0);
    fill_(f, 1.0);  // as a MAX allreduce with a rank that saw an inf
  };
  const Tensor before = w.detach().clone();
  backward(scaler, w, x, false);
  CHECK(scaler.step(opt));
  CHECK(calls == 1);
  CHECK(same_bits(w.detach(), before));
  scaler.update();
  CHECK(scaler.get_scale() == 32768);
  opt.zero_grad();

  // Disabled (bf16 / f32 training): the loss is unscaled and every step is taken.
  GradScaler off({.enabled = false});
  const Tensor loss = stoke::sum(stoke::mul(w, x));
  CHECK(same_bits(off.scale(loss), loss));
  loss.backward();
  CHECK_FALSE(off.step(opt));
  off.update();
  CHECK_FALSE(same_bits(w.detach(), before));
}

TEST_CASE("GradScaler: f16 gradients that overflow back the scale off until they fit",
          "[nn][amp][grad_scaler]") {
  // f16 parameters and a loss whose gradient is 2: scaled by 2^16 it is 131072, past f16's 65504,
  // so the backward (in f16) gives inf; scaled by 2^15, 65536 still rounds to inf; by 2^14 it fits
  // (32768). Two skipped steps, then the step of an unscaled SGD.
  const Tensor x = full({3}, 2.0, {.dtype = DType::f16});
  Tensor w = zeros({3}, {.dtype = DType::f16}).set_requires_grad(true);
  Tensor ref = zeros({3}, {.dtype = DType::f16}).set_requires_grad(true);
  nn::optim::SGD opt({w}, {.lr = 0.5});
  nn::optim::SGD ref_opt({ref}, {.lr = 0.5});
  GradScaler scaler;
  const std::vector<double> want_scale = {32768, 16384, 16384};
  for (int s = 0; s < 3; ++s) {
    INFO("step " << s);
    // The gradient reaches w through the f16 cast's backward, where 2 * scale may overflow.
    scaler.scale(stoke::sum(stoke::mul(w.to(DType::f32), x.to(DType::f32))))
        .to(DType::f16)
        .backward();
    REQUIRE(w.grad().dtype() == DType::f16);
    const bool skipped = scaler.step(opt);
    CHECK(skipped == (s < 2));
    scaler.update();
    CHECK(scaler.get_scale() == want_scale[static_cast<size_t>(s)]);
    opt.zero_grad();
  }
  ref.set_grad(x);
  ref_opt.step();
  // 2 * 16384 = 32768 fits f16 and unscales to 2 exactly: the same step on the same values, and
  // 0 - 0.5 * 2 = -1 is exact.
  CHECK(same_bits(w.detach(), ref.detach()));
  CHECK(w.detach().to(DType::f32).to_vector<float>()[0] == -1.0f);
}

// step_on_device (the skip decided where the gradients are, no read) against step() (which reads
// the flag): the same steps skipped, the same scale sequence and the same parameters bit for bit,
// for SGD with momentum and dampening and for AdamW, with the very first step skipped (the
// optimizers' step counts then say that the first update is still to come) and a later one.
// The cuda version of this test (tests/cuda/test_grad_scaler_cuda.cpp) runs it on the emulator.
TEST_CASE("GradScaler: step_on_device skips the same steps as step(), bit for bit",
          "[nn][amp][grad_scaler]") {
  const Tensor x = from_vector<float>({1e-3f, -2e-4f, 3e-2f, 5.0f}, {4});
  for (const char* kind : {"sgd", "adamw"}) {
    INFO(kind);
    struct Run {
      std::vector<std::vector<float>> w;
      std::vector<double> scale;
      int64_t skipped = 0;
    };
    auto run = [&](bool on_device) {
      GradScaler scaler({.init_scale = 256, .growth_interval = 2});
      Tensor w = from_vector<float>({0.5f, -1.0f, 2.0f, 0.25f}, {4}).set_requires_grad(true);
      std::unique_ptr<nn::optim::Optimizer> opt;
      if (std::string(kind) == "sgd")
        opt = std::make_unique<nn::optim::SGD>(
            std::vector<Tensor>{w},
            nn::optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .dampening = 0.25});
      else
        opt = std::make_unique<nn::optim::AdamW>(std::vector<Tensor>{w},
                                                 nn::optim::AdamWOptions{.lr = 0.01});
      Run r;
      for (int s = 0; s < 8; ++s) {
        backward(scaler, w, x, s == 0 || s == 4);
        if (on_device)
          scaler.step_on_device(*opt);
        else
          scaler.step(*opt);
        scaler.update();
        r.w.push_back(w.detach().to_vector<float>());
        r.scale.push_back(scaler.get_scale());
        opt->zero_grad();
      }
      r.skipped = scaler.skipped_steps();
      return r;
    };
    const Run host = run(false), device = run(true);
    CHECK(host.skipped == 2);
    CHECK(device.skipped == 2);
    CHECK(device.scale == host.scale);
    for (size_t s = 0; s < host.w.size(); ++s) {
      INFO("step " << s);
      CHECK(device.w[s] == host.w[s]);
    }
    CHECK(host.w[0] == std::vector<float>({0.5f, -1.0f, 2.0f, 0.25f}));  // step 0 skipped
  }
}
