// CUDA graphs (cuda/runtime/graph.h) in the emulator: a captured step replays the recorded work,
// the capture refuses what a GPU refuses (a host read inside it), and a whole training step of
// LeNet-5 captured once and replayed for 20 steps equals the same steps run eagerly, bit for bit:
// the replay runs the same kernels with the same arguments in the same order, by construction.
// Tested with SGD-momentum in f32, and with AdamW under f16 autocast and the GradScaler deciding
// its skips on the device (a batch that overflows f16 makes one step skip, in both runs), both
// under a per-step learning rate schedule that the graph's optimizer reads from device memory
// (the same f64 value, converted by the same expressions as the eager run's argument).
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <numbers>
#include <string>
#include <vector>

#include "autograd/autocast.h"
#include "autograd/loss.h"
#include "core/sync_debug.h"
#include "cuda/emu/emu.h"
#include "cuda/runtime/deferred_checks.h"
#include "cuda/runtime/graph.h"
#include "cuda/runtime/stream.h"
#include "dist/ddp.h"
#include "dist_ranks.h"
#include "nn/amp/grad_scaler.h"
#include "nn/models/models.h"
#include "nn/optim/optimizer.h"
#include "ops_cuda_util.h"

using namespace stoke;
using namespace stoke::test;

TEST_CASE("cuda: CUDA graph: a captured add runs at each replay, not at the capture",
          "[cuda_graph]") {
  const Tensor t = zeros({1000}, {.device = kCuda});
  const cudaStream_t before = cuda::current_stream();
  cuda::Graph graph;
  graph.capture([&] {
    CHECK(cuda::current_stream_capturing());
    add_(t, 1.5);
    add_(t, t);  // doubles: the replay order matters
  });
  CHECK(cuda::current_stream() == before);
  CHECK(!cuda::current_stream_capturing());
  CHECK(graph.size() == 2);
  const ExpectedSync read("the test reads t");
  CHECK(t.to_vector<float>() == std::vector<float>(1000, 0.0f));  // nothing ran yet
  // x -> 2 (x + 1.5): 3, 9, 21, exact in f32.
  for (const float want : {3.0f, 9.0f, 21.0f}) {
    graph.replay();
    CHECK(t.to_vector<float>() == std::vector<float>(1000, want));
  }
}

TEST_CASE(
    "cuda: CUDA graph: a captured op's deferred range check is read after each replay, never "
    "before the first",
    "[cuda_graph]") {
  Generator g(4);
  const Tensor logits = randn({4, 10}, {}, &g).to(kCuda);
  Tensor y = zeros({4}, {.dtype = DType::i64, .device = kCuda});
  Tensor loss = zeros({}, {.device = kCuda});
  const ExpectedSync reads("the test reads the loss");
  (void)loss.item();  // nothing pending before the capture
  REQUIRE(cuda::pending_deferred_checks() == 0);
  cuda::Graph graph;
  graph.capture([&] { loss.copy_(cross_entropy(logits, y)); });
  // The capture's target check waits in the graph: its flag is written by a replay, not yet.
  CHECK(cuda::pending_deferred_checks() == 0);
  CHECK_NOTHROW(loss.item());
  for (int replay = 0; replay < 3; ++replay) {
    INFO("replay " << replay);
    const bool bad = replay == 1;
    y.copy_(full({4}, bad ? 12 : 3, {.dtype = DType::i64}));
    graph.replay();
    CHECK(cuda::pending_deferred_checks() == 1);  // this replay's answer
    if (bad)
      CHECK_THROWS_WITH(loss.item(), Catch::Contains("target 12 of row 0 is out of range for 10"));
    else
      CHECK_NOTHROW(loss.item());
    CHECK(cuda::pending_deferred_checks() == 0);
  }
  // An abandoned capture leaves no check behind either.
  cuda::Graph failed;
  CHECK_THROWS(failed.capture([&] {
    (void)cross_entropy(logits, y);
    (void)loss.item();  // a host read: the capture fails
  }));
  CHECK(cuda::pending_deferred_checks() == 0);
}

