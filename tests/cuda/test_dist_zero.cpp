// dist::ZeroOptimizer on cuda tensors in the emulator: ranks as threads on its two devices over
// emu's NCCL, stages 1, 2 and 3 against DDP with the plain optimizer (SGD-momentum and AdamW, N = 2
// and 3, native and ring collectives), with the GradScaler deciding on the device as stoke-train
// --device cuda --amp fp16 does, then a consolidated checkpoint resumed at another N.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>
#include <vector>

#include "dist/cuda/nccl.h"
#include "dist/ddp.h"
#include "dist/dist_util.h"
#include "dist/zero.h"
#include "stoke/stoke.h"

#include "dist_ranks.h"

using namespace stoke;
using namespace stoke::dist;
using stoke::dist::test::relative_diff;
using stoke::test::run_nccl;

namespace {

// 6 -> 11 -> 3: 113 parameters, which neither 2 nor 3 divides.
struct Mlp : nn::Module {
  std::shared_ptr<nn::Linear> a, b;
  explicit Mlp(uint64_t seed) {
    Generator gen(seed);
    a = register_module("a",
                        std::make_shared<nn::Linear>(6, 11, nn::LinearOptions{.generator = &gen}));
    b = register_module("b",
                        std::make_shared<nn::Linear>(11, 3, nn::LinearOptions{.generator = &gen}));
  }
  // Through operator(): the children's forward hooks gather stage 3's parameters.
  Tensor forward(const Tensor& x) override { return (*b)(relu((*a)(x))); }
};

constexpr int64_t kBatch = 12;

std::unique_ptr<nn::optim::Optimizer> make_opt(bool adamw, std::vector<nn::optim::ParamGroup> g) {
  if (!adamw)
    return std::make_unique<nn::optim::SGD>(
        std::move(g), nn::optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3});
  return std::make_unique<nn::optim::AdamW>(std::move(g), nn::optim::AdamWOptions{.lr = 3e-3});
}

struct Result {
  std::vector<Tensor> params;  // rank 0's, on the CPU
  nn::NamedTensors state;      // on the CPU
  double scale = 0;            // with the scaler: rank 0's, at the end
  int64_t skipped = 0;
};

// With the scaler: grows every 4 clean steps; at kInfSteps the last rank's gradient of b.bias[0]
// is made +inf before DDP or ZeRO sees it (a post-accumulate hook registered first). Under ZeRO it
// lands in rank 0's shard only (b.bias is packed first), so only the flag's MAX tells the others.
constexpr nn::amp::GradScalerOptions kScaler{.init_scale = 1024, .growth_interval = 4};
constexpr int kInfSteps[] = {2, 3};

// stage 0: DDP and the plain optimizer.
Result train(int ranks, int stage, bool adamw, AllreduceAlgorithm algo, int first, int steps,
             const Result* start = nullptr, bool scaler = false) {
  Result out;
  run_nccl(ranks, [&](NcclCommunicator& c) {
    const Device dev = Device::cuda(c.device());
    auto model = std::make_shared<Mlp>(1 + static_cast<uint64_t>(c.rank()));
    if (start) {
      NoGradGuard no_grad;
      const auto ps = model->parameters();
      for (size_t i = 0; i < ps.size(); ++i) Tensor(ps[i]).copy_(start->params[i]);
    }
    model->to(dev);
    int step = -1;
    if (scaler && c.rank() == ranks - 1)
      model->b->bias.register_post_accumulate_grad_hook([&step](const Tensor& p) {
        if (std::find(std::begin(kInfSteps), std::end(kInfSteps), step) == std::end(kInfSteps))
          return;
        NoGradGuard no_grad;
        fill_(p.grad().narrow(0, 0, 1), std::numeric_limits<double>::infinity());
      });
    std::optional<nn::amp::GradScaler> amp;
    if (scaler) {
      amp.emplace(kScaler);
      amp->found_inf_reducer = [&c](Tensor& f) { c.allreduce(f, ReduceOp::max); };
    }
    std::unique_ptr<DistributedDataParallel> ddp;
    std::unique_ptr<nn::optim::Optimizer> opt;
    ZeroOptimizer* zero = nullptr;
    if (stage == 0) {
      ddp = std::make_unique<DistributedDataParallel>(
          model, c,
          DdpOptions{.bucket_cap_mb = 0.0002, .first_bucket_cap_mb = 0.0002, .algorithm = algo});
      opt = make_opt(adamw, {{.params = model->parameters()}});
    } else {
      auto z = std::make_unique<ZeroOptimizer>(
          model->parameters(), c,
          [&](std::vector<nn::optim::ParamGroup> g) { return make_opt(adamw, std::move(g)); },
          ZeroOptions{
              .stage = stage, .bucket_cap_mb = 0.0002, .algorithm = algo, .module = model.get()});
      zero = z.get();
      opt = std::move(z);
    }
    if (start) opt->load_state_dict(start->state);
    const int64_t share = kBatch / ranks;
    for (int s = first; s < first + steps; ++s) {
      step = s;
      Generator gen(100 + static_cast<uint64_t>(s));
      const Tensor x = randn({kBatch, 6}, {}, &gen);
      const Tensor y = randint(0, 3, {kBatch}, {.dtype = DType::i64}, &gen);
      const Tensor xs = x.narrow(0, c.rank() * share, share).to(dev);
      const Tensor ys = y.narrow(0, c.rank() * share, share).to(dev);
      const Tensor loss = cross_entropy(ddp ? ddp->forward(xs) : model->forward(xs), ys);
      (amp ? amp->scale(loss) : loss).backward();
      if (amp) amp->unscale_(*opt);  // clip the true gradients (ZeRO's: its shards)
      if (zero)
        zero->clip_grad_norm_(1.0);
      else
        nn::optim::clip_grad_norm_(model->parameters(), 1.0);
      if (amp) {
        amp->step_on_device(*opt);  // decided on the device, as stoke-train does on cuda
        amp->update();
      } else {
        opt->step();
      }
      opt->zero_grad();
    }
    if (amp && c.rank() == 0) {
      out.scale = amp->get_scale();
      out.skipped = amp->skipped_steps();
    }
    nn::NamedTensors state = opt->state_dict();
    std::optional<ZeroOptimizer::FullParameters> whole;  // stage 3: the shards gathered
    if (zero) whole.emplace(zero->full_parameters());
    if (c.rank() == 0) {
      for (const Tensor& p : model->parameters())
        out.params.push_back(p.detach().to(Device::cpu()));
      for (const auto& [k, t] : state) out.state.emplace_back(k, t.to(Device::cpu()));
    }
  });
  return out;
}

}  // namespace

