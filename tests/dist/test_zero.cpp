// dist::ZeroOptimizer over in-process ranks (threads): stages 1, 2 and 3 against DDP with the
// unsharded optimizer on the same data (SGD-momentum and AdamW, N = 2, 3 and 4, native and ring
// collectives, clipping, accumulation, dynamic loss scaling), checkpoints that resume at another
// world size or without ZeRO, and the memory report against the formulas of docs/design.md
// ("ZeRO").
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "dist/zero.h"
#include "dist_util.h"

using namespace stoke;
using namespace stoke::dist;
using namespace stoke::dist::test;

namespace {

constexpr int64_t kBatch = 24;  // divides over 1, 2, 3 and 4 ranks

// 13 -> 29 -> 7, biases: 616 parameters, a count that 2, 3 and 4 do not divide into buckets.
struct Mlp : nn::Module {
  std::shared_ptr<nn::Linear> a, b;
  explicit Mlp(uint64_t seed) {
    Generator gen(seed);
    a = register_module("a",
                        std::make_shared<nn::Linear>(13, 29, nn::LinearOptions{.generator = &gen}));
    b = register_module("b",
                        std::make_shared<nn::Linear>(29, 7, nn::LinearOptions{.generator = &gen}));
  }
  // Through operator(): the children's forward hooks gather stage 3's parameters.
  Tensor forward(const Tensor& x) override { return (*b)(relu((*a)(x))); }
};
constexpr int64_t kPsi = 13 * 29 + 29 + 29 * 7 + 7;

struct Data {
  Tensor x, y;
};

// Batch s of a run: the same on every rank and in every run.
Data batch(int step) {
  Generator gen(1000 + static_cast<uint64_t>(step));
  return {randn({kBatch, 13}, {}, &gen), randint(0, 7, {kBatch}, {.dtype = DType::i64}, &gen)};
}

enum class Opt { sgd, adamw };

std::unique_ptr<nn::optim::Optimizer> make_optimizer(Opt o, std::vector<nn::optim::ParamGroup> g) {
  if (o == Opt::sgd)
    return std::make_unique<nn::optim::SGD>(
        std::move(g), nn::optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3});
  return std::make_unique<nn::optim::AdamW>(std::move(g), nn::optim::AdamWOptions{.lr = 3e-3});
}

// Two groups, as stoke-train makes them: decay on the weights, none on the biases.
std::vector<nn::optim::ParamGroup> groups_of(const nn::Module& m) {
  return nn::optim::weight_decay_groups(m, 1e-2);
}

std::vector<Tensor> snapshot(const nn::Module& m) {
  std::vector<Tensor> out;
  for (const Tensor& p : m.parameters()) out.push_back(p.detach().clone());
  return out;
}

struct RunOptions {
  int ranks = 2;
  int stage = 0;                      // 0: DDP with the plain optimizer
  bool reshard_after_forward = true;  // stage 3
  Opt opt = Opt::sgd;
  int first_step = 0, steps = 50;
  int accum = 1;    // micro-batches per step (DDP: no_sync; ZeRO: accumulated gradients)
  double clip = 0;  // clip the global gradient norm to this, when > 0
  AllreduceAlgorithm algorithm = AllreduceAlgorithm::native;
  const std::vector<Tensor>* start_params = nullptr;  // else Mlp(1 + rank): rank 0's is kept
  const nn::NamedTensors* start_state = nullptr;      // a consolidated optimizer state
  // Dynamic loss scaling (kScaler), the found-inf flag MAX-allreduced as stoke-train does; the
  // step decided on the host (GradScaler::step) or on the device (step_on_device).
  bool scaler = false, scaler_on_device = false;
};

// Grows every 4 clean steps, so that growth and backoff both happen within 50 steps.
constexpr nn::amp::GradScalerOptions kScaler{.init_scale = 1024, .growth_interval = 4};
// With the scaler: at these steps the last rank's gradient of b.bias[0] is made +inf before the
// data-parallel wrapper sees it (a post-accumulate hook registered first). Under DDP the
// all-reduced gradient is inf on every rank; under ZeRO it lands in its owner's shard only (rank
// 0's: b.bias is packed first), so the ranks' own flags differ and only the MAX makes them agree.
constexpr int kInfSteps[] = {6, 7, 23};

struct RunResult {
  std::vector<Tensor> params;            // rank 0's, at the end
  nn::NamedTensors state;                // the consolidated optimizer state, at the end
  std::vector<ZeroMemoryReport> memory;  // per rank (ZeRO)
  int64_t allgathers = 0;                // rank 0's (stage 3: the buckets' gathers)
  bool replicas_equal = true;
  // With the scaler, rank 0's: the scale after each step, and the skipped steps.
  std::vector<double> scales;
  int64_t skipped = 0;
  // Steps at which the ranks' own found-inf flags (before the MAX allreduce) differed.
  int disagreements = 0;
};