TEST_CASE("cuda: CUDA graph: a host read inside the capture fails it, naming the cause",
          "[cuda_graph]") {
  const Tensor t = ones({8}, {.device = kCuda});
  const cudaStream_t before = cuda::current_stream();
  cuda::Graph graph;
  const ExpectedSync read("the capture reads on purpose");
  CHECK_THROWS_WITH(graph.capture([&] { (void)sum(t).item(); }), Catch::Contains("captur"));
  CHECK(cuda::current_stream() == before);
  CHECK(!graph.captured());
  CHECK_THROWS_WITH(graph.replay(), Catch::Contains("nothing was captured"));
  // Eager work still runs after the failed capture.
  CHECK(sum(t).item() == 8.0);
}

TEST_CASE("cuda: emu stream capture: what a GPU refuses in a capture is refused, by code",
          "[cuda_graph]") {
  cudaStream_t s1 = nullptr, s2 = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking) == cudaSuccess);
  void* dev = nullptr;
  REQUIRE(cudaMalloc(&dev, 64) == cudaSuccess);
  cudaGraph_t graph = nullptr;
  // The legacy default stream cannot be captured.
  CHECK(cudaStreamBeginCapture(nullptr, cudaStreamCaptureModeRelaxed) ==
        cudaErrorStreamCaptureUnsupported);
  (void)cudaGetLastError();
  SECTION("a synchronize inside the capture invalidates it") {
    REQUIRE(cudaStreamBeginCapture(s1, cudaStreamCaptureModeRelaxed) == cudaSuccess);
    CHECK(cudaMemsetAsync(dev, 1, 64, s1) == cudaSuccess);
    CHECK(cudaStreamSynchronize(s1) == cudaErrorStreamCaptureUnsupported);
    CHECK(cudaStreamEndCapture(s1, &graph) == cudaErrorStreamCaptureInvalidated);
    CHECK(graph == nullptr);
  }
  SECTION("cudaDeviceSynchronize and a pageable copy are refused too") {
    std::vector<unsigned char> host(64);
    REQUIRE(cudaStreamBeginCapture(s1, cudaStreamCaptureModeRelaxed) == cudaSuccess);
    CHECK(cudaMemcpyAsync(host.data(), dev, 64, cudaMemcpyDeviceToHost, s1) ==
          cudaErrorStreamCaptureUnsupported);
    CHECK(cudaDeviceSynchronize() == cudaErrorStreamCaptureUnsupported);
    CHECK(cudaStreamEndCapture(s1, &graph) == cudaErrorStreamCaptureInvalidated);
  }
  SECTION("a stream that waits for an event of the capture joins it; replays run both") {
    cudaEvent_t fork = nullptr, join = nullptr;
    REQUIRE(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming) == cudaSuccess);
    REQUIRE(cudaEventCreateWithFlags(&join, cudaEventDisableTiming) == cudaSuccess);
    auto* bytes = static_cast<unsigned char*>(dev);
    REQUIRE(cudaStreamBeginCapture(s1, cudaStreamCaptureModeRelaxed) == cudaSuccess);
    CHECK(cudaMemsetAsync(bytes, 7, 32, s1) == cudaSuccess);
    CHECK(cudaEventRecord(fork, s1) == cudaSuccess);
    CHECK(cudaStreamWaitEvent(s2, fork, 0) == cudaSuccess);
    CHECK(cudaMemsetAsync(bytes + 32, 9, 32, s2) == cudaSuccess);  // captured, not run
    CHECK(cudaEventRecord(join, s2) == cudaSuccess);
    CHECK(cudaStreamWaitEvent(s1, join, 0) == cudaSuccess);
    CHECK(cudaEventQuery(join) == cudaErrorStreamCaptureUnsupported);  // also invalidates
    CHECK(cudaStreamEndCapture(s1, &graph) == cudaErrorStreamCaptureInvalidated);
    (void)cudaGetLastError();
    // Again without the query: the capture holds both streams' work.
    REQUIRE(cudaMemset(dev, 0, 64) == cudaSuccess);
    REQUIRE(cudaStreamBeginCapture(s1, cudaStreamCaptureModeRelaxed) == cudaSuccess);
    CHECK(cudaMemsetAsync(bytes, 7, 32, s1) == cudaSuccess);
    CHECK(cudaEventRecord(fork, s1) == cudaSuccess);
    CHECK(cudaStreamWaitEvent(s2, fork, 0) == cudaSuccess);
    CHECK(cudaMemsetAsync(bytes + 32, 9, 32, s2) == cudaSuccess);
    CHECK(cudaEventRecord(join, s2) == cudaSuccess);
    CHECK(cudaStreamWaitEvent(s1, join, 0) == cudaSuccess);
    CHECK(cudaStreamEndCapture(s2, &graph) == cudaErrorStreamCaptureUnmatched);  // not its origin
    REQUIRE(cudaStreamEndCapture(s1, &graph) == cudaSuccess);
    std::vector<unsigned char> host(64, 1);
    REQUIRE(cudaMemcpy(host.data(), dev, 64, cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(host == std::vector<unsigned char>(64, 0));  // the capture ran nothing
    cudaGraphExec_t exec = nullptr;
    REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
    REQUIRE(cudaGraphLaunch(exec, s1) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(s1) == cudaSuccess);  // the capture is over: allowed
    REQUIRE(cudaMemcpy(host.data(), dev, 64, cudaMemcpyDeviceToHost) == cudaSuccess);
    std::vector<unsigned char> want(64, 7);
    std::fill(want.begin() + 32, want.end(), 9);
    CHECK(host == want);
    CHECK(cudaGraphExecDestroy(exec) == cudaSuccess);
    CHECK(cudaEventDestroy(fork) == cudaSuccess);
    CHECK(cudaEventDestroy(join) == cudaSuccess);
  }
  if (graph != nullptr) CHECK(cudaGraphDestroy(graph) == cudaSuccess);
  (void)cudaGetLastError();
  CHECK(cudaFree(dev) == cudaSuccess);
  CHECK(cudaStreamDestroy(s1) == cudaSuccess);
  CHECK(cudaStreamDestroy(s2) == cudaSuccess);
}

