// dist::NcclCommunicator on cuda/emu's NCCL subset: ranks are threads on the emulator's two
// devices. Every collective against closed forms, stoke's ring over NCCL's send/recv (its reduce
// step in the elementwise kernels) equal to NCCL's own, DDP on cuda tensors equal to one process
// on the whole batch, and the watchdog that aborts a communicator whose peer never arrives.
#include <catch2/catch.hpp>

#include <atomic>
#include <barrier>
#include <chrono>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "cuda/runtime/device.h"
#include "dist/cuda/nccl.h"
#include "dist/ddp.h"
#include "dist/host_staged.h"
#include "dist/in_process.h"
#include "dist/rhd.h"
#include "dist/ring.h"
#include "dist/tree.h"
#include "dist/tuner.h"
#include "stoke/stoke.h"

#include "dist_ranks.h"

using namespace stoke;
using namespace stoke::dist;
using stoke::test::run_nccl;
using stoke::test::run_staged;

namespace {

// fn(comm) on n rank threads (rank r on device r % 2) of one clique; rethrows the first error.
// Rank r's element i: multiples of 1/4 below 8, exact in every float type, so sums are exact.
double value(int r, int64_t i) {
  return 0.5 * (r + 1) + 0.25 * static_cast<double>(i % 7);
}

Tensor input(int r, int64_t n, DType dtype, Device device) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = value(r, i);
  return from_vector<double>(v, {n}, {.dtype = dtype}).to(device);
}

std::vector<double> host(const Tensor& t) {
  return t.to(Device::cpu()).to(DType::f64).to_vector<double>();
}

// Twice the unit roundoff of dtype: one correctly rounded result is within u of the exact value;
// a value rounded in f32 and then to f16/bf16 (a double rounding) within u (1 + 2^-13) < 2u.
double two_u(DType dtype) {
  switch (dtype) {
    case DType::f64:
      return 0x1p-52;
    case DType::f16:
      return 0x1p-10;
    case DType::bf16:
      return 0x1p-7;
    default:
      return 0x1p-23;
  }
}

// A two-layer MLP, small enough for the emulator.
struct Mlp : nn::Module {
  std::shared_ptr<nn::Linear> fc1, fc2;
  explicit Mlp(Generator* gen) {
    fc1 = register_module("fc1",
                          std::make_shared<nn::Linear>(6, 5, nn::LinearOptions{.generator = gen}));
    fc2 = register_module("fc2",
                          std::make_shared<nn::Linear>(5, 3, nn::LinearOptions{.generator = gen}));
  }
  Tensor forward(const Tensor& x) override { return fc2->forward(relu(fc1->forward(x))); }
};

}  // namespace

TEST_CASE("dist: nccl (emu): every collective matches its closed form", "[nccl_dist]") {
  for (int n : {1, 2, 3}) {
    for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
      for (int64_t len : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1000}}) {
        INFO(n << " ranks, " << dtype << ", " << len << " elements");
        std::vector<std::vector<double>> sum(n), avg(n), mx(n), scattered(n), gathered(n), bcast(n);
        run_nccl(n, [&](NcclCommunicator& c) {
          const int r = c.rank();
          const Device dev = Device::cuda(c.device());
          Tensor t = input(r, len, dtype, dev);
          c.allreduce(t, ReduceOp::sum);
          sum[r] = host(t);
          t = input(r, len, dtype, dev);
          c.allreduce(t, ReduceOp::avg);
          avg[r] = host(t);
          t = input(r, len, dtype, dev);
          c.allreduce(t, ReduceOp::max);
          mx[r] = host(t);
          Tensor out = empty({len}, {.dtype = dtype, .device = dev});
          c.reduce_scatter(input(r, len * n, dtype, dev), out);
          scattered[r] = host(out);
          Tensor all = empty({len * n}, {.dtype = dtype, .device = dev});
          c.allgather(input(r, len, dtype, dev), all);
          gathered[r] = host(all);
          t = input(r, len, dtype, dev);
          c.broadcast(t, n - 1);
          bcast[r] = host(t);
        });
        for (int r = 0; r < n; ++r) {
          for (int64_t i = 0; i < len; ++i) {
            double s = 0, m = 0;
            for (int q = 0; q < n; ++q) {
              s += value(q, i);
              m = std::max(m, value(q, i));
            }
            const size_t k = static_cast<size_t>(i);
            REQUIRE(sum[r][k] == s);  // exact sums (see value())
            // The exact sum divided by n, rounded to the dtype once (f16/bf16 through f32).
            REQUIRE(avg[r][k] == Approx(s / n).epsilon(two_u(dtype)));
            REQUIRE(mx[r][k] == m);
            double sc = 0;
            for (int q = 0; q < n; ++q) sc += value(q, r * len + i);
            REQUIRE(scattered[r][k] == sc);
            REQUIRE(bcast[r][k] == value(n - 1, i));
            for (int q = 0; q < n; ++q) REQUIRE(gathered[r][q * len + k] == value(q, i));
          }
        }
      }
    }
  }
}