// One run over `ranks` threads; every rank takes its contiguous share of each batch.
RunResult run(const RunOptions& o) {
  RunResult result;
  result.memory.resize(static_cast<size_t>(o.ranks));
  std::vector<std::vector<Tensor>> finals(static_cast<size_t>(o.ranks));
  std::vector<nn::NamedTensors> states(static_cast<size_t>(o.ranks));
  // Each rank's own found-inf flag per step, written by its thread only.
  std::vector<std::vector<float>> local_flags(static_cast<size_t>(o.ranks));
  run_ranks(o.ranks, [&](Communicator& c) {
    auto model = std::make_shared<Mlp>(1 + static_cast<uint64_t>(c.rank()));
    if (o.start_params) {
      NoGradGuard no_grad;
      const auto ps = model->parameters();
      for (size_t i = 0; i < ps.size(); ++i) Tensor(ps[i]).copy_((*o.start_params)[i]);
    }
    int step = -1;
    if (o.scaler && c.rank() == o.ranks - 1)
      model->b->bias.register_post_accumulate_grad_hook([&step](const Tensor& p) {
        if (std::find(std::begin(kInfSteps), std::end(kInfSteps), step) == std::end(kInfSteps))
          return;
        NoGradGuard no_grad;
        fill_(p.grad().narrow(0, 0, 1), std::numeric_limits<double>::infinity());
      });
    std::unique_ptr<DistributedDataParallel> ddp;
    std::unique_ptr<nn::optim::Optimizer> opt;
    ZeroOptimizer* zero = nullptr;
    if (o.stage == 0) {
      ddp = std::make_unique<DistributedDataParallel>(
          model, c,
          DdpOptions{
              .bucket_cap_mb = 0.001, .first_bucket_cap_mb = 0.001, .algorithm = o.algorithm});
      opt = make_optimizer(o.opt, groups_of(*model));
    } else {
      const ZeroOptions zo{.stage = o.stage,
                           .bucket_cap_mb = 0.001,
                           .algorithm = o.algorithm,
                           .module = model.get(),
                           .reshard_after_forward = o.reshard_after_forward};
      // AdamW through make_zero_optimizer (a plain optimizer's kind and groups), SGD through a
      // factory of its own.
      auto z = o.opt == Opt::adamw
                   ? make_zero_optimizer(*make_optimizer(o.opt, groups_of(*model)), c, zo)
                   : std::make_unique<ZeroOptimizer>(
                         groups_of(*model), c,
                         [&](std::vector<nn::optim::ParamGroup> g) {
                           return make_optimizer(o.opt, std::move(g));
                         },
                         zo);
      zero = z.get();
      opt = std::move(z);
    }
    if (o.start_state) opt->load_state_dict(*o.start_state);
    std::optional<nn::amp::GradScaler> scaler;
    if (o.scaler) {
      scaler.emplace(kScaler);
      scaler->found_inf_reducer = [&c, &local_flags](Tensor& f) {
        local_flags[static_cast<size_t>(c.rank())].push_back(
            static_cast<float>(f.to(Device::cpu()).item()));
        c.allreduce(f, ReduceOp::max);
      };
    }
    const int64_t share = kBatch / o.ranks, micro = share / o.accum;
    for (int s = o.first_step; s < o.first_step + o.steps; ++s) {
      step = s;
      const Data d = batch(s);
      for (int m = 0; m < o.accum; ++m) {
        const int64_t begin = c.rank() * share + m * micro;
        const Tensor x = d.x.narrow(0, begin, micro), y = d.y.narrow(0, begin, micro);
        auto pass = [&] {
          const Tensor out = ddp ? ddp->forward(x) : model->forward(x);
          const Tensor loss = mul(cross_entropy(out, y), 1.0 / o.accum);
          (scaler ? scaler->scale(loss) : loss).backward();
        };
        if (ddp && m + 1 < o.accum) {
          auto guard = ddp->no_sync();
          pass();
        } else {
          pass();
        }
      }
      if (scaler && o.clip > 0) scaler->unscale_(*opt);  // clip the true gradients
      if (o.clip > 0) {
        if (zero)
          zero->clip_grad_norm_(o.clip);
        else
          nn::optim::clip_grad_norm_(model->parameters(), o.clip);
      }
      if (scaler) {
        if (o.scaler_on_device)
          scaler->step_on_device(*opt);
        else
          scaler->step(*opt);
        scaler->update();
        if (c.rank() == 0) result.scales.push_back(scaler->get_scale());
      } else {
        opt->step();
      }
      opt->zero_grad();
    }
    if (scaler && c.rank() == 0) result.skipped = scaler->skipped_steps();
    if (zero && c.rank() == 0) result.allgathers = zero->allgather_count();
    {
      std::optional<ZeroOptimizer::FullParameters> whole;  // stage 3: the shards gathered
      if (zero) whole.emplace(zero->full_parameters());
      finals[static_cast<size_t>(c.rank())] = snapshot(*model);
    }
    states[static_cast<size_t>(c.rank())] = opt->state_dict();  // collective for ZeRO
    if (zero) result.memory[static_cast<size_t>(c.rank())] = zero->memory_report();
  });
  for (size_t r = 1; r < finals.size(); ++r)
    for (size_t i = 0; i < finals[0].size(); ++i)
      result.replicas_equal = result.replicas_equal && same_bytes(finals[r][i], finals[0][i]);
  result.params = finals[0];
  result.state = states[0];
  for (size_t k = 0; k < local_flags[0].size(); ++k)
    for (size_t r = 1; r < local_flags.size(); ++r)
      if (local_flags[r].at(k) != local_flags[0][k]) {
        ++result.disagreements;
        break;
      }
  return result;
}