TEST_CASE("cuda: CUDA graph: random draws in the capture are refused (a replay would repeat them)",
          "[cuda_graph]") {
  const Tensor t = ones({64}, {.device = kCuda});
  cuda::Graph graph;
  CHECK_THROWS_WITH(graph.capture([&] { (void)dropout(t, 0.5, true); }),
                    Catch::Contains("drew random numbers"));
  CHECK(!graph.captured());
  // Without the draw (eval mode) the same capture is fine.
  graph.capture([&] { (void)dropout(t, 0.5, false); });
  CHECK(graph.captured());
}

namespace {

// One model trained on 20 batches, eagerly or by replaying a graph of its step.
struct GraphTrainer {
  std::shared_ptr<nn::Module> model;
  std::unique_ptr<nn::optim::Optimizer> opt;
  std::unique_ptr<nn::amp::GradScaler> scaler;  // with f16 autocast when set
  Tensor x, y, loss;                            // the step's static input and output

  double base_lr = 0;

  GraphTrainer(const std::string& optimizer, bool amp) {
    Generator init(3);
    model = nn::models::make_model("lenet5", {.generator = &init});
    model->to(kCuda);
    if (optimizer == "sgd")
      opt = std::make_unique<nn::optim::SGD>(
          model->parameters(),
          nn::optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 5e-4});
    else
      opt = std::make_unique<nn::optim::AdamW>(model->parameters(),
                                               nn::optim::AdamWOptions{.lr = 1e-3});
    if (amp) scaler = std::make_unique<nn::amp::GradScaler>(nn::amp::GradScalerOptions{});
    base_lr = opt->lr();
    x = zeros({4, 1, 28, 28}, {.device = kCuda});
    y = zeros({4}, {.dtype = DType::i64, .device = kCuda});
    loss = zeros({}, {.device = kCuda});
  }

