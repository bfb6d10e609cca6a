// DistributedDataParallel over in-process ranks: equivalence with one process on the whole batch
// (plain, with no_sync accumulation, with stoke's ring), bit-identical replicas, buckets (order,
// caps, rebuild in ready order), the overlap of communication with backward, unused parameters,
// buffer broadcast and the error for ranks that built different models.
#include <catch2/catch.hpp>

#include <algorithm>
#include <mutex>

#include "dist/buffer_broadcast.h"
#include "dist_util.h"

using namespace stoke;
using namespace stoke::dist;
using namespace stoke::dist::test;

namespace {

constexpr int kBatch = 128;

struct Data {
  Tensor x, y;
};

Data make_data(int n, uint64_t seed) {
  Generator gen(seed);
  return {randn({n, 1, 28, 28}, {}, &gen), randint(0, 10, {n}, {.dtype = DType::i64}, &gen)};
}

std::shared_ptr<nn::Module> lenet(uint64_t seed) {
  Generator gen(seed);
  return std::make_shared<nn::models::LeNet5>(nn::models::ModelOptions{.generator = &gen});
}

std::vector<Tensor> snapshot(const nn::Module& m) {
  std::vector<Tensor> out;
  for (const Tensor& p : m.parameters()) out.push_back(p.detach().clone());
  return out;
}

double max_abs_diff(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const auto va = a[i].to_vector<float>(), vb = b[i].to_vector<float>();
    for (size_t k = 0; k < va.size(); ++k) d = std::max(d, std::abs(double(va[k]) - vb[k]));
  }
  return d;
}

// One process, the whole batch: the losses of `steps` SGD steps, the final parameters, and the
// largest path any parameter element travelled (the sum of its steps' |change|).
struct SingleRun {
  std::vector<double> losses;
  std::vector<Tensor> params;
  double path = 0;
};

// Adds |after - before| elementwise to `path` (one tensor per parameter).
void add_steps(std::vector<Tensor>& path, const std::vector<Tensor>& before,
               const std::vector<Tensor>& after) {
  for (size_t i = 0; i < path.size(); ++i)
    path[i] = add(path[i], abs(sub(after[i], before[i])).to(DType::f64));
}

double largest(const std::vector<Tensor>& ts) {
  double m = 0;
  for (const Tensor& t : ts)
    for (double v : t.to_vector<double>()) m = std::max(m, v);
  return m;
}

SingleRun reference_run(const Data& d, int steps) {
  auto model = lenet(1);
  nn::optim::SGD opt(model->parameters(), {.lr = 0.05, .momentum = 0.9});
  SingleRun ref;
  std::vector<Tensor> path, before = snapshot(*model);
  for (const Tensor& p : before) path.push_back(zeros(p.shape(), {.dtype = DType::f64}));
  for (int s = 0; s < steps; ++s) {
    Tensor loss = cross_entropy(model->forward(d.x), d.y);
    ref.losses.push_back(loss.item<float>());
    loss.backward();
    opt.step();
    opt.zero_grad();
    const std::vector<Tensor> after = snapshot(*model);
    add_steps(path, before, after);
    before = after;
  }
  ref.params = before;
  ref.path = largest(path);
  return ref;
}

// DDP and one process sum the same per-sample terms in other orders (each rank's 64 or 42
// samples, then the allreduce's add). A gradient element sums K <= 128 x 784 terms of random sign
// (conv1's weights: batch x positions), whose rounding error in either order has a standard
// deviation near u sqrt(K / 6) |g| (u = 2^-24): the two orders within DELTA = 6u sqrt(K / 3) =
// 6.5e-5 of |g| (six standard deviations). First order, with no amplification over these few
// steps, a parameter then differs by at most DELTA times the path it travelled (the sum of its
// steps' |change|), and a loss by DELTA times its descent from ln 10 (|g . dg| <= DELTA |g|^2
// summed over the steps), plus the loss's own rounding (a mean of 128 terms <= 2.4: 2 sqrt(128)
// u 2.4) and the parameters' (2u |p|).
constexpr double kU = 0x1p-24;
const double kDelta = 6 * kU * std::sqrt(128.0 * 784 / 3);