// Where ZeRO and DDP do not compute the same sums (stoke's ring cuts ZeRO's padded buckets into
// other chunks than DDP's, so a 3-rank sum starts at another rank; the clip's norm adds the
// shards' partial sums; stage 2 reduces each micro-batch before accumulating; another world size
// sums another number of ranks), a gradient differs by a rounding of its few-term sum: 2^-23
// relative at most, carried into the parameters by updates of lr <= 0.05 at far below their own
// rounding over 20 steps. What shows is the stored parameters' rounding, a few ulps (2^-23 of
// max|p| each) at most: 1e-6 is 8.
constexpr double kFewUlps = 1e-6;

// The consolidated state against a plain optimizer's: the same keys, values within `tol`.
void check_same_state(const nn::NamedTensors& got, const nn::NamedTensors& want, double tol) {
  REQUIRE(got.size() == want.size());
  std::map<std::string, Tensor> by_name(want.begin(), want.end());
  for (const auto& [key, t] : got) {
    INFO(key);
    REQUIRE(by_name.count(key) == 1);
    const Tensor& w = by_name[key];
    REQUIRE(t.shape() == w.shape());
    CHECK(relative_diff({t}, {w}) <= tol);
  }
}

}  // namespace

TEST_CASE(
    "dist: zero: ZeRO-1, ZeRO-2 and ZeRO-3 equal DDP after 50 steps (SGD-momentum and AdamW, N = "
    "2, 3 and 4)",
    "[zero]") {
  for (Opt opt : {Opt::sgd, Opt::adamw})
    for (int ranks : {2, 3, 4}) {
      const RunResult ddp = run({.ranks = ranks, .stage = 0, .opt = opt});
      REQUIRE(ddp.replicas_equal);
      for (int stage : {1, 2, 3}) {
        INFO((opt == Opt::sgd ? "SGD" : "AdamW") << ", N = " << ranks << ", stage " << stage);
        const RunResult z = run({.ranks = ranks, .stage = stage, .opt = opt});
        CHECK(z.replicas_equal);
        // Bit for bit: the native in-process collectives reduce-scatter and all-reduce alike
        // (each element's rank-ordered sum in double, divided, rounded once: dist/in_process.cpp),
        // and the wrapped optimizer's elementwise step on a shard is its step on those elements.
        // Stage 3's gathers copy the shards' bits.
        CHECK(relative_diff(z.params, ddp.params) == 0);
        check_same_state(z.state, ddp.state, 0);
      }
    }
}

TEST_CASE(
    "dist: zero: over stoke's ring, rhd and auto, with clipping and with accumulation, ZeRO "
    "equals DDP",
    "[zero]") {
  for (int stage : {1, 2, 3}) {
    INFO("stage " << stage);
    for (AllreduceAlgorithm a :
         {AllreduceAlgorithm::ring, AllreduceAlgorithm::rhd, AllreduceAlgorithm::automatic}) {
      INFO(allreduce_algorithm_name(a));
      const RunOptions ours{.ranks = 3, .opt = Opt::adamw, .steps = 20, .algorithm = a};
      RunOptions z = ours;
      z.stage = stage;
      CHECK(relative_diff(run(z).params, run(ours).params) <= kFewUlps);
    }

    // A norm of 0.5 clips every step of this model (its gradient norms are above 1).
    const RunOptions clip{.ranks = 2, .opt = Opt::sgd, .steps = 20, .clip = 0.5};
    RunOptions z = clip;
    z.stage = stage;
    CHECK(relative_diff(run(z).params, run(clip).params) <= kFewUlps);

    const RunOptions accum{.ranks = 2, .opt = Opt::adamw, .steps = 20, .accum = 3};
    z = accum;
    z.stage = stage;
    CHECK(relative_diff(run(z).params, run(accum).params) <= kFewUlps);
  }
  // A tree has no reduce-scatter: refused when the optimizer is built, on every rank.
  CHECK_THROWS_WITH(
      run({.ranks = 2, .stage = 1, .steps = 1, .algorithm = AllreduceAlgorithm::tree}),
      Catch::Contains("which a tree has no form of"));
}