  // The step on the static tensors; no host read, so it can be captured.
  void step() {
    Tensor l;
    if (scaler) {
      autocast region(kCuda.type, AutocastOptions{.dtype = DType::f16});
      l = cross_entropy((*model)(x), y);
    } else {
      l = cross_entropy((*model)(x), y);
    }
    if (scaler) {
      scaler->scale(l).backward();
      scaler->step_on_device(*opt);
      scaler->update();
    } else {
      l.backward();
      opt->step();
    }
    opt->zero_grad();
    NoGradGuard no_grad;
    loss.copy_(l.detach().to(DType::f32));
  }

  std::vector<std::vector<float>> weights() const {
    std::vector<std::vector<float>> w;
    for (const Tensor& p : model->parameters()) w.push_back(p.detach().to_vector<float>());
    return w;
  }
};

struct Batches {
  std::vector<Tensor> x, y;
  explicit Batches(int n, int overflow_at) {
    Generator g(5);
    for (int i = 0; i < n; ++i) {
      Tensor xi = randn({4, 1, 28, 28}, {}, &g);
      // 1e6 is beyond f16's 65504: the autocast forward makes inf and the scaler skips the step.
      if (i == overflow_at) xi = mul(xi, 1e6);
      x.push_back(xi.to(kCuda));
      y.push_back(randint(0, 10, {4}, {.dtype = DType::i64}, &g).to(kCuda));
    }
  }
};

}  // namespace

// Not under ThreadSanitizer, whose OS-thread emulator takes minutes for 40 LeNet-5 steps.
#if !defined(__SANITIZE_THREAD__)
TEST_CASE(
    "cuda: CUDA graph: 20 replayed LeNet-5 steps equal 20 eager steps bit for bit, under a "
    "per-step learning rate schedule",
    "[cuda_graph]") {
  const auto [optimizer, amp] =
      GENERATE(table<const char*, bool>({{"sgd", false}, {"adamw", true}}));
  INFO(optimizer << (amp ? " with f16 autocast and the GradScaler" : " in f32"));
#if defined(__SANITIZE_ADDRESS__)
  // 8 under AddressSanitizer (a step of it costs 15 times the default build's): the capture, the
  // private pool's reuse and a skip at step 6 are all there.
  constexpr int kSteps = 8, kWarmup = 3;
#else
  constexpr int kSteps = 20, kWarmup = 3;
#endif
  const Batches batches(kSteps, amp ? kSteps / 2 + 1 : -1);  // the overflow after the capture
  GraphTrainer eager(optimizer, amp), graphed(optimizer, amp);
  // A cosine schedule, another rate every step: the eager run passes it to the kernels as a
  // value, the graph's reads it from device memory (written by set_lr between replays).
  graphed.opt->keep_lr_on_device();
  cuda::Graph graph;
  for (int i = 0; i < kSteps; ++i) {
    for (GraphTrainer* t : {&eager, &graphed}) {
      t->x.copy_(batches.x[i]);
      t->y.copy_(batches.y[i]);
      t->opt->set_lr(t->base_lr * 0.5 * (1 + std::cos(std::numbers::pi * i / kSteps)));
    }
    eager.step();
    if (i < kWarmup) {
      graphed.step();  // eager warm-up: optimizer state made, the allocator's pool filled
    } else {
      if (i == kWarmup) {
        const DeviceActivity a0 = device_activity();
        graph.capture([&] { graphed.step(); });
        CHECK((device_activity() - a0).syncs == 0);
      }
      const DeviceActivity a0 = device_activity();
      graph.replay();
      CHECK((device_activity() - a0).launches == 1);
    }
    const ExpectedSync read("the test compares the runs");
    INFO("step " << i);
    // Bits, not values: the overflowing batch's loss is NaN in both runs.
    REQUIRE(std::bit_cast<uint32_t>(graphed.loss.to_vector<float>()[0]) ==
            std::bit_cast<uint32_t>(eager.loss.to_vector<float>()[0]));
    if (i % 5 == 4 || i == kWarmup) REQUIRE(graphed.weights() == eager.weights());
  }
  const ExpectedSync read("the test reads the scalers");
  if (amp) {
    CHECK(eager.scaler->skipped_steps() >= 1);  // the overflowing batch
    CHECK(graphed.scaler->skipped_steps() == eager.scaler->skipped_steps());
    CHECK(graphed.scaler->get_scale() == eager.scaler->get_scale());
  }
  std::printf("cuda graph: a LeNet-5 %s step is %zu captured operations, one launch\n", optimizer,
              graph.size());
}
#endif