struct RankRun {
  std::vector<double> losses;               // this rank's loss per step
  std::vector<std::vector<Tensor>> params;  // after each step
  int64_t allreduces = 0, buckets = 0;
};

// `ranks` ranks, each on its contiguous share of the batch, `accum` micro-batches per step (all but
// the last under no_sync). Rank r's model starts from seed 1 + r: the broadcast makes them equal.
std::vector<RankRun> ddp_run(const Data& d, int ranks, int steps, int accum, DdpOptions options) {
  std::vector<RankRun> runs(static_cast<size_t>(ranks));
  run_ranks(ranks, [&](Communicator& c) {
    RankRun& run = runs[static_cast<size_t>(c.rank())];
    auto model = lenet(1 + static_cast<uint64_t>(c.rank()));
    DistributedDataParallel ddp(model, c, options);
    nn::optim::SGD opt(model->parameters(), {.lr = 0.05, .momentum = 0.9});
    const int64_t share = kBatch / ranks, micro = share / accum;
    for (int s = 0; s < steps; ++s) {
      double loss_sum = 0;
      for (int m = 0; m < accum; ++m) {
        const int64_t begin = c.rank() * share + m * micro;
        const Tensor x = d.x.narrow(0, begin, micro), y = d.y.narrow(0, begin, micro);
        auto step = [&] {
          Tensor loss = cross_entropy(ddp(x), y);
          loss_sum += loss.item<float>();
          mul(loss, 1.0 / accum).backward();
        };
        if (m + 1 < accum) {
          auto guard = ddp.no_sync();
          step();
        } else {
          step();
        }
      }
      run.losses.push_back(loss_sum / accum);
      opt.step();
      opt.zero_grad();
      run.params.push_back(snapshot(*model));
    }
    run.allreduces = ddp.allreduce_count();
    run.buckets = static_cast<int64_t>(ddp.bucket_parameter_names().size());
  });
  return runs;
}

void check_equivalent(const std::vector<RankRun>& runs, const SingleRun& ref) {
  const size_t steps = ref.losses.size();
  for (size_t s = 0; s < steps; ++s) {
    INFO("step " << s);
    double mean = 0;
    for (const RankRun& r : runs) mean += r.losses[s] / static_cast<double>(runs.size());
    const double loss_tol =
        kDelta * std::abs(std::log(10.0) - ref.losses[s]) + 2 * std::sqrt(128.0) * kU * 2.4;
    INFO("loss " << mean << " against " << ref.losses[s] << ", bound " << loss_tol);
    CHECK(std::abs(mean - ref.losses[s]) < loss_tol);
    // Replicas bit-equal: every rank applies the same allreduced bytes in the same SGD step.
    for (size_t r = 1; r < runs.size(); ++r)
      for (size_t i = 0; i < runs[0].params[s].size(); ++i)
        REQUIRE(same_bytes(runs[r].params[s][i], runs[0].params[s][i]));
  }
  double p_max = 0;
  for (const Tensor& p : ref.params) p_max = std::max(p_max, largest({abs(p).to(DType::f64)}));
  const double param_tol = kDelta * ref.path + 2 * kU * std::max(p_max, 1.0);
  const double diff = max_abs_diff(runs[0].params.back(), ref.params);
  INFO("parameters " << diff << " apart, bound " << param_tol << " (path " << ref.path << ")");
  CHECK(diff < param_tol);
}

// Registers a then b; forward uses b first, so backward makes a's gradient ready first.
struct TwoParams : nn::Module {
  Tensor a, b;
  TwoParams() {
    a = register_parameter("a", full({4}, 2.0));
    b = register_parameter("b", full({4}, 3.0));
  }
  Tensor forward(const Tensor& x) override { return mul(mul(x, b), a); }
};

