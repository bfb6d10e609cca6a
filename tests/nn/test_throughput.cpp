#include <catch2/catch.hpp>

#include "core/profiler.h"
#include "nn/throughput.h"
#include "stoke/stoke.h"

using namespace stoke;

TEST_CASE("throughput: training_flops counts a step's convolution and linear FLOPs",
          "[nn][throughput]") {
  // Closed form: a conv's forward is 2 N OH OW (C_out C_in kh kw) FLOPs; its backward that again
  // for each of the input and weight gradients it computes (the first conv's input is the data:
  // no input gradient); a linear layer's 2 N in out likewise.
  Generator g(3);
  nn::Sequential model(
      {std::make_shared<nn::Conv2d>(
           2, 4, 3, nn::Conv2dLayerOptions{.padding = {1, 1}, .bias = false, .generator = &g}),
       std::make_shared<nn::Conv2d>(
           4, 3, 3, nn::Conv2dLayerOptions{.padding = {1, 1}, .bias = false, .generator = &g}),
       std::make_shared<nn::Flatten>(),
       std::make_shared<nn::Linear>(3 * 36, 5, nn::LinearOptions{.generator = &g})});
  const Tensor x = randn({2, 2, 6, 6}, {}, &g);
  const double conv1 = 2.0 * 2 * 36 * (4 * 2 * 9), conv2 = 2.0 * 2 * 36 * (3 * 4 * 9),
               fc = 2.0 * 2 * 108 * 5;
  const double want = (conv1 + conv2 + fc) + (conv1 + 2 * conv2 + 2 * fc);
  for (int rep = 0; rep < 2; ++rep) {  // the second step on the same (reused) model
    const double got = nn::training_flops([&] { sum(model.forward(x)).backward(); });
    CHECK(got == want);  // integers below 2^53: exact
  }
  CHECK(!profiler::enabled());
  profiler::start();
  CHECK_THROWS_WITH(nn::training_flops([] {}), Catch::Contains("already recording"));
  profiler::stop();
}

TEST_CASE("throughput: measured_matmul_gflops gives a positive rate", "[nn][throughput]") {
  CHECK(nn::measured_matmul_gflops(Device::cpu(), 64) > 0);
}
