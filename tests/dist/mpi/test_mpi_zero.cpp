// ZeRO over the MPI engine (np 2, 3 and 4 in ctest): stages 1, 2 and 3 against DDP with the plain
// optimizer on the same data, every rank checking its own replica. tests/dist/test_zero.cpp covers
// the same over in-process ranks in depth; this is the engine stoke-train runs under mpirun.
#include <catch2/catch.hpp>

#include <memory>
#include <optional>
#include <vector>

#include "dist/ddp.h"
#include "dist/zero.h"
#include "mpi_util.h"
#include "stoke/stoke.h"

using namespace stoke;
using namespace stoke::dist;
using namespace stoke::dist::test;

namespace {

constexpr int64_t kBatch = 24;  // divides over 2, 3 and 4 ranks

// 9 -> 17 -> 5, biases: 260 parameters, which 3 and 4 do not divide into buckets.
struct Net : nn::Module {
  std::shared_ptr<nn::Linear> a, b;
  Net() {
    Generator gen(5);
    a = register_module("a",
                        std::make_shared<nn::Linear>(9, 17, nn::LinearOptions{.generator = &gen}));
    b = register_module("b",
                        std::make_shared<nn::Linear>(17, 5, nn::LinearOptions{.generator = &gen}));
  }
  Tensor forward(const Tensor& x) override { return (*b)(relu((*a)(x))); }
};

// The optimizers of tests/dist/test_zero.cpp with their options (learning rates, momentum and
// decay are training settings, not tolerances).
std::unique_ptr<nn::optim::Optimizer> make_optimizer(bool adamw,
                                                     std::vector<nn::optim::ParamGroup> g) {
  if (!adamw)
    return std::make_unique<nn::optim::SGD>(
        std::move(g), nn::optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3});
  return std::make_unique<nn::optim::AdamW>(std::move(g), nn::optim::AdamWOptions{.lr = 3e-3});
}

// This rank's parameters after `steps` steps; stage 0 is DDP.
std::vector<Tensor> train(int stage, bool adamw, int steps) {
  MpiCommunicator& c = world();
  auto model = std::make_shared<Net>();
  std::unique_ptr<DistributedDataParallel> ddp;
  std::unique_ptr<nn::optim::Optimizer> opt;
  ZeroOptimizer* zero = nullptr;
  if (stage == 0) {
    ddp = std::make_unique<DistributedDataParallel>(
        model, c, DdpOptions{.bucket_cap_mb = 0.0005, .first_bucket_cap_mb = 0.0005});
    opt = make_optimizer(adamw, {{.params = model->parameters()}});
  } else {
    auto z = std::make_unique<ZeroOptimizer>(
        model->parameters(), c,
        [&](std::vector<nn::optim::ParamGroup> g) { return make_optimizer(adamw, std::move(g)); },
        ZeroOptions{.stage = stage, .bucket_cap_mb = 0.0005, .module = model.get()});
    zero = z.get();
    opt = std::move(z);
  }
  const int64_t share = kBatch / c.size();
  for (int s = 0; s < steps; ++s) {
    Generator gen(300 + static_cast<uint64_t>(s));
    const Tensor x = randn({kBatch, 9}, {}, &gen);
    const Tensor y = randint(0, 5, {kBatch}, {.dtype = DType::i64}, &gen);
    const Tensor xs = x.narrow(0, c.rank() * share, share),
                 ys = y.narrow(0, c.rank() * share, share);
    cross_entropy(ddp ? (*ddp)(xs) : (*model)(xs), ys).backward();
    opt->step();
    opt->zero_grad();
  }
  std::optional<ZeroOptimizer::FullParameters> whole;  // stage 3: the shards gathered
  if (zero) whole.emplace(zero->full_parameters());
  std::vector<Tensor> out;
  for (const Tensor& p : model->parameters()) out.push_back(p.detach().clone());
  return out;
}

}  // namespace

TEST_CASE("mpi: ZeRO-1, 2 and 3 equal DDP after 10 steps (SGD-momentum and AdamW)", "[mpi][zero]") {
  for (bool adamw : {false, true}) {
    const std::vector<Tensor> ddp = train(0, adamw, 10);
    for (int stage : {1, 2, 3}) {
      INFO((adamw ? "AdamW" : "SGD-momentum") << ", stage " << stage << ", np " << world().size());
      // MPI's reduce-scatter and allreduce may add the ranks' gradients in other orders: an
      // averaged gradient differs by a rounding of its N-term sum (N 2^-24 relative at most),
      // which updates of lr <= 0.05 carry into the parameters far below their own rounding over
      // 10 steps; what shows is the stored parameters' rounding, a few ulps (2^-23 of max|p|
      // each): 1e-6 is 8 (tests/dist/test_zero.cpp, kFewUlps).
      CHECK(relative_diff(train(stage, adamw, 10), ddp) <= 1e-6);
    }
  }
}