TEST_CASE(
    "dist: zero: GradScaler over ZeRO-1, 2 and 3 unscales the shards and skips on every rank as "
    "DDP does (SGD, AdamW with clipping, N = 2 and 3)",
    "[zero][amp]") {
  for (Opt opt : {Opt::sgd, Opt::adamw})
    for (int ranks : {2, 3}) {
      // AdamW clips too: unscale_ first, then ZeRO's clip over the shards.
      const RunOptions ours{
          .ranks = ranks, .opt = opt, .clip = opt == Opt::adamw ? 0.5 : 0.0, .scaler = true};
      const RunResult ddp = run(ours);
      REQUIRE(ddp.replicas_equal);
      // The planted steps skip, and no other (the model's gradients are far from overflowing).
      REQUIRE(ddp.skipped == 3);
      // 1024, x2 after steps 3 (4 clean), backoff at 6 and 7, x2 after 11, 15, 19, backoff at 23
      REQUIRE(ddp.scales.at(5) == 2048);
      REQUIRE(ddp.scales.at(7) == 512);
      REQUIRE(ddp.scales.at(22) == 4096);
      REQUIRE(ddp.scales.at(23) == 2048);
      CHECK(ddp.disagreements == 0);  // DDP's ranks check the same all-reduced gradients
      for (int stage : {1, 2, 3})
        for (bool on_device : {false, true}) {
          INFO((opt == Opt::sgd ? "SGD" : "AdamW") << ", N = " << ranks << ", stage " << stage
                                                   << (on_device ? ", step_on_device" : ", step"));
          RunOptions z = ours;
          z.stage = stage;
          z.scaler_on_device = on_device;
          const RunResult got = run(z);
          CHECK(got.replicas_equal);
          // Each rank checks only its shard: the planted infs were seen by rank 0 only, and every
          // rank still skipped those steps (the flags' MAX), or the replicas would differ.
          CHECK(got.disagreements == 3);
          CHECK(got.skipped == ddp.skipped);
          CHECK(got.scales == ddp.scales);
          if (opt == Opt::sgd) {
            // Bit for bit, as in the case above: the same sums, and unscaling multiplies each
            // element by the same power of two.
            CHECK(relative_diff(got.params, ddp.params) == 0);
          } else {
            // The clip's norm adds the shards' partial sums (kFewUlps says why).
            CHECK(relative_diff(got.params, ddp.params) <= kFewUlps);
          }
        }
    }
}

TEST_CASE("dist: zero: a checkpoint of N = 2 resumes at N = 4, at N = 1 and without ZeRO",
          "[zero]") {
  for (int stage : {1, 2, 3}) {
    INFO("stage " << stage);
    const RunResult whole = run({.ranks = 2, .stage = stage, .opt = Opt::adamw, .steps = 20});
    const RunResult half = run({.ranks = 2, .stage = stage, .opt = Opt::adamw, .steps = 10});
    for (int ranks : {4, 1}) {
      INFO("resumed at N = " << ranks);
      const RunResult resumed = run({.ranks = ranks,
                                     .stage = stage,
                                     .opt = Opt::adamw,
                                     .first_step = 10,
                                     .steps = 10,
                                     .start_params = &half.params,
                                     .start_state = &half.state});
      CHECK(relative_diff(resumed.params, whole.params) <= kFewUlps);
    }
    // Without ZeRO (DDP and a plain AdamW, N = 3) from the ZeRO checkpoint, and ZeRO from a
    // plain run's checkpoint.
    const RunResult plain = run({.ranks = 3,
                                 .stage = 0,
                                 .opt = Opt::adamw,
                                 .first_step = 10,
                                 .steps = 10,
                                 .start_params = &half.params,
                                 .start_state = &half.state});
    CHECK(relative_diff(plain.params, whole.params) <= kFewUlps);
    const RunResult plain_half = run({.ranks = 2, .stage = 0, .opt = Opt::adamw, .steps = 10});
    const RunResult from_plain = run({.ranks = 2,
                                      .stage = stage,
                                      .opt = Opt::adamw,
                                      .first_step = 10,
                                      .steps = 10,
                                      .start_params = &plain_half.params,
                                      .start_state = &plain_half.state});
    // Bit for bit: the plain run's first 10 steps are ZeRO's (as DDP's are, above), and the
    // state comes back as it was saved, so the last 10 are the uninterrupted run's.
    CHECK(relative_diff(from_plain.params, whole.params) == 0);
  }
}

TEST_CASE(
    "dist: zero: checkpoints reshard across stages and world sizes (ZeRO-3 at N = 3 to 1, 1 to 3, "
    "2 to 4)",
    "[zero]") {
  const RunResult whole = run({.ranks = 2, .stage = 3, .opt = Opt::adamw, .steps = 20});
  struct Move {
    int from_ranks, from_stage, to_ranks, to_stage;
  };
  for (const Move m : {Move{3, 3, 1, 1}, Move{1, 1, 3, 3}, Move{2, 3, 4, 2}, Move{2, 2, 4, 3}}) {
    INFO("stage " << m.from_stage << " at N = " << m.from_ranks << " -> stage " << m.to_stage
                  << " at N = " << m.to_ranks);
    const RunResult half =
        run({.ranks = m.from_ranks, .stage = m.from_stage, .opt = Opt::adamw, .steps = 10});
    const RunResult resumed = run({.ranks = m.to_ranks,
                                   .stage = m.to_stage,
                                   .opt = Opt::adamw,
                                   .first_step = 10,
                                   .steps = 10,
                                   .start_params = &half.params,
                                   .start_state = &half.state});
    CHECK(resumed.replicas_equal);
    // Another world size sums another number of ranks' gradients (kFewUlps says what that does).
    CHECK(relative_diff(resumed.params, whole.params) <= kFewUlps);
  }
}

