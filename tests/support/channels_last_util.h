// Shared by the channels_last tests on the CPU (tests/nn/test_channels_last.cpp) and on emulated
// cuda (tests/cuda/test_channels_last_cuda.cpp): the ops a CNN of the zoo runs, each given the same
// values once in NCHW and once in channels_last (NHWC strides), forward and backward.
#pragma once

#include <catch2/catch.hpp>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "nn/models/models.h"
#include "nn/optim/optimizer.h"
#include "stoke/stoke.h"

namespace stoke::test {

// An op of the sweep: its output from a 4-d input x (2, 4, 6, 6), parameters made from `seed`.
// `keeps`: the output is 4-d and keeps a channels_last input's layout, as in torch
// (ops/memory_format.h), and so does the input's gradient.
struct ChannelsLastCase {
  std::string name;
  std::function<Tensor(const Tensor& x, Device device)> run;
  bool keeps = true;
};

inline Tensor cl_param(const Shape& shape, uint64_t seed, Device device) {
  Generator g(seed);
  return (randn(shape, {}, &g) * 0.3).to(device);
}

inline std::vector<ChannelsLastCase> channels_last_cases() {
  auto nchw = [](const Tensor& x, Device d) { return cl_param(x.shape(), 9, d); };
  return {
      {"conv2d 3x3",
       [](const Tensor& x, Device d) {
         return conv2d(x, cl_param({5, 4, 3, 3}, 1, d), cl_param({5}, 2, d), {.padding = {1, 1}});
       }},
      {"conv2d 1x1 stride 2",
       [](const Tensor& x, Device d) {
         return conv2d(x, cl_param({3, 4, 1, 1}, 3, d), Tensor(), {.stride = {2, 2}});
       }},
      {"conv2d depthwise",
       [](const Tensor& x, Device d) {
         return conv2d(x, cl_param({4, 1, 3, 3}, 4, d), Tensor(), {.padding = {1, 1}, .groups = 4});
       }},
      {"batch_norm (training, fused ReLU)",
       [](const Tensor& x, Device d) {
         return batch_norm(x, zeros({4}, {.device = d}), ones({4}, {.device = d}),
                           cl_param({4}, 5, d) + 1, cl_param({4}, 6, d),
                           {.training = true, .relu = true});
       }},
      {"batch_norm (eval)",
       [](const Tensor& x, Device d) {
         return batch_norm(x, cl_param({4}, 7, d), abs(cl_param({4}, 8, d)) + 0.5,
                           cl_param({4}, 5, d) + 1, cl_param({4}, 6, d), {.training = false});
       }},
      {"group_norm",
       [](const Tensor& x, Device d) {
         return group_norm(x, 2, cl_param({4}, 5, d) + 1, cl_param({4}, 6, d));
       }},
      {"max_pool2d",
       [](const Tensor& x, Device) {
         return max_pool2d(x, {.kernel_size = {3, 3}, .stride = {2, 2}, .padding = {1, 1}});
       }},
      {"avg_pool2d",
       [](const Tensor& x, Device) {
         return avg_pool2d(x, {.kernel_size = {2, 2}});
       }},
      {"adaptive_avg_pool2d",
       [](const Tensor& x, Device) {
         return adaptive_avg_pool2d(x, {1, 1});
       }},
      {"relu", [](const Tensor& x, Device) { return relu(x); }},
      {"silu", [](const Tensor& x, Device) { return silu(x); }},
      {"hardswish", [](const Tensor& x, Device) { return hardswish(x); }},
      {"add (with an NCHW tensor)", [=](const Tensor& x, Device d) { return add(x, nchw(x, d)); }},
      {"add (itself)", [](const Tensor& x, Device) { return add(x, x); }},
      {"mul (a per-channel (N, C, 1, 1) scale, squeeze-excitation)",
       [](const Tensor& x, Device d) {
         return mul(x, sigmoid(cl_param({2, 4, 1, 1}, 10, d)));
       }},
      {"mean over H and W",
       [](const Tensor& x, Device) {
         return mean(x, {2, 3});
       },
       false},
      {"flatten then linear",
       [](const Tensor& x, Device d) {
         return linear(x.flatten(1), cl_param({3, 4 * 6 * 6}, 11, d), cl_param({3}, 12, d));
       },
       false},
      // cat keeps channels_last when every input has it, as torch's cat does (torch 1.13's
      // torch.cat: channels_last for two channels_last inputs, contiguous with an NCHW one).
      {"cat along channels (both channels_last)",
       [](const Tensor& x, Device) {
         return cat({x, relu(x)}, 1);
       }},
      {"cat along the batch (both channels_last)",
       [](const Tensor& x, Device) {
         return cat({x, x}, 0);
       }},
      // Contiguous outputs, as torch 1.13 gives them: cat with an NCHW input, and softmax (over
      // any dim; torch's CPU softmax returns contiguous for a channels_last input).
      {"cat along channels (with an NCHW tensor)",
       [=](const Tensor& x, Device d) {
         return cat({x, nchw(x, d)}, 1);
       },
       false},
      {"softmax over channels", [](const Tensor& x, Device) { return softmax(x, 1); }, false},
  };
}

// Every case with x in NCHW and in channels_last: the outputs and the input gradients equal bit
// for bit. By construction: an op either copies its input to NCHW first or reads each element at
// its logical index, so both runs do the same operations in the same order (a kernel that read
// the raw buffer as NCHW, or reduced in memory order, would differ). An op that gains an NHWC
// kernel of its own is a second code path: its row then needs a derived bound, not equality.
inline void check_channels_last_equals_nchw(Device device) {
  Generator g(1);
  const Tensor base = randn({2, 4, 6, 6}, {}, &g).to(device);
  const Tensor nhwc = base.contiguous(MemoryFormat::channels_last);
  REQUIRE(nhwc.is_contiguous(MemoryFormat::channels_last));
  REQUIRE_FALSE(nhwc.is_contiguous());
  REQUIRE(nhwc.suggest_memory_format() == MemoryFormat::channels_last);
  REQUIRE(nhwc.strides() == Shape{144, 1, 24, 4});
  for (const ChannelsLastCase& c : channels_last_cases()) {
    INFO(c.name << " on " << device);
    for (int rerun = 0; rerun < 2; ++rerun) {  // the second on reused (cached) memory
      Tensor a = base.clone(), b = nhwc.clone().contiguous(MemoryFormat::channels_last);
      if (rerun == 1) b = base.contiguous(MemoryFormat::channels_last);
      REQUIRE(b.is_contiguous(MemoryFormat::channels_last));
      a.set_requires_grad(true);
      b.set_requires_grad(true);
      const Tensor ya = c.run(a, device), yb = c.run(b, device);
      REQUIRE(ya.shape() == yb.shape());
      CHECK(ya.suggest_memory_format() == MemoryFormat::contiguous);
      if (c.keeps) CHECK(yb.suggest_memory_format() == MemoryFormat::channels_last);
      CHECK(ya.to(Device::cpu()).contiguous().to_vector<float>() ==
            yb.to(Device::cpu()).contiguous().to_vector<float>());
      // The output gradient in each run's output layout (as a following layer would give it).
      const Tensor gw = cl_param(ya.shape(), 13, device);
      sum(mul(ya, gw)).backward();
      sum(mul(yb, c.keeps ? gw.contiguous(MemoryFormat::channels_last) : gw)).backward();
      REQUIRE(a.grad().defined());
      REQUIRE(b.grad().defined());
      if (c.keeps) CHECK(b.grad().suggest_memory_format() == MemoryFormat::channels_last);
      CHECK(a.grad().to(Device::cpu()).contiguous().to_vector<float>() ==
            b.grad().to(Device::cpu()).contiguous().to_vector<float>());
    }
  }
}

// Which of a model's layers gave a 4-d output in NCHW: every module's forward hook notes the
// names of those whose output is 4-d and not channels_last.
inline void watch_layouts(nn::Module& m, const std::string& prefix,
                          const std::shared_ptr<std::vector<std::string>>& nchw) {
  m.register_forward_hook([name = prefix, nchw](nn::Module&, const Tensor&, const Tensor& y) {
    if (y.dim() == 4 && y.suggest_memory_format() != MemoryFormat::channels_last)
      nchw->push_back(name.empty() ? "(the model)" : name);
    return Tensor();
  });
  for (auto& [child, module] : m.named_children())
    watch_layouts(*module, prefix.empty() ? child : prefix + "." + child, nchw);
}

// A zoo model trained `steps` SGD-momentum steps from one initialization on one batch sequence,
// once on NCHW images and once on channels_last ones: every layer's 4-d output is channels_last in
// the second run, and the losses and parameters after every step equal the first run's bit for
// bit (and batch norm's running statistics). By construction, not by tolerance: the layers that
// keep channels_last either run the NCHW kernel on an NCHW copy and copy the result back (conv,
// norms, pooling) or apply the same operations to each element in another memory order (the
// elementwise maps), and the parameters and their gradients stay NCHW.
// With `amp`, each forward runs under autocast in that dtype (its casts keep the layout).
inline void check_model_channels_last(const std::string& model, int64_t in_channels, int64_t size,
                                      Device device, int steps,
                                      std::optional<DType> amp = std::nullopt) {
  std::vector<std::vector<float>> params[2];
  std::vector<float> losses[2];
  for (int run = 0; run < 2; ++run) {
    const MemoryFormat format = run == 0 ? MemoryFormat::contiguous : MemoryFormat::channels_last;
    Generator init(3);
    auto m = nn::models::make_model(
        model,
        {.in_channels = in_channels, .num_classes = 10, .input_size = size, .generator = &init});
    m->to(device);
    auto nchw = std::make_shared<std::vector<std::string>>();
    if (run == 1) watch_layouts(*m, "", nchw);
    nn::optim::SGD opt(m->parameters(), {.lr = 0.05, .momentum = 0.9});
    Generator data(11);
    for (int s = 0; s < steps; ++s) {
      const Tensor x = randn({4, in_channels, size, size}, {}, &data).to(device).contiguous(format);
      const Tensor y = randint(0, 10, {4}, {.dtype = DType::i64}, &data).to(device);
      opt.zero_grad();
      Tensor loss;
      {
        std::optional<autocast> region;
        if (amp) region.emplace(device.type, AutocastOptions{.dtype = amp});
        loss = cross_entropy((*m)(x), y);
      }
      loss.backward();
      opt.step();
      losses[run].push_back(loss.item<float>());
    }
    for (const auto& [name, t] : m->state_dict())  // parameters and batch norm's statistics
      if (is_floating(t.dtype()))
        params[run].push_back(t.to(Device::cpu()).to(DType::f32).contiguous().to_vector<float>());
    INFO(model << " on " << device << ": layers with an NCHW output: " << nchw->size());
    for (const std::string& n : *nchw) INFO(n);
    CHECK(nchw->empty());
    if (!nchw->empty()) FAIL_CHECK("first NCHW output: " << nchw->front());
  }
  INFO(model << " on " << device);
  CHECK(losses[0] == losses[1]);
  REQUIRE(params[0].size() == params[1].size());
  for (size_t i = 0; i < params[0].size(); ++i) {
    INFO("state_dict entry " << i);
    CHECK(params[0][i] == params[1][i]);
  }
}

}  // namespace stoke::test