// The learning rate in device memory (Optimizer::keep_lr_on_device): set_lr inside a capture is
// refused (every replay would write it again), and on the CPU it is a host f64 the step reads
// (an optimizer that takes the rate as a host value refuses to keep it on the device:
// test_cuda_graph_rmsprop_adagrad.cpp).
TEST_CASE("cuda: CUDA graph: the learning rate in device memory, and what it refuses",
          "[cuda_graph]") {
  Tensor w = ones({3}, {.device = kCuda});
  w.set_requires_grad(true);
  nn::optim::SGD sgd({w}, {.lr = 0.5});
  sgd.keep_lr_on_device();
  CHECK(sgd.lr_tensor(0).dtype() == DType::f64);
  CHECK(sgd.lr_tensor(0).device() == kCuda);
  w.set_grad(ones({3}, {.device = kCuda}));
  cuda::Graph graph;
  graph.capture_begin();
  sgd.step();
  CHECK_THROWS_WITH(sgd.set_lr(0.25), Catch::Contains("Optimizer::set_lr") &&
                                          Catch::Contains("during a CUDA graph capture"));
  CHECK_NOTHROW(sgd.set_lr(0.5));  // unchanged: nothing to write
  graph.capture_end();
  sgd.set_lr(0.25);
  graph.replay();  // w -= 0.25 * 1
  sgd.set_lr(0.125);
  graph.replay();  // w -= 0.125 * 1
  const ExpectedSync read("the test reads the weights");
  for (float v : w.detach().to_vector<float>()) CHECK(v == 0.625f);  // exact in binary

  Tensor c = ones({2});
  c.set_requires_grad(true);
  nn::optim::AdamW adamw({c}, {.lr = 0.1});
  adamw.keep_lr_on_device();
  CHECK(adamw.lr_tensor(0).device().is_cpu());
  adamw.set_lr(0.2);
  CHECK(adamw.lr_tensor(0).item() == 0.2);
}

// The emulated NCCL inside a capture: an allreduce on a capturing stream is recorded, not run,
// and each replay runs it with the other rank's replay (closed form: 2 ranks holding 1 and 2 sum
// to 3, then 6). In deferred-streams mode a replay runs under the scheduler's lock, where the
// other rank could never arrive: refused, naming the mode.
TEST_CASE("cuda: CUDA graph: the emulated NCCL records a captured allreduce and runs it per replay",
          "[cuda_graph]") {
  const bool before = emu::set_deferred_streams(false);  // immediate mode, whatever the run's
  // seen[r]: rank r's values after the capture and after each replay, checked on this thread
  // (Catch's assertions are not thread-safe).
  std::vector<std::vector<std::vector<float>>> seen(2);
  run_nccl(2, [&](dist::NcclCommunicator& c) {
    const Device device = Device::cuda(c.device());
    Tensor t = full({5}, c.rank() + 1.0, {.device = device});
    cuda::Graph graph;
    graph.capture([&] { c.allreduce(t); });
    const ExpectedSync read("the test reads the sums");
    auto& mine = seen[static_cast<size_t>(c.rank())];
    mine.push_back(t.to_vector<float>());
    for (int replay = 0; replay < 2; ++replay) {
      graph.replay();
      mine.push_back(t.to_vector<float>());
    }
  });
  for (size_t r = 0; r < 2; ++r) {
    INFO("rank " << r);
    REQUIRE(seen[r].size() == 3);
    CHECK(seen[r][0] == std::vector<float>(5, static_cast<float>(r + 1)));  // not run at capture
    CHECK(seen[r][1] == std::vector<float>(5, 3.f));
    CHECK(seen[r][2] == std::vector<float>(5, 6.f));
  }
  emu::set_deferred_streams(true);
  std::string refusal;
  run_nccl(1, [&](dist::NcclCommunicator& c) {
    Tensor t = ones({2}, {.device = Device::cuda(c.device())});
    cuda::Graph graph;
    try {
      graph.capture([&] { c.allreduce(t); });
    } catch (const Error& e) {
      refusal = e.what();
    }
  });
  CHECK_THAT(refusal, Catch::Contains("deferred-streams mode cannot replay a captured collective"));
  emu::set_deferred_streams(before);
}