TEST_CASE("dist: nccl (emu): stoke's ring over NCCL's send/recv equals NCCL's allreduce",
          "[nccl_dist]") {
  for (int n : {2, 3}) {
    for (DType dtype : {DType::f32, DType::bf16}) {
      INFO(n << " ranks, " << dtype);
      std::vector<std::vector<double>> ring(n), native(n);
      run_nccl(n, [&](NcclCommunicator& c) {
        const Device dev = Device::cuda(c.device());
        Tensor a = input(c.rank(), 1001, dtype, dev), b = a.clone();
        ring_allreduce(c, a, ReduceOp::avg, {.segment_bytes = 256});
        c.allreduce(b, ReduceOp::avg);
        ring[c.rank()] = host(a);
        native[c.rank()] = host(b);
      });
      for (int r = 0; r < n; ++r) {
        // Bit-identical on every rank: each chunk is reduced once and the result copied to all.
        REQUIRE(ring[r] == ring[0]);
        // Both divide the exact sum (see value()) by n in f32: within u of s / n as a quotient,
        // 2u as a product by the rounded 1 / n, so under 4u apart; bf16 then rounds two such
        // values to the same or adjacent bf16 values, at most 2^-7 apart.
        const double rel = dtype == DType::bf16 ? 0x1p-7 : 2 * two_u(dtype);
        for (size_t i = 0; i < ring[r].size(); ++i)
          REQUIRE(ring[r][i] == Approx(native[r][i]).epsilon(rel));
      }
    }
  }
  // f64 on a device is refused before any message moves (stoke's CUDA kernels have no f64).
  CHECK_THROWS_WITH(run_nccl(2,
                             [](NcclCommunicator& c) {
                               Tensor t = zeros(
                                   {8}, {.dtype = DType::f64, .device = Device::cuda(c.device())});
                               ring_allreduce(c, t);
                             }),
                    Catch::Contains("reduce f64 on the CPU only"));
}

TEST_CASE(
    "dist: nccl (emu): the tree, rhd and the pipelined and blocking ring over NCCL's "
    "isend/irecv equal the closed form, and over host staging too",
    "[nccl_dist]") {
  using Fn = std::function<void(Communicator&, Tensor&, ReduceOp, const CollectiveOptions&)>;
  const std::vector<std::pair<const char*, Fn>> algos = {
      {"ring", [](Communicator& c, Tensor& t, ReduceOp op,
                  const CollectiveOptions& o) { ring_allreduce(c, t, op, o); }},
      {"tree", [](Communicator& c, Tensor& t, ReduceOp op,
                  const CollectiveOptions& o) { tree_allreduce(c, t, op, o); }},
      {"rhd", [](Communicator& c, Tensor& t, ReduceOp op, const CollectiveOptions& o) {
         rhd_allreduce(c, t, op, o);
       }}};
  for (int n : {1, 2, 3})
    for (const auto& [name, fn] : algos)
      for (bool pipelined : {true, false})
        for (DType dtype : {DType::f32, DType::bf16})
          for (int64_t len : {int64_t{0}, int64_t{2}, int64_t{301}}) {
            INFO(name << (pipelined ? "" : " (blocking)") << ", " << n << " ranks, " << dtype
                      << ", " << len << " elements");
            // 64-byte segments: several per message, so a group holds a send and a receive
            // while the previous segment's reduce is queued.
            const CollectiveOptions o{.segment_bytes = 64, .pipelined = pipelined};
            std::vector<std::vector<double>> sum(n), avg(n), mx(n), staged(n);
            run_nccl(n, [&](NcclCommunicator& c) {
              const int r = c.rank();
              const Device dev = Device::cuda(c.device());
              Tensor t = input(r, len, dtype, dev);
              fn(c, t, ReduceOp::sum, o);
              sum[r] = host(t);
              t = input(r, len, dtype, dev);
              fn(c, t, ReduceOp::avg, o);
              avg[r] = host(t);
              t = input(r, len, dtype, dev);
              fn(c, t, ReduceOp::max, o);
              mx[r] = host(t);
            });
            run_staged(n, [&](HostStagedCommunicator& c) {
              Tensor t = input(c.rank(), len, dtype, Device::cuda(c.rank() % 2));
              fn(c, t, ReduceOp::sum, o);
              staged[c.rank()] = host(t);
            });
            for (int r = 0; r < n; ++r)
              for (int64_t i = 0; i < len; ++i) {
                double s = 0, m = 0;
                for (int q = 0; q < n; ++q) {
                  s += value(q, i);
                  m = std::max(m, value(q, i));
                }
                const size_t k = static_cast<size_t>(i);
                // Multiples of 1/4 below 8, summed over 3 ranks: exact in f32 and bf16.
                REQUIRE(sum[r][k] == s);
                REQUIRE(staged[r][k] == s);
                REQUIRE(mx[r][k] == m);
                // avg: the exact sum divided by n, rounded once: within u relative (bf16 2^-8 =
                // 3.9e-3 < 1e-2; f32 2^-24 = 6e-8 < 1e-6).
                REQUIRE(avg[r][k] == Approx(s / n).epsilon(dtype == DType::bf16 ? 1e-2 : 1e-6));
              }
          }
}

