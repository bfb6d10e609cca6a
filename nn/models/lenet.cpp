#include "autograd/elementwise.h"
#include "autograd/pool.h"
#include "nn/models/models.h"

namespace stoke::nn::models {

LeNet5::LeNet5(ModelOptions o) {
  STOKE_CHECK(o.input_size == 28 || o.input_size == 32, "LeNet5",
              "expected 28x28 or 32x32 inputs, got input_size ", o.input_size);
  const int64_t pad = o.input_size == 28 ? 2 : 0;
  conv1 = register_module("conv1",
                          std::make_shared<Conv2d>(
                              o.in_channels, 6, 5,
                              Conv2dLayerOptions{.padding = {pad, pad}, .generator = o.generator}));
  conv2 = register_module(
      "conv2", std::make_shared<Conv2d>(6, 16, 5, Conv2dLayerOptions{.generator = o.generator}));
  fc1 = register_module(
      "fc1", std::make_shared<Linear>(16 * 5 * 5, 120, LinearOptions{.generator = o.generator}));
  fc2 = register_module("fc2",
                        std::make_shared<Linear>(120, 84, LinearOptions{.generator = o.generator}));
  fc3 = register_module(
      "fc3", std::make_shared<Linear>(84, o.num_classes, LinearOptions{.generator = o.generator}));
}

Tensor LeNet5::forward(const Tensor& x) {
  const ops::Pool2dOptions pool{.kernel_size = {2, 2}};
  Tensor h = max_pool2d(relu((*conv1)(x)), pool);
  h = max_pool2d(relu((*conv2)(h)), pool);
  h = h.flatten(1);
  h = relu((*fc1)(h));
  h = relu((*fc2)(h));
  return (*fc3)(h);
}

}  // namespace stoke::nn::models