// A parameter that forward uses only where `use` is set.
struct MaybeUnused : nn::Module {
  Tensor w, extra;
  bool use = false;
  MaybeUnused() {
    w = register_parameter("w", full({3}, 1.0));
    extra = register_parameter("extra", full({3}, 1.0));
  }
  Tensor forward(const Tensor& x) override {
    Tensor y = mul(x, w);
    return use ? mul(y, extra) : y;
  }
};

}  // namespace

TEST_CASE("dist: DDP on 2 ranks x 64 equals 1 rank x 128 over 20 SGD steps (LeNet-5)", "[ddp]") {
  const Data d = make_data(kBatch, 7);
  const auto ref = reference_run(d, 20);
  const auto runs = ddp_run(d, 2, 20, 1, {});
  check_equivalent(runs, ref);
  CHECK(runs[0].allreduces == 20 * runs[0].buckets);
}

TEST_CASE("dist: DDP with no_sync accumulation allreduces once per bucket per step", "[ddp]") {
  const Data d = make_data(kBatch, 8);
  const auto ref = reference_run(d, 6);
  // Small caps: several buckets, so "once per bucket" is counted, not assumed.
  const auto runs = ddp_run(d, 2, 6, 2, {.bucket_cap_mb = 0.1, .first_bucket_cap_mb = 0.05});
  REQUIRE(runs[0].buckets >= 3);
  check_equivalent(runs, ref);
  CHECK(runs[0].allreduces == 6 * runs[0].buckets);
}

TEST_CASE("dist: DDP over stoke's ring, tree, rhd and auto, over 3 ranks, matches too", "[ddp]") {
  const Data d = make_data(126, 9);  // 3 x 42
  const SingleRun ref = reference_run(d, 4);
  for (AllreduceAlgorithm algorithm : {AllreduceAlgorithm::ring, AllreduceAlgorithm::tree,
                                       AllreduceAlgorithm::rhd, AllreduceAlgorithm::automatic}) {
    INFO(allreduce_algorithm_name(algorithm));
    std::vector<RankRun> runs(3);
    run_ranks(3, [&](Communicator& c) {
      RankRun& run = runs[static_cast<size_t>(c.rank())];
      auto model = lenet(1);
      DistributedDataParallel ddp(model, c, {.algorithm = algorithm});
      nn::optim::SGD opt(model->parameters(), {.lr = 0.05, .momentum = 0.9});
      for (int s = 0; s < 4; ++s) {
        const Tensor x = d.x.narrow(0, 42 * c.rank(), 42), y = d.y.narrow(0, 42 * c.rank(), 42);
        Tensor loss = cross_entropy(ddp(x), y);
        run.losses.push_back(loss.item<float>());
        loss.backward();
        opt.step();
        opt.zero_grad();
        run.params.push_back(snapshot(*model));
      }
    });
    check_equivalent(runs, ref);
  }
}

TEST_CASE("dist: DDP buckets: reverse registration order, caps, rebuilt in ready order", "[ddp]") {
  std::vector<std::vector<std::vector<std::string>>> before(2), initial(2), after(2);
  run_ranks(2, [&](Communicator& c) {
    auto lenet_model = lenet(1);
    DistributedDataParallel big(lenet_model, c,
                                {.bucket_cap_mb = 0.1, .first_bucket_cap_mb = 0.05});
    auto names = big.bucket_parameter_names();
    before[static_cast<size_t>(c.rank())] = names;
    auto two = std::make_shared<TwoParams>();
    // Caps below one parameter's bytes: a bucket per parameter.
    DistributedDataParallel ddp(two, c, {.bucket_cap_mb = 1e-6, .first_bucket_cap_mb = 1e-6});
    initial[static_cast<size_t>(c.rank())] = ddp.bucket_parameter_names();
    sum(ddp(full({4}, 1.0))).backward();
    after[static_cast<size_t>(c.rank())] = ddp.bucket_parameter_names();
  });
  // LeNet-5: the last registered parameter leads; the first bucket holds <= 0.05 MiB unless one
  // parameter alone is larger; every parameter appears once.
  const auto& b = before[0];
  REQUIRE(!b.empty());
  CHECK(b.front().front() == "fc3.bias");
  CHECK(b.back().back() == "conv1.weight");
  size_t count = 0;
  for (const auto& bucket : b) count += bucket.size();
  CHECK(count == 10);
  CHECK(before[1] == before[0]);
  CHECK(initial[0] == std::vector<std::vector<std::string>>{{"b"}, {"a"}});  // reverse registration
  CHECK(initial[1] == initial[0]);
  // a's gradient was ready first: the rebuilt buckets put it first, on both ranks.
  CHECK(after[0] == std::vector<std::vector<std::string>>{{"a"}, {"b"}});
  CHECK(after[1] == after[0]);
}