TEST_CASE("dist: zero: memory_report matches the formulas for N = 1, 2, 4 (AdamW, f32)", "[zero]") {
  for (int ranks : {1, 2, 4})
    for (int stage : {1, 2, 3}) {
      INFO("N = " << ranks << ", stage " << stage);
      const RunResult z = run({.ranks = ranks, .stage = stage, .opt = Opt::adamw, .steps = 2});
      for (int r = 0; r < ranks; ++r) {
        const ZeroMemoryReport& m = z.memory[static_cast<size_t>(r)];
        INFO("rank " << r);
        REQUIRE(m.parameters == kPsi);
        // The exact form (docs/design.md): P = Ψ + padding = Σ_b N·c_b, S = Σ_b c_b = P / N.
        const int64_t P = m.padded_parameters, S = m.shard_parameters;
        CHECK(P == S * ranks);
        CHECK(P - kPsi <= (ranks - 1) * m.buckets);
        const int64_t c_max = m.largest_bucket_bytes / 4 / ranks;
        CHECK(m.parameter_bytes == 4 * (stage == 3 ? S : P));
        // Two f32 moments for each parameter element this rank steps (its chunks less padding).
        CHECK(m.optimizer_state_bytes == 8 * m.owned_parameters);
        CHECK(m.owned_parameters <= S);
        CHECK(S - m.owned_parameters <= P - kPsi);
        if (stage == 1) {
          CHECK(m.gradient_bytes == 4 * P);
          CHECK(m.communication_bytes == 4 * c_max);
        } else {  // stages 2 and 3: a pool of two bucket buffers
          CHECK(m.gradient_bytes == 4 * S);
          CHECK(m.communication_bytes == 4 * c_max + 2 * (4 * c_max * ranks + 4 * c_max));
        }
        // Between steps stage 3 holds no gathered parameter; during one, at least its largest
        // bucket and at most all of them.
        CHECK(m.gathered_bytes == 0);
        if (stage == 3) {
          CHECK(m.peak_gathered_bytes >= m.largest_bucket_bytes);
          CHECK(m.peak_gathered_bytes <= 4 * P);
        } else {
          CHECK(m.peak_gathered_bytes == 0);
        }
        // The paper's form (stage 1: 8Ψ + 8Ψ/N, stage 2: 4Ψ + 12Ψ/N, stage 3: 16Ψ/N) within the
        // padding, plus the communication buffers: one chunk (stage 1), two buckets and three
        // chunks (stages 2, 3), B (1/N) and B (2 + 3/N) for the largest bucket's B bytes.
        const double psi = static_cast<double>(kPsi);
        const double paper = stage == 1   ? 8 * psi + 8 * psi / ranks
                             : stage == 2 ? 4 * psi + 12 * psi / ranks
                                          : 16 * psi / ranks;
        const double held =
            static_cast<double>(m.parameter_bytes + m.gradient_bytes + m.optimizer_state_bytes);
        CHECK(std::abs(held - paper) <= 16.0 * (P - kPsi));
        const double B = static_cast<double>(m.largest_bucket_bytes);
        CHECK(m.communication_bytes <= (stage == 1 ? B / ranks : B * (2 + 3.0 / ranks)));
      }
    }
}

TEST_CASE(
    "dist: zero: refuses stage 4, stage 3 without the model or with a parameter outside it, and "
    "ranks whose models differ",
    "[zero]") {
  auto make = [](std::vector<nn::optim::ParamGroup> g) {
    return make_optimizer(Opt::sgd, std::move(g));
  };
  CHECK_THROWS_WITH(run_ranks(1,
                              [&](Communicator& c) {
                                Mlp m(1);
                                ZeroOptimizer z(m.parameters(), c, make, {.stage = 4});
                              }),
                    Catch::Contains("stage 4 does not exist"));
  CHECK_THROWS_WITH(run_ranks(1,
                              [&](Communicator& c) {
                                Mlp m(1);
                                ZeroOptimizer z(m.parameters(), c, make, {.stage = 3});
                              }),
                    Catch::Contains("stage 3 needs the model: set ZeroOptions::module"));
  CHECK_THROWS_WITH(run_ranks(1,
                              [&](Communicator& c) {
                                Mlp m(1);
                                ZeroOptimizer z(m.parameters(), c, make,
                                                {.stage = 3, .module = m.a.get()});
                              }),
                    Catch::Contains("parameter 2 ([7, 29]) belongs to no module"));
  CHECK_THROWS_WITH(run_ranks(2,
                              [&](Communicator& c) {
                                auto lin = std::make_shared<nn::Linear>(3, c.rank() == 0 ? 4 : 5);
                                ZeroOptimizer z(lin->parameters(), c, make);
                              }),
                    Catch::Contains("the parameters differ across ranks"));
}