// One test case per optimizer: the emulator is slow, and each stays well inside ctest's limit at
// 8 steps; STOKE_TEST_ZERO_EMU_STEPS=50 runs the CPU test's 50 (a few minutes per case).
static int emu_steps() {
  const char* v = std::getenv("STOKE_TEST_ZERO_EMU_STEPS");
  return v && std::atoi(v) > 0 ? std::atoi(v) : 8;
}

// ZeRO and DDP sum the same ranks' gradients, in orders that may differ (the ring's chunks over
// ZeRO's padded buckets; another world size): a gradient differs by a rounding of its few-term sum
// (2^-23 relative at most), which updates of lr <= 0.05 carry into the parameters at far below
// their own rounding over these steps. What shows is the stored parameters' rounding, a few ulps
// (2^-23 of max|p| each) at most: 1e-6 is 8 (tests/dist/test_zero.cpp, where the CPU runs that sum
// alike are bit for bit).
constexpr double kFewUlps = 1e-6;

static void check_equal_to_ddp(bool adamw) {
  const int steps = emu_steps();
  for (int ranks : {2, 3}) {
    const AllreduceAlgorithm algo =
        ranks == 3 ? AllreduceAlgorithm::ring : AllreduceAlgorithm::native;
    const Result ddp = train(ranks, 0, adamw, algo, 0, steps);
    for (int stage : {1, 2, 3}) {
      INFO("N = " << ranks << ", stage " << stage << ", " << steps << " steps");
      const Result z = train(ranks, stage, adamw, algo, 0, steps);
      CHECK(relative_diff(z.params, ddp.params) <= kFewUlps);
      REQUIRE(z.state.size() == ddp.state.size());
    }
  }
}

// Not built under ThreadSanitizer, which runs the emulator at a tenth of the speed: the tsan
// stage checks ZeRO's threads (stage 2's reduce-scatters on the worker) in
// tests/dist/test_zero.cpp.
#if !defined(__SANITIZE_THREAD__)
TEST_CASE("dist: zero (emu): ZeRO-1, 2 and 3 on cuda tensors over NCCL equal DDP, SGD-momentum",
          "[zero][nccl_dist]") {
  check_equal_to_ddp(false);
}

TEST_CASE("dist: zero (emu): ZeRO-1, 2 and 3 on cuda tensors over NCCL equal DDP, AdamW",
          "[zero][nccl_dist]") {
  check_equal_to_ddp(true);
}

TEST_CASE(
    "dist: zero (emu): the GradScaler over ZeRO-1, 2 and 3 shards on cuda tensors skips on every "
    "rank and equals DDP with it (N = 2 and 3)",
    "[zero][nccl_dist][amp]") {
  const int steps = emu_steps();
  for (int ranks : {2, 3}) {
    const AllreduceAlgorithm algo =
        ranks == 3 ? AllreduceAlgorithm::ring : AllreduceAlgorithm::native;
    const Result ddp = train(ranks, 0, true, algo, 0, steps, nullptr, true);
    // Steps 2 and 3 skip (1024 -> 512 -> 256); from step 4 every 4 clean steps double it.
    REQUIRE(steps >= 4);
    REQUIRE(ddp.skipped == 2);
    REQUIRE(ddp.scale == 256.0 * std::pow(2.0, (steps - 4) / 4));
    for (int stage : {1, 2, 3}) {
      INFO("N = " << ranks << ", stage " << stage << ", " << steps << " steps");
      const Result z = train(ranks, stage, true, algo, 0, steps, nullptr, true);
      CHECK(z.skipped == ddp.skipped);
      CHECK(z.scale == ddp.scale);
      CHECK(relative_diff(z.params, ddp.params) <= kFewUlps);  // kFewUlps says why
    }
  }
}

TEST_CASE("dist: zero (emu): a checkpoint of N = 2 on cuda resumes at N = 3, across stages",
          "[zero][nccl_dist]") {
  const AllreduceAlgorithm native = AllreduceAlgorithm::native;
  const Result whole = train(2, 2, true, native, 0, 10);
  // Stage 2 to 1, and stage 3 to 3.
  for (int stage : {2, 3}) {
    INFO("stage " << stage << " at N = 2, resumed at N = 3");
    const Result half = train(2, stage, true, native, 0, 5);
    const Result resumed = train(3, stage == 2 ? 1 : 3, true, native, 5, 5, &half);
    CHECK(relative_diff(resumed.params, whole.params) <= kFewUlps);
  }
}

#endif  // !__SANITIZE_THREAD__