TEST_CASE("dist: DDP's first bucket allreduce is launched before backward ends", "[ddp]") {
  std::vector<DdpEvent> events;
  std::mutex m;
  run_ranks(2, [&](Communicator& c) {
    auto model = lenet(1);
    DistributedDataParallel ddp(
        model, c, {.bucket_cap_mb = 0.05, .first_bucket_cap_mb = 0.01, .record_events = true});
    const Data d = make_data(8, 3);
    cross_entropy(ddp(d.x), d.y).backward();
    if (c.rank() == 0) {
      std::lock_guard<std::mutex> lock(m);
      events = ddp.events();
    }
  });
  auto first = [&](DdpEvent::Kind k) {
    return std::find_if(events.begin(), events.end(),
                        [k](const DdpEvent& e) { return e.kind == k; }) -
           events.begin();
  };
  int64_t last_grad = -1, launched = 0, finished = 0;
  for (size_t i = 0; i < events.size(); ++i) {
    if (events[i].kind == DdpEvent::grad_ready) last_grad = static_cast<int64_t>(i);
    if (events[i].kind == DdpEvent::allreduce_launched) {
      CHECK(events[i].index == launched);  // buckets launch in order
      ++launched;
    }
    if (events[i].kind == DdpEvent::allreduce_finished) ++finished;
  }
  CHECK(launched >= 3);
  CHECK(finished == launched);
  CHECK(first(DdpEvent::allreduce_launched) < last_grad);  // overlapped with the rest of backward
}

TEST_CASE("dist: DDP with an unused parameter: an error naming it, or find_unused_parameters",
          "[ddp]") {
  CHECK_THROWS_WITH(run_ranks(2,
                              [&](Communicator& c) {
                                auto m = std::make_shared<MaybeUnused>();
                                DistributedDataParallel ddp(m, c);
                                sum(ddp(full({3}, 1.0))).backward();
                                ddp(full({3}, 1.0));  // the next forward finds it
                              }),
                    Catch::Contains("the last backward gave no gradient to 'extra'") &&
                        Catch::Contains("find_unused_parameters"));
  // Used on rank 0 only: with the flag, rank 1 contributes zeros and both get half of rank 0's.
  std::vector<std::vector<float>> grads(2);
  run_ranks(2, [&](Communicator& c) {
    auto m = std::make_shared<MaybeUnused>();
    m->use = c.rank() == 0;
    DistributedDataParallel ddp(m, c, {.find_unused_parameters = true});
    for (int it = 0; it < 2; ++it) {
      m->zero_grad();
      sum(ddp(full({3}, 2.0))).backward();
    }
    grads[static_cast<size_t>(c.rank())] = m->extra.grad().to_vector<float>();
  });
  CHECK(grads[0] == std::vector<float>{1.f, 1.f, 1.f});  // d/d extra = x * w = 2, averaged with 0
  CHECK(grads[1] == grads[0]);
}