TEST_CASE("dist: nccl (emu): isend/irecv pairs go as one group, waits join the compute stream",
          "[nccl_dist]") {
  // Every rank sends to the next and receives from the previous, three messages each, waited
  // for in reverse; then automatic picks an algorithm per size from a calibrated model.
  for (int n : {2, 3}) {
    std::vector<std::vector<double>> got(n), reduced(n);
    run_nccl(n, [&](NcclCommunicator& c) {
      const int r = c.rank(), next = (r + 1) % n, prev = (r + n - 1) % n;
      const Device dev = Device::cuda(c.device());
      std::vector<Tensor> in;
      std::vector<Request> recvs, sends;
      for (int k = 0; k < 3; ++k) {
        in.push_back(empty({4}, {.device = dev}));
        recvs.push_back(c.irecv(in.back(), prev));
        sends.push_back(c.isend(full({4}, 10.0 * r + k, {.device = dev}), next));
      }
      for (int k = 2; k >= 0; --k) c.wait(recvs[static_cast<size_t>(k)]);
      for (Request& s : sends) c.wait(s);
      for (const Tensor& t : in) got[r].push_back(host(t)[0]);
      // A small calibration (the emulator is slow); automatic then uses the cached model.
      allreduce_model(c, dev, {.large_bytes = 64 << 10, .reps = 2});
      Tensor t = input(r, 1000, DType::f32, dev);
      allreduce(c, t, ReduceOp::sum, AllreduceAlgorithm::automatic);
      reduced[r] = host(t);
    });
    for (int r = 0; r < n; ++r) {
      const int prev = (r + n - 1) % n;
      CHECK(got[r] == std::vector<double>{10.0 * prev, 10.0 * prev + 1, 10.0 * prev + 2});
      for (int64_t i = 0; i < 1000; ++i) {
        double s = 0;
        for (int q = 0; q < n; ++q) s += value(q, i);
        REQUIRE(reduced[r][static_cast<size_t>(i)] == s);
      }
    }
  }
}

