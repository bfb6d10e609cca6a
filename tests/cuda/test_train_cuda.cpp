// Training on "cuda" (emulated here) end to end, as stoke-train does it: a model moved with
// Module::to, u8 NHWC batches copied to the device and normalized there, forward, cross entropy,
// backward, optimizer steps, BN running statistics, a checkpoint round trip, and the same losses
// and weights as the same steps on the CPU.
#include <catch2/catch.hpp>

#include "autograd/loss.h"
#include "cuda/emu/emu.h"
#include "cuda/runtime/device.h"
#include "cuda/runtime/pinned.h"
#include "cuda/runtime/stream.h"
#include "data/loader.h"
#include "data/normalize.h"
#include "nn/models/models.h"
#include "nn/optim/optimizer.h"
#include "ops_cuda_util.h"

using namespace stoke;
using namespace stoke::test;

namespace {

// A small CNN with every layer kind the reference models use.
struct SmallNet : nn::Module {
  std::shared_ptr<nn::Conv2d> conv;
  std::shared_ptr<nn::BatchNorm> bn;
  std::shared_ptr<nn::Linear> fc;
  explicit SmallNet(Generator* g) {
    conv = register_module(
        "conv", std::make_shared<nn::Conv2d>(
                    1, 4, 3,
                    // No bias before batch norm (as ResNet): its gradient is
                    // zero up to rounding, which Adam would amplify.
                    nn::Conv2dLayerOptions{.padding = {1, 1}, .bias = false, .generator = g}));
    bn = register_module("bn", std::make_shared<nn::BatchNorm>(4));
    fc = register_module(
        "fc", std::make_shared<nn::Linear>(4 * 4 * 4, 10, nn::LinearOptions{.generator = g}));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = relu(bn->forward(conv->forward(x)));
    h = max_pool2d(h, {.kernel_size = {2, 2}});
    h = dropout(h, 0.2, is_training());
    return fc->forward(h.flatten(1));
  }
};

struct Batch {
  Tensor images, labels;  // u8 (N, 8, 8, 1), i64 (N)
};

std::vector<Batch> batches() {
  std::vector<Batch> out;
  Generator g(7);
  for (int i = 0; i < 3; ++i)
    out.push_back({randint(0, 256, {6, 8, 8, 1}, {.dtype = DType::u8}, &g),
                   randint(0, 10, {6}, {.dtype = DType::i64}, &g)});
  return out;
}

// Runs `steps` training steps of `model` on `device`; returns the losses.
template <class MakeOpt>
std::vector<double> train(nn::Module& model, Device device, MakeOpt make_opt) {
  model.to(device);
  auto opt = make_opt(model.parameters());
  std::vector<double> losses;
  manual_seed(3);  // the dropout masks: the same Philox draws on both devices
  for (const Batch& b : batches()) {
    const Tensor x = data::normalize(b.images.to(device, true), {.mean = {0.5f}, .std = {0.25f}});
    const Tensor y = b.labels.to(device, true);
    Tensor loss = cross_entropy(model(x), y, {.label_smoothing = 0.1});
    opt->zero_grad();
    loss.backward();
    nn::optim::clip_grad_norm_(model.parameters(), 5.0);
    opt->step();
    losses.push_back(loss.item());
  }
  return losses;
}

void check_same_state(nn::Module& on_cuda, nn::Module& on_cpu, double tol, Device device = kCuda) {
  const auto a = on_cuda.state_dict(), b = on_cpu.state_dict();
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO(a[i].first);
    CHECK(a[i].second.device() == device);
    // The memory itself is on that device (the emulator records the device of each cudaMalloc).
    CHECK(emu::device_of(a[i].second.data_ptr()) == device.index);
    CHECK(max_diff(a[i].second, b[i].second) <= tol);
  }
}

// The tolerance of three training steps on the two devices (the losses relative, the state
// absolute): the kernels sum in other orders, each reduction (at most K = 384 terms: the conv
// weight gradient and batch norm's statistics, over 6 x 8 x 8) within K u = 2.3e-5 of its terms'
// absolute sum at worst (u = 2^-24); the gradient norm clip keeps the steps below 5 lr, and three
// steps add three such errors, under 1e-4 for the O(1) losses and weights here.
constexpr double kTrainTol = 1e-4;

}  // namespace

TEST_CASE("training on cuda: SGD steps of a CNN match the CPU", "[train_cuda]") {
  Generator g1(11), g2(11);
  SmallNet cpu_net(&g1), cuda_net(&g2);
  auto sgd = [](std::vector<Tensor> p) {
    return std::make_unique<nn::optim::SGD>(
        std::move(p),
        nn::optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 5e-4, .nesterov = true});
  };
  const auto want = train(cpu_net, Device::cpu(), sgd);
  const auto got = train(cuda_net, kCuda, sgd);
  for (size_t i = 0; i < want.size(); ++i) CHECK(got[i] == Approx(want[i]).epsilon(kTrainTol));
  check_same_state(cuda_net, cpu_net, kTrainTol);  // weights, BN statistics, num_batches_tracked
  // Evaluation mode on the device uses the running statistics, as on the CPU.
  cpu_net.eval();
  cuda_net.eval();
  const Tensor x = rand_cpu({2, 1, 8, 8}, 5);
  CHECK(max_diff(cuda_net(x.to(kCuda)), cpu_net(x)) < kTrainTol);
}