TEST_CASE("dist: zero: says its state_dict is collective and prints its memory line", "[zero]") {
  std::string line;
  bool collective = false;
  run_ranks(1, [&](Communicator& c) {
    Mlp m(1);
    ZeroOptimizer z(
        m.parameters(), c,
        [](std::vector<nn::optim::ParamGroup> g) { return make_optimizer(Opt::sgd, std::move(g)); },
        {.stage = 2});
    collective = z.state_dict_is_collective();
    line = memory_line(z);
  });
  CHECK(collective);
  // SGD-momentum: one f32 buffer per parameter, Ψ = 616 elements on the one rank.
  CHECK(line.rfind("zero2 memory per rank: optimizer state 0.00 MiB", 0) == 0);
  CHECK(line.find("(rank 0 steps 616 of 616 parameters)") != std::string::npos);
  Mlp plain_model(1);
  const auto plain = make_optimizer(Opt::sgd, groups_of(plain_model));
  CHECK_FALSE(plain->state_dict_is_collective());
  CHECK(memory_line(*plain).empty());
}

namespace {

// 100 -> 200 -> 10: 22,210 parameters, every buffer of them under the CPU allocator's 256 KiB
// caching threshold, where it rounds each block up to 64 bytes only.
struct Wide : nn::Module {
  std::shared_ptr<nn::Linear> a, b;
  Wide() {
    Generator gen(3);
    a = register_module(
        "a", std::make_shared<nn::Linear>(100, 200, nn::LinearOptions{.generator = &gen}));
    b = register_module(
        "b", std::make_shared<nn::Linear>(200, 10, nn::LinearOptions{.generator = &gen}));
  }
  Tensor forward(const Tensor& x) override { return (*b)(relu((*a)(x))); }
};

}  // namespace

TEST_CASE("dist: zero: memory_report's bytes are what the allocator holds (N = 1, 2, 4)",
          "[zero]") {
  for (int ranks : {1, 2, 4})
    for (int stage : {1, 2, 3}) {
      INFO("N = " << ranks << ", stage " << stage);
      std::vector<int64_t> totals(static_cast<size_t>(ranks)), storages(static_cast<size_t>(ranks));
      int64_t before = 0, after = 0;
      run_ranks(ranks, [&](Communicator& c) {
        c.barrier();
        if (c.rank() == 0) before = static_cast<int64_t>(cpu_allocator().stats().allocated_bytes);
        c.barrier();
        auto model = std::make_shared<Wide>();
        ZeroOptimizer z(model->parameters(), c,
                        [](std::vector<nn::optim::ParamGroup> g) {
                          return make_optimizer(Opt::adamw, std::move(g));
                        },
                        {.stage = stage, .bucket_cap_mb = 0.02, .module = model.get()});
        for (int s = 0; s < 2; ++s) {
          Generator gen(7 + static_cast<uint64_t>(s));
          const Tensor x = randn({4, 100}, {}, &gen);
          const Tensor y = randint(0, 10, {4}, {.dtype = DType::i64}, &gen);
          cross_entropy((*model)(x), y).backward();
          z.step();
          z.zero_grad();
        }
        // Every rank holds its optimizer and nothing else of stoke's (the batches, activations
        // and the model's original parameter storages are gone) while rank 0 reads the count.
        c.barrier();
        if (c.rank() == 0) after = static_cast<int64_t>(cpu_allocator().stats().allocated_bytes);
        c.barrier();
        totals[static_cast<size_t>(c.rank())] = z.memory_report().total();
        storages[static_cast<size_t>(c.rank())] = z.memory_report().storages;
      });
      int64_t sum = 0, blocks = 0;
      for (int r = 0; r < ranks; ++r) {
        sum += totals[static_cast<size_t>(r)];
        blocks += storages[static_cast<size_t>(r)];
      }
      // The allocator rounds each block up to a multiple of 64 bytes.
      CHECK(after - before >= sum);
      CHECK(after - before <= sum + 64 * blocks);
    }
}