TEST_CASE("dist: nccl (emu): DDP on cuda tensors of 2 ranks equals one process on the batch",
          "[nccl_dist]") {
  Generator data_gen(5);
  const Tensor x = randn({8, 6}, {}, &data_gen);
  const Tensor y = randint(0, 3, {8}, {.dtype = DType::i64}, &data_gen);
  std::vector<Tensor> want;
  {
    Generator gen(1);
    auto model = std::make_shared<Mlp>(&gen);
    nn::optim::SGD opt(model->parameters(), {.lr = 0.1, .momentum = 0.9});
    for (int s = 0; s < 3; ++s) {
      cross_entropy(model->forward(x), y).backward();
      opt.step();
      opt.zero_grad();
    }
    for (const Tensor& p : model->parameters()) want.push_back(p.detach().clone());
  }
  std::vector<std::vector<Tensor>> got(2);
  for (AllreduceAlgorithm algo : {AllreduceAlgorithm::native, AllreduceAlgorithm::ring}) {
    INFO(allreduce_algorithm_name(algo));
    run_nccl(2, [&](NcclCommunicator& c) {
      const Device dev = Device::cuda(c.device());
      Generator gen(1 + static_cast<uint64_t>(c.rank()));  // DDP broadcasts rank 0's weights
      auto model = std::make_shared<Mlp>(&gen);
      model->to(dev);
      DistributedDataParallel ddp(model, c, {.algorithm = algo});
      nn::optim::SGD opt(model->parameters(), {.lr = 0.1, .momentum = 0.9});
      const Tensor xs = x.narrow(0, 4 * c.rank(), 4).to(dev);
      const Tensor ys = y.narrow(0, 4 * c.rank(), 4).to(dev);
      for (int s = 0; s < 3; ++s) {
        cross_entropy(ddp(xs), ys).backward();
        opt.step();
        opt.zero_grad();
      }
      for (const Tensor& p : model->parameters())
        got[static_cast<size_t>(c.rank())].push_back(p.detach().to(Device::cpu()));
    });
    for (size_t i = 0; i < want.size(); ++i) {
      // Replicas bit-identical: both ranks apply the same allreduced bytes in the same step.
      REQUIRE(host(got[1][i]) == host(got[0][i]));
      // The same per-sample terms summed as 2 x 4 then averaged against 8 at once: sums of 8 or
      // 6 products (|.| <= 4 / 8) per gradient element, within signed_sum_tol(8, 8 x 0.25) = 1.4e-6
      // of each other (tests/cuda/ops_cuda_util.h); three steps of lr 0.1 with momentum 0.9 move a
      // weight by (1 + 1.9 + 2.71) x 0.1 = 0.56 times a gradient difference: under 1e-6, and a
      // rounding of |w| <= 1.5 each step: 1e-5 absolute.
      const std::vector<double> g = host(got[0][i]), w = host(want[i]);
      for (size_t k = 0; k < g.size(); ++k) REQUIRE(g[k] == Approx(w[k]).margin(1e-5));
    }
    got = std::vector<std::vector<Tensor>>(2);
  }
}

namespace {

std::shared_ptr<nn::Module> lenet(uint64_t seed) {
  Generator gen(seed);
  return std::make_shared<nn::models::LeNet5>(nn::models::ModelOptions{.generator = &gen});
}

// The two engines for cuda tensors: NCCL (emu's), and the in-process engine staged through the host
// (dist::HostStagedCommunicator, stoke-train's path under mpirun without NCCL).
enum class Engine { nccl, staged };

// fn(comm, device) on 2 rank threads, rank r on emulated device r.
void run_two(Engine engine, const std::function<void(Communicator&, Device)>& fn) {
  if (engine == Engine::nccl)
    run_nccl(2, [&](NcclCommunicator& c) { fn(c, Device::cuda(c.device())); });
  else
    run_staged(2, [&](HostStagedCommunicator& c) { fn(c, Device::cuda(c.rank())); });
}

struct DdpRun {
  std::vector<double> losses;                // per step, the mean of the ranks' losses
  std::vector<std::vector<Tensor>> params;   // per step, rank 0's parameters (host)
  std::vector<std::vector<Tensor>> replica;  // per step, rank 1's (two ranks only)
};

// LeNet-5 trained `steps` SGD steps on the batch (x, y): one CPU process on all of it (ranks 0),
// or two ranks on the emulator's two devices, half each in `accum` micro-batches (all but the last
// under no_sync). Rank r starts from seed 1 + r: DDP's broadcast makes them equal.
DdpRun lenet_run(const Tensor& x, const Tensor& y, int ranks, int steps, int accum,
                 Engine engine = Engine::nccl) {
  std::vector<DdpRun> runs(static_cast<size_t>(std::max(ranks, 1)));
  for (DdpRun& r : runs) {
    r.losses.assign(static_cast<size_t>(steps), 0.0);
    r.params.resize(static_cast<size_t>(steps));
  }
  // One rank's (or the one process's) steps, into `into`.
  auto train = [&](nn::Module& model, auto&& forward, int rank, Device dev, DdpRun& into) {
    nn::optim::SGD opt(model.parameters(), {.lr = 0.05, .momentum = 0.9});
    const int64_t share = x.size(0) / std::max(ranks, 1), micro = share / accum;
    for (int s = 0; s < steps; ++s) {
      double loss_sum = 0;
      for (int m = 0; m < accum; ++m) {
        const int64_t begin = rank * share + m * micro;
        const Tensor xs = x.narrow(0, begin, micro).to(dev), ys = y.narrow(0, begin, micro).to(dev);
        Tensor loss = cross_entropy(forward(xs, m + 1 < accum), ys);
        loss_sum += loss.to(Device::cpu()).item<float>();
        mul(loss, 1.0 / accum).backward();
      }
      opt.step();
      opt.zero_grad();
      std::vector<Tensor> snap;
      for (const Tensor& p : model.parameters()) snap.push_back(p.detach().to(Device::cpu()));
      into.params[static_cast<size_t>(s)] = std::move(snap);
      into.losses[static_cast<size_t>(s)] = loss_sum / accum;
    }
  };
  if (ranks == 0) {
    auto model = lenet(1);
    train(
        *model, [&](const Tensor& xs, bool) { return model->forward(xs); }, 0, Device::cpu(),
        runs[0]);
    return runs[0];
  }
  run_two(engine, [&](Communicator& c, Device dev) {
    auto model = lenet(1 + static_cast<uint64_t>(c.rank()));
    model->to(dev);
    DistributedDataParallel ddp(model, c);
    auto forward = [&](const Tensor& xs, bool skip_sync) {
      if (!skip_sync) return ddp(xs);
      auto guard = ddp.no_sync();
      return ddp(xs);
    };
    train(*model, forward, c.rank(), dev, runs[static_cast<size_t>(c.rank())]);
  });
  DdpRun out = runs[0];
  out.replica = runs[1].params;
  for (size_t s = 0; s < out.losses.size(); ++s)
    out.losses[s] = (runs[0].losses[s] + runs[1].losses[s]) / 2;
  return out;
}

}  // namespace

