// Shared by the channels_last tests on the CPU (tests/nn/test_channels_last.cpp) and on emulated
// cuda (tests/cuda/test_channels_last_cuda.cpp): the ops a CNN of the zoo runs, each given the same
// values once in NCHW and once in channels_last (NHWC strides), forward and backward.
#pragma once

#include <catch2/catch.hpp>
#include <functional>
#include <string>
#include <vector>

#include "stoke/stoke.h"

namespace stoke::test {

// An op of the sweep: its output from a 4-d input x (2, 4, 6, 6), parameters made from `seed`.
struct ChannelsLastCase {
  std::string name;
  std::function<Tensor(const Tensor& x, Device device)> run;
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
       }},
      {"flatten then linear",
       [](const Tensor& x, Device d) {
         return linear(x.flatten(1), cl_param({3, 4 * 6 * 6}, 11, d), cl_param({3}, 12, d));
       }},
      {"cat along channels",
       [=](const Tensor& x, Device d) {
         return cat({x, nchw(x, d)}, 1);
       }},
      {"softmax over channels", [](const Tensor& x, Device) { return softmax(x, 1); }},
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
      CHECK(ya.to(Device::cpu()).contiguous().to_vector<float>() ==
            yb.to(Device::cpu()).contiguous().to_vector<float>());
      const Tensor gw = cl_param(ya.shape(), 13, device);
      sum(mul(ya, gw)).backward();
      sum(mul(yb, gw)).backward();
      REQUIRE(a.grad().defined());
      REQUIRE(b.grad().defined());
      CHECK(a.grad().to(Device::cpu()).contiguous().to_vector<float>() ==
            b.grad().to(Device::cpu()).contiguous().to_vector<float>());
    }
  }
}

}  // namespace stoke::test