TEST_CASE("dist: DDP broadcasts rank 0's parameters and buffers and keeps the module's keys",
          "[ddp]") {
  std::vector<std::vector<float>> means(2), weights(2);
  std::vector<std::vector<std::string>> keys(2);
  run_ranks(2, [&](Communicator& c) {
    auto bn = std::make_shared<nn::BatchNorm2d>(3);
    fill_(bn->running_mean, 1.0 + c.rank());
    fill_(bn->weight.detach(), 5.0 + c.rank());
    DistributedDataParallel ddp(bn, c);
    means[static_cast<size_t>(c.rank())] = bn->running_mean.to_vector<float>();
    weights[static_cast<size_t>(c.rank())] = bn->weight.to_vector<float>();
    for (const auto& [k, v] : ddp.state_dict()) keys[static_cast<size_t>(c.rank())].push_back(k);
  });
  CHECK(means[1] == std::vector<float>{1.f, 1.f, 1.f});
  CHECK(weights[1] == std::vector<float>{5.f, 5.f, 5.f});
  CHECK(keys[0] == std::vector<std::string>{"weight", "bias", "running_mean", "running_var",
                                            "num_batches_tracked"});
}

TEST_CASE(
    "dist: BufferBroadcast gives every rank rank 0's buffers, one broadcast per dtype (N = 3)",
    "[ddp][zero]") {
  // Two batch norms: f32 running statistics and i64 counters, 6 buffers in 2 groups.
  struct TwoNorms : nn::Module {
    std::shared_ptr<nn::BatchNorm2d> a, b;
    TwoNorms() {
      a = register_module("a", std::make_shared<nn::BatchNorm2d>(3));
      b = register_module("b", std::make_shared<nn::BatchNorm2d>(5));
    }
    Tensor forward(const Tensor& x) override { return b->forward(a->forward(x)); }
  };
  std::vector<std::vector<Tensor>> got(3);
  std::vector<size_t> groups(3);
  run_ranks(3, [&](Communicator& c) {
    auto m = std::make_shared<TwoNorms>();
    BufferBroadcast buffers(*m);
    groups[static_cast<size_t>(c.rank())] = buffers.groups();
    for (int round = 0; round < 2; ++round) {  // the staging tensors reused
      Generator gen(10 * static_cast<uint64_t>(c.rank()) + static_cast<uint64_t>(round));
      for (auto& [name, t] : m->named_buffers()) {
        Tensor b = t.detach();
        if (b.dtype() == DType::i64)
          fill_(b, 7.0 + c.rank() + 3 * round);
        else
          b.copy_(randn(b.shape(), {}, &gen));
      }
      buffers(c);
    }
    for (auto& [name, t] : m->named_buffers())
      got[static_cast<size_t>(c.rank())].push_back(t.detach().clone());
  });
  CHECK(groups == std::vector<size_t>{2, 2, 2});
  for (size_t r = 1; r < 3; ++r)
    for (size_t k = 0; k < got[0].size(); ++k) {
      INFO("rank " << r << ", buffer " << k);
      CHECK(same_bytes(got[r][k], got[0][k]));
    }
  CHECK(got[0][2].to_vector<int64_t>() == std::vector<int64_t>{10});  // rank 0's round 2 counter
}

TEST_CASE("dist: DDP refuses ranks whose models differ, naming the first difference", "[ddp]") {
  CHECK_THROWS_WITH(run_ranks(2,
                              [&](Communicator& c) {
                                Generator gen(1);
                                auto m =
                                    std::make_shared<nn::models::LeNet5>(nn::models::ModelOptions{
                                        .num_classes = c.rank() == 0 ? 10 : 9, .generator = &gen});
                                DistributedDataParallel ddp(m, c);
                              }),
                    Catch::Contains("the module differs across ranks") &&
                        Catch::Contains("'fc3.weight' f32 [10, 84] on rank 0") &&
                        Catch::Contains("'fc3.weight' f32 [9, 84] on rank 1"));
  CHECK_THROWS_WITH(parse_allreduce_algorithm("trees", "--allreduce"),
                    Catch::Contains("--allreduce: expected 'native', 'ring', 'tree', 'rhd' or "
                                    "'auto', got 'trees'"));
  CHECK(parse_allreduce_algorithm("ring", "x") == AllreduceAlgorithm::ring);
}