// The CPU test (tests/dist/test_ddp.cpp) runs LeNet-5 at 2 x 64 against 128 for 20 steps; the
// emulator starts OS threads for every block of every kernel, where one LeNet-5 step of 8 images
// takes seconds, so here it is 2 steps of 2 ranks x 4 images (2 micro-batches of 2, the first
// under no_sync) against 8: conv, pooling and linear backward on both devices. The ring and the
// native allreduce are compared on the MLP above. Not built under ThreadSanitizer, which runs the
// emulator at a tenth of the speed (CI's tsan stage checks DDP's threads on the MLP).
#if !defined(__SANITIZE_THREAD__)
TEST_CASE("dist: nccl (emu): DDP of LeNet-5 on cuda tensors with no_sync, 2 ranks x 4 equals 1 x 8",
          "[nccl_dist][lenet]") {
  constexpr int kSteps = 2;
  Generator data_gen(7);
  const Tensor x = randn({8, 1, 28, 28}, {}, &data_gen);
  const Tensor y = randint(0, 10, {8}, {.dtype = DType::i64}, &data_gen);
  const DdpRun ref = lenet_run(x, y, 0, kSteps, 1);
  for (Engine engine : {Engine::nccl, Engine::staged}) {
    INFO((engine == Engine::nccl ? "NCCL" : "in-process, staged through the host"));
    const DdpRun got = lenet_run(x, y, 2, kSteps, 2, engine);
    // The two sides sum the same per-sample terms in other orders, on other kernels: a gradient
    // element sums K <= 8 x 784 terms of random sign (conv1's weights), the two within
    // 6u sqrt(K / 3) = 1.6e-5 of |g|; after two steps of lr 0.05 the losses (~2.3) move by that
    // times their small descent, plus the mean's own rounding (2 sqrt(8) u 2.3 = 7.8e-7): 1e-5
    // holds; the parameters move by that fraction of their path, under 0.2 in two steps of lr
    // 0.05 (with momentum) for gradients below 1: 3.2e-6, so 1e-5 holds for them too.
    for (size_t s = 0; s < kSteps; ++s) {
      INFO("step " << s);
      CHECK(std::abs(got.losses[s] - ref.losses[s]) < 1e-5);
      // Replicas bit-identical: both ranks apply the same allreduced bytes in the same step.
      for (size_t i = 0; i < got.params[s].size(); ++i)
        REQUIRE(host(got.replica[s][i]) == host(got.params[s][i]));
    }
    double diff = 0;
    for (size_t i = 0; i < ref.params.back().size(); ++i) {
      const std::vector<double> g = host(got.params.back()[i]), w = host(ref.params.back()[i]);
      for (size_t k = 0; k < g.size(); ++k) diff = std::max(diff, std::abs(g[k] - w[k]));
    }
    INFO("largest parameter difference after " << kSteps << " steps: " << diff);
    CHECK(diff < 1e-5);
  }
}
#endif