TEST_CASE("training on cuda:1: every tensor and launch is on device 1, results match the CPU",
          "[train_cuda]") {
  // The emulator has two devices; the model, batches, gradients and optimizer state all go to
  // cuda:1 although cuda:0 is current at the start (each op makes its tensors' device current).
  cuda::set_device(0);
  const Device second = Device::cuda(1);
  Generator g1(11), g2(11);
  SmallNet cpu_net(&g1), cuda_net(&g2);
  auto sgd = [](std::vector<Tensor> p) {
    return std::make_unique<nn::optim::SGD>(std::move(p),
                                            nn::optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
  };
  const auto want = train(cpu_net, Device::cpu(), sgd);
  const auto got = train(cuda_net, second, sgd);
  for (size_t i = 0; i < want.size(); ++i) CHECK(got[i] == Approx(want[i]).epsilon(kTrainTol));
  check_same_state(cuda_net, cpu_net, kTrainTol, second);
  CHECK(emu::stats().last_launch_device == 1);
  for (const Tensor& p : cuda_net.parameters()) CHECK(emu::device_of(p.grad().data_ptr()) == 1);
  cuda::set_device(0);
}

TEST_CASE("training on cuda: AdamW steps match the CPU and the state round-trips", "[train_cuda]") {
  Generator g1(12), g2(12);
  SmallNet cpu_net(&g1), cuda_net(&g2);
  auto adamw = [](std::vector<Tensor> p) {
    return std::make_unique<nn::optim::AdamW>(
        std::move(p), nn::optim::AdamWOptions{.lr = 1e-2, .weight_decay = 1e-2});
  };
  const auto want = train(cpu_net, Device::cpu(), adamw);
  const auto got = train(cuda_net, kCuda, adamw);
  for (size_t i = 0; i < want.size(); ++i) CHECK(got[i] == Approx(want[i]).epsilon(kTrainTol));
  check_same_state(cuda_net, cpu_net, kTrainTol);
  // A CPU state dict (as read from a checkpoint) loads into the cuda model and optimizer.
  Generator g3(99);
  SmallNet fresh(&g3);
  fresh.to(kCuda);
  nn::NamedTensors cpu_state;
  for (auto& [k, t] : cpu_net.state_dict()) cpu_state.emplace_back(k, t.to(Device::cpu()));
  fresh.load_state_dict(cpu_state);
  check_same_state(fresh, cpu_net, 0);
  nn::optim::AdamW opt(fresh.parameters(), {.lr = 1e-2});
  nn::optim::AdamW cpu_opt(cpu_net.parameters(), {.lr = 1e-2});
  for (auto& p : cpu_net.parameters()) p.set_grad(full_like(p, 0.5));
  cpu_opt.step();
  opt.load_state_dict(cpu_opt.state_dict());
  for (const auto& [k, t] : opt.state_dict())
    if (t.dim() > 0) CHECK(t.device() == kCuda);
}

TEST_CASE("training on cuda: normalize runs on the device and matches the CPU", "[train_cuda]") {
  Generator g(1);
  const Tensor images = randint(0, 256, {3, 5, 7, 3}, {.dtype = DType::u8}, &g);
  const data::NormalizeOptions o{.mean = {0.4f, 0.5f, 0.6f}, .std = {0.2f, 0.25f, 0.3f}};
  const Tensor d = data::normalize(images.to(kCuda), o);
  CHECK(d.device() == kCuda);
  CHECK(d.shape() == Shape{3, 3, 5, 7});
  // Bit for bit: the kernel evaluates the CPU's formula, fl(fl(x * scale) + bias), with the same
  // scale and bias (cuda/kernels/normalize.cu, ops/cpu/normalize.cpp), compiled here by the host
  // compiler with FMA contraction off (on a GPU, nvcc's --fmad could fuse it: 1 ulp).
  CHECK(max_diff(d, data::normalize(images, o)) == 0);
  CHECK_THROWS_WITH(data::normalize_into(images.to(kCuda), empty({3, 3, 5, 7}), o),
                    Catch::Contains("same device"));
}

TEST_CASE("training on cuda: crop_flip_normalize augments on the device as the CPU does",
          "[train_cuda]") {
  Generator g(2);
  const Tensor images = randint(0, 256, {8, 6, 7, 3}, {.dtype = DType::u8}, &g);
  Tensor idx = empty({8}, {.dtype = DType::i64});
  for (int64_t i = 0; i < 8; ++i) idx.data<int64_t>()[i] = 5 * i;
  const data::CropFlipOptions co{.height = 5, .width = 6, .padding = 2};
  // Host-drawn crops in pinned memory travel with the batch asynchronously.
  Tensor crops = Tensor::from_storage(cuda::pinned_storage(8 * 3 * sizeof(int32_t)), {8, 3}, {3, 1},
                                      0, DType::i32);
  data::draw_crops_into(crops, idx, 6, 7, co, 3, 1);
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    const data::NormalizeOptions o{
        .mean = {0.4f, 0.5f, 0.6f}, .std = {0.2f, 0.25f, 0.3f}, .dtype = dt};
    const Tensor d = data::crop_flip_normalize(images.to(kCuda), crops, o, 5, 6);
    CHECK(d.device() == kCuda);
    CHECK(d.dtype() == dt);
    CHECK(d.shape() == Shape{8, 3, 5, 6});
    const Tensor want = data::crop_flip_normalize(images, crops, o, 5, 6);
    // Bit for bit, as normalize above; f16/bf16 round that f32 value once on both.
    CHECK(max_diff(d.to(DType::f32), want.to(DType::f32)) == 0);
  }
}