// Not under ThreadSanitizer (minutes of LeNet-5 steps on OS threads; the emulated NCCL's own
// synchronization is checked by the cuda:dist tests there).
#if !defined(__SANITIZE_THREAD__)
// DDP's bucket allreduces captured with the step: 2 ranks as threads over the emulated NCCL, each
// capturing its whole step (forward, backward with the buckets' allreduces on DDP's stream, SGD)
// after 3 eager ones and replaying it, under a per-step learning rate read from device memory.
// The emulated NCCL records a collective on a capturing stream and runs it, with the other
// ranks' replays, at every replay. Reference: the same 2-rank job run eagerly; the replays run
// the same kernels and collectives in the same order, so the weights agree bit for bit, and the
// replicas stay equal.
TEST_CASE(
    "cuda: CUDA graph: a 2-rank DDP step over the emulated NCCL, captured with its bucket "
    "allreduces, equals eager DDP bit for bit",
    "[cuda_graph]") {
#if defined(__SANITIZE_ADDRESS__)
  constexpr int kSteps = 5, kWarmup = 3;  // the capture and 2 replays (ASan: 15x a step's time)
#else
  constexpr int kSteps = 8, kWarmup = 3;
#endif
  // Immediate mode, whatever the run's: a deferred-streams replay cannot meet the other rank's.
  const bool deferred_before = emu::set_deferred_streams(false);
  auto job = [&](bool graphed) {
    std::vector<std::vector<std::vector<float>>> weights(2);
    std::vector<size_t> graph_sizes(2, 0);
    run_nccl(2, [&](dist::NcclCommunicator& c) {
      const Device device = Device::cuda(c.device());
      auto model = lenet5_replica(c);
      dist::DistributedDataParallel ddp(model, c);
      nn::optim::SGD opt(model->parameters(),
                         nn::optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 5e-4});
      if (graphed) opt.keep_lr_on_device();
      Tensor x = zeros({4, 1, 28, 28}, {.device = device});
      Tensor y = zeros({4}, {.dtype = DType::i64, .device = device});
      auto step = [&] {
        cross_entropy(ddp(x), y).backward();
        opt.step();
        opt.zero_grad();
      };
      Generator g(5 + static_cast<uint64_t>(c.rank()));  // each rank its own batches
      cuda::Graph graph;
      for (int i = 0; i < kSteps; ++i) {
        x.copy_(randn({4, 1, 28, 28}, {}, &g));
        y.copy_(randint(0, 10, {4}, {.dtype = DType::i64}, &g));
        opt.set_lr(0.05 * (1 - 0.1 * i));
        if (!graphed || i < kWarmup) {
          step();
          continue;
        }
        if (i == kWarmup) graph.capture(step);
        graph.replay();
      }
      const ExpectedSync read("the test compares the runs");
      const auto r = static_cast<size_t>(c.rank());
      for (const Tensor& p : model->parameters())
        weights[r].push_back(p.detach().to_vector<float>());
      graph_sizes[r] = graph.size();
    });
    return std::make_pair(weights, graph_sizes);
  };
  const auto [eager, eager_sizes] = job(false);
  const auto [graphed, sizes] = job(true);
  emu::set_deferred_streams(deferred_before);
  CHECK(eager[0] == eager[1]);  // DDP keeps the replicas equal
  CHECK(graphed[0] == graphed[1]);
  CHECK(graphed[0] == eager[0]);
  CHECK(sizes[0] > 0);
  CHECK(sizes[0] == sizes[1]);
  std::printf("cuda graph: a 2-rank DDP LeNet-5 step is %zu captured operations per rank\n",
              sizes[0]);
}
#endif