TEST_CASE("dist: nccl (emu): a peer that never arrives trips the watchdog, naming the collective",
          "[nccl_dist]") {
  std::vector<std::string> errors(2);
  run_nccl(2,
           [&](NcclCommunicator& comm) {
             const int r = comm.rank();
             Tensor t = ones({4}, {.device = Device::cuda(r)});
             try {
               if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(600));
               comm.allreduce(t);  // rank 0 waits alone past its timeout
               if (r == 0) comm.allreduce(t);
             } catch (const std::exception& e) {
               errors[static_cast<size_t>(r)] = e.what();
             }
           },
           {.timeout = std::chrono::milliseconds(200)});
  CHECK_THAT(errors[0], Catch::Contains("allreduce #0") && Catch::Contains("timeout"));
  CHECK_FALSE(errors[1].empty());  // its peer aborted: it fails too, never hangs
}

TEST_CASE("dist: nccl (emu): bootstrapped, the watchdog names the rank that never arrived",
          "[nccl_dist]") {
  // NCCL cannot tell where the other ranks are; the communicator the id came over can (its roll
  // call, here the in-process group's): rank 0 times out in allreduce #0, rank 1 never calls it.
  std::atomic<bool> failed{false};
  std::string error;
  run_ranks(2, [&](Communicator& boot) {
    const int r = boot.rank();
    cuda::set_device(r);
    auto comm = NcclCommunicator::bootstrap(boot, r, {.timeout = std::chrono::milliseconds(200)});
    if (r == 0) {
      Tensor t = ones({4}, {.device = Device::cuda(0)});
      try {
        comm->allreduce(t);
        comm->barrier();  // the host waits here for the stream (allreduce only queues)
      } catch (const std::exception& e) {
        error = e.what();
      }
      failed = true;
    } else {
      for (int i = 0; i < 1000 && !failed; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  CHECK_THAT(error, Catch::Contains("allreduce #0 on rank 0") && Catch::Contains("timeout") &&
                        Catch::Contains("rank 1 did not arrive"));
}

TEST_CASE("dist: nccl (emu): a failed call leaves the communicator alive past the timeout",
          "[nccl_dist]") {
  // Mismatched send/recv sizes fail on both ranks (emu's NCCL says so; real NCCL would hang);
  // the failed call must not stay in the watchdog's list and abort the communicator later.
  std::vector<std::string> errors(2);
  std::vector<std::vector<double>> after(2);
  // The ranks meet on the host once their tensors exist and are filled, so that the timeout
  // measures the calls alone: under ThreadSanitizer with the poison mode (every byte an
  // instrumented store) on the 2-core EPYC, rank 0 once reached its send more than the 1 s timeout
  // after rank 1's recv, which then timed out instead of failing on the sizes.
  std::barrier ready(2);
  run_nccl(2,
           [&](NcclCommunicator& c) {
             const Device dev = Device::cuda(c.device());
             Tensor message =
                 c.rank() == 0 ? ones({4}, {.device = dev}) : empty({3}, {.device = dev});
             Tensor t = ones({2}, {.device = dev});
             (void)host(t);  // the fills have run (one stream, in order)
             ready.arrive_and_wait();
             try {
               if (c.rank() == 0)
                 c.send(message, 1);
               else
                 c.recv(message, 0);
             } catch (const std::exception& e) {
               errors[static_cast<size_t>(c.rank())] = e.what();
             }
             // Past the timeout: a failed call left in the watchdog's list would abort by now.
             std::this_thread::sleep_for(std::chrono::milliseconds(2500));
             ready.arrive_and_wait();
             c.allreduce(t);
             after[static_cast<size_t>(c.rank())] = host(t);
           },
           {.timeout = std::chrono::milliseconds(1000)});
  CHECK_THAT(errors[0], Catch::Contains("NCCL failed on rank 0"));
  CHECK_THAT(errors[1], Catch::Contains("NCCL failed on rank 1"));
  CHECK(after[0] == std::vector<double>{2, 2});
  CHECK(after[1] == after[0]);
}