namespace {

// Sample i: every pixel i % 251, label i % 10.
class CountingDataset final : public data::Dataset {
 public:
  int64_t size() const override { return 40; }
  void get(int64_t index, data::Example& out) const override {
    out.height = 4;
    out.width = 3;
    out.channels = 1;
    out.pixels.assign(12, static_cast<uint8_t>(index % 251));
    out.label = index % 10;
  }
  int64_t num_classes() const override { return 10; }
  std::string describe(int64_t index) const override { return "sample " + std::to_string(index); }
};

}  // namespace

TEST_CASE("training on cuda: the loader fills pinned batches that upload asynchronously",
          "[train_cuda]") {
  auto& pinned = cuda::pinned_allocator();
  const auto before = pinned.pinned_stats();
  data::DataLoader loader(
      std::make_shared<CountingDataset>(),
      {.batch_size = 8, .shuffle = false, .workers = 2, .allocator = [](size_t n) {
         return cuda::pinned_storage(n);
       }});
  int64_t seen = 0;
  for (int epoch = 0; epoch < 2; ++epoch) {
    loader.set_epoch(epoch);
    while (auto batch = loader.next()) {
      // Images and labels are views into one pinned batch buffer.
      CHECK(pinned.pinned_block_containing(batch->images.data_ptr()) != nullptr);
      CHECK(pinned.pinned_block_containing(batch->labels.data_ptr()) ==
            pinned.pinned_block_containing(batch->images.data_ptr()));
      const Tensor images = batch->images.to(kCuda, /*non_blocking=*/true);
      const Tensor labels = batch->labels.to(kCuda, /*non_blocking=*/true);
      CHECK(max_diff(images, batch->images) == 0);
      CHECK(max_diff(labels, batch->labels) == 0);
      seen += batch->labels.numel();
    }
  }
  CHECK(seen == 80);
  const auto after = pinned.pinned_stats();
  CHECK(after.host_alloc_calls > before.host_alloc_calls);
  // Blocks are reused across batches: far fewer host allocations than batch buffers handed out.
  CHECK(after.host_alloc_calls - before.host_alloc_calls < 20);
}

TEST_CASE("training on cuda: a pinned batch is not refilled before its upload has run",
          "[train_cuda]") {
  // Streams deferred: the asynchronous uploads run only at the final read-back, after the loader
  // has built every later batch. A batch buffer handed back to the loader's workers as soon as
  // the batch's tensors are dropped would be refilled with later samples before its copy ran.
  const bool was = emu::set_deferred_streams(true);
  cuda::Stream stream;  // a non-blocking stream, as a training loop would use for uploads
  const cuda::StreamGuard current(stream);
  data::DataLoader loader(
      std::make_shared<CountingDataset>(),
      {.batch_size = 4, .shuffle = false, .workers = 2, .prefetch = 2, .allocator = [](size_t n) {
         return cuda::pinned_storage(n);
       }});
  loader.set_epoch(0);
  std::vector<Tensor> images, labels;
  while (auto batch = loader.next()) {
    images.push_back(batch->images.to(kCuda, /*non_blocking=*/true));
    labels.push_back(batch->labels.to(kCuda, /*non_blocking=*/true));
  }  // each batch's host tensors are dropped here, before any upload ran
  REQUIRE(images.size() == 10);
  for (size_t b = 0; b < images.size(); ++b) {
    INFO("batch " << b);
    const auto px = images[b].to(Device::cpu()).to_vector<uint8_t>();
    const auto lb = labels[b].to(Device::cpu()).to_vector<int64_t>();
    for (size_t s = 0; s < 4; ++s) {
      const int64_t sample = static_cast<int64_t>(b * 4 + s);
      REQUIRE(lb[s] == sample % 10);
      REQUIRE(px[s * 12] == sample % 251);
    }
  }
  emu::set_deferred_streams(was);
}