TEST_CASE(
    "dist: zero: ZeRO-3 holds shards between steps, gathers each bucket once for forward and once "
    "for backward (with and without prefetch), and full_parameters() reads and writes the model",
    "[zero]") {
  constexpr int kRanks = 2;
  struct Seen {
    std::string outside;  // the error of reading a parameter between steps
    // reshard_after_forward, then not, then resharding without prefetch
    std::vector<int64_t> gathers_per_step;
    int64_t gathered_after_eval = -1;
    bool rewritten = false, discarded = false, forward_uses_written = false;
    std::vector<Tensor> prefetched, unprefetched;  // the parameters after two steps
  };
  std::vector<Seen> seen(kRanks);
  run_ranks(kRanks, [&](Communicator& c) {
    Seen& me = seen[static_cast<size_t>(c.rank())];
    const Data d = batch(0);
    for (const auto& [reshard, prefetch] :
         std::vector<std::pair<bool, int>>{{true, 1}, {false, 1}, {true, 0}}) {
      auto model = std::make_shared<Mlp>(1);
      ZeroOptimizer z(groups_of(*model), c,
                      [](std::vector<nn::optim::ParamGroup> g) {
                        return make_optimizer(Opt::sgd, std::move(g));
                      },
                      {.stage = 3,
                       .bucket_cap_mb = 0.001,
                       .module = model.get(),
                       .prefetch = prefetch,
                       .reshard_after_forward = reshard});
      if (reshard) {
        try {
          (void)model->a->weight.clone();
        } catch (const std::exception& e) {
          me.outside = e.what();
        }
      }
      // Two buckets (b.bias, b.weight, a.bias | a.weight, at 262 elements a bucket): a's forward
      // gathers both, b's finds its bucket gathered; backward gathers both again unless forward
      // kept them.
      for (int s = 0; s < 2; ++s) {
        const int64_t before = z.allgather_count();
        cross_entropy((*model)(d.x), d.y).backward();
        z.step();
        z.zero_grad();
        me.gathers_per_step.push_back(z.allgather_count() - before);
      }
      if (reshard) {
        // Without prefetch, a's backward gathers from the hook on a's output alone, which fires
        // although that tensor's handle died in forward (relu saved its own copy).
        auto whole = z.full_parameters();
        for (const Tensor& p : model->parameters())
          (prefetch > 0 ? me.prefetched : me.unprefetched).push_back(p.clone());
      }
      if (!reshard || prefetch == 0) continue;
      {
        NoGradGuard no_grad;
        (void)(*model)(d.x);
      }
      me.gathered_after_eval = z.memory_report().gathered_bytes;
      // Writing under a guard with writeback keeps the values; without, they are dropped.
      Mlp other(7);
      {
        auto whole = z.full_parameters(/*writeback=*/true);
        NoGradGuard no_grad;
        for (const auto& [p, q] :
             std::vector<std::pair<Tensor, Tensor>>{{model->a->weight, other.a->weight},
                                                    {model->a->bias, other.a->bias},
                                                    {model->b->weight, other.b->weight},
                                                    {model->b->bias, other.b->bias}})
          Tensor(p).copy_(q);
      }
      {
        auto whole = z.full_parameters();
        me.rewritten = same_bytes(model->b->weight, other.b->weight) &&
                       same_bytes(model->a->bias, other.a->bias);
        NoGradGuard no_grad;
        fill_(model->a->bias, 5.0);
      }
      {
        auto whole = z.full_parameters();
        me.discarded = same_bytes(model->a->bias, other.a->bias);
      }
      NoGradGuard no_grad;
      // The same ops in the same order over the same values as the plain model: equal bits.
      me.forward_uses_written = same_bytes((*model)(d.x), other.forward(d.x));
    }
  });
  for (int r = 0; r < kRanks; ++r) {
    INFO("rank " << r);
    const Seen& me = seen[static_cast<size_t>(r)];
    CHECK_THAT(me.outside, Catch::Contains("has no data: its storage is released"));
    CHECK(me.gathers_per_step == std::vector<int64_t>{4, 4, 2, 2, 4, 4});
    // Prefetch moves when a gather starts, not what is computed: the same bits.
    REQUIRE(me.prefetched.size() == me.unprefetched.size());
    for (size_t i = 0; i < me.prefetched.size(); ++i)
      CHECK(same_bytes(me.prefetched[i], me.unprefetched[i]));
    CHECK(me.gathered_after_eval == 0);
    CHECK(me.rewritten);
    CHECK(me.discarded);
    CHECK(me.forward_uses_written);
  }
}

namespace {

struct HalfRun {
  std::vector<Tensor> params;  // rank 0's, in the parameters' dtype
  ZeroMemoryReport memory;     // rank 0's (ZeRO)
  int64_t skipped = 0;         // with the scaler
  nn::NamedTensors state;      // the (consolidated) optimizer state at the end
};

// The model in `dtype` (f16 or bf16) for 12 steps. stage 0: DDP, and the f32 master weights kept
// by hand here: a plain optimizer over f32 copies of the parameters, their gradients the averaged
// half gradients widened, the parameters their rounding after each step (Megatron's and
// DeepSpeed's recipe, written out). The scaler (f16): dynamic loss scaling from 2^16, which
// overflows the f16 gradients at first, so steps are skipped.
HalfRun run_half(int ranks, int stage, DType dtype, Opt o, bool scaler, bool masters = true,
                 int steps = 12, const nn::NamedTensors* start_state = nullptr) {
  HalfRun result;
  run_ranks(ranks, [&](Communicator& c) {
    auto model = std::make_shared<Mlp>(1);
    model->to(dtype);
    const std::vector<Tensor> params = model->parameters();
    std::unique_ptr<DistributedDataParallel> ddp;
    std::unique_ptr<nn::optim::Optimizer> opt;
    std::vector<Tensor> master;
    ZeroOptimizer* zero = nullptr;
    if (stage == 0) {
      ddp = std::make_unique<DistributedDataParallel>(
          model, c, DdpOptions{.bucket_cap_mb = 0.001, .first_bucket_cap_mb = 0.001});
      for (const Tensor& p : params) {
        master.push_back(p.detach().to(DType::f32));
        master.back().set_requires_grad(true);
      }
      opt = make_optimizer(o, {{.params = master}});
    } else {
      auto z = std::make_unique<ZeroOptimizer>(
          params, c,
          [&](std::vector<nn::optim::ParamGroup> g) { return make_optimizer(o, std::move(g)); },
          ZeroOptions{.stage = stage,
                      .bucket_cap_mb = 0.001,
                      .module = model.get(),
                      .master_weights = masters});
      zero = z.get();
      opt = std::move(z);
    }
    if (start_state) opt->load_state_dict(*start_state);
    std::optional<nn::amp::GradScaler> amp;
    if (scaler) {
      amp.emplace(nn::amp::GradScalerOptions{.growth_interval = 4});
      amp->found_inf_reducer = [&c](Tensor& f) { c.allreduce(f, ReduceOp::max); };
    }
    const int64_t share = kBatch / ranks;
    for (int s = 0; s < steps; ++s) {
      const Data d = batch(s);
      const Tensor x = d.x.narrow(0, c.rank() * share, share).to(dtype);
      const Tensor y = d.y.narrow(0, c.rank() * share, share);
      const Tensor logits = (ddp ? (*ddp)(x) : (*model)(x)).to(DType::f32);
      const Tensor loss = cross_entropy(logits, y);
      (amp ? amp->scale(loss) : loss).backward();
      if (ddp) {
        NoGradGuard no_grad;
        for (size_t i = 0; i < params.size(); ++i)
          master[i].set_grad(params[i].grad().to(DType::f32));
      }
      if (amp) {
        amp->step(*opt);
        amp->update();
      } else {
        opt->step();
      }
      if (ddp) {
        NoGradGuard no_grad;
        for (size_t i = 0; i < params.size(); ++i) Tensor(params[i]).copy_(master[i]);
        model->zero_grad();
      }
      opt->zero_grad();
    }
    nn::NamedTensors state = opt->state_dict();  // collective for ZeRO
    std::optional<ZeroOptimizer::FullParameters> whole;
    if (zero) whole.emplace(zero->full_parameters());
    if (c.rank() == 0) {
      result.state = state;
      for (const Tensor& p : params) result.params.push_back(p.detach().clone());
      if (zero) result.memory = zero->memory_report();
      if (amp) result.skipped = amp->skipped_steps();
    }
  });
  return result;
}

}  // namespace

TEST_CASE(
    "dist: zero: f16 and bf16 parameters step through f32 master weights in the shards, as DDP "
    "with f32 masters does (stages 1-3, N = 2 and 3, SGD-momentum and AdamW, fp16 loss scaling)",
    "[zero][amp]") {
  for (DType dtype : {DType::f16, DType::bf16})
    for (Opt o : {Opt::sgd, Opt::adamw})
      for (int ranks : {2, 3}) {
        const bool scaler = dtype == DType::f16;
        const HalfRun ref = run_half(ranks, 0, dtype, o, scaler);
        if (scaler) REQUIRE(ref.skipped > 0);  // the scale started too high: steps were skipped
        for (int stage : {1, 2, 3}) {
          INFO(dtype << ", " << (o == Opt::sgd ? "SGD" : "AdamW") << ", N = " << ranks << ", stage "
                     << stage);
          const HalfRun z = run_half(ranks, stage, dtype, o, scaler);
          // Bit for bit: the in-process reduce-scatter averages each half gradient element as the
          // allreduce does (a double sum, rounded once), widening and the f32 update are
          // elementwise, and each parameter is its master's rounding on both sides.
          CHECK(relative_diff(z.params, ref.params) == 0);
          CHECK(z.skipped == ref.skipped);
          // The consolidated state is the masters' optimizer's, in f32, under the plain keys.
          check_same_state(z.state, ref.state, 0);
          // It loads at another world size and stage, back to the same bits.
          const HalfRun loaded =
              run_half(5 - ranks, stage % 3 + 1, dtype, o, false, true, /*steps=*/0, &z.state);
          check_same_state(loaded.state, z.state, 0);
          // Bytes (Psi = 616, P and S as in the f32 formulas): half parameters and gradients,
          // f32 masters and their gradients (8 S), f32 optimizer state on the masters.
          const ZeroMemoryReport& m = z.memory;
          const int64_t P = m.padded_parameters, S = m.shard_parameters;
          CHECK(m.master_bytes == 8 * S);
          CHECK(m.parameter_bytes == 2 * (stage == 3 ? S : P));
          CHECK(m.gradient_bytes == 2 * (stage == 1 ? P : S));
          CHECK(m.optimizer_state_bytes == (o == Opt::sgd ? 4 : 8) * m.owned_parameters);
        }
        // Without masters each update is rounded to the parameters' precision: another result
        // (the control that shows the comparison above sees the masters).
        const HalfRun plain = run_half(ranks, 2, dtype, o, scaler, /*masters=*/false);
        CHECK(plain.memory.master_bytes == 0);
        CHECK(relative_diff(plain.params, ref.params) > 0);
      }
}
