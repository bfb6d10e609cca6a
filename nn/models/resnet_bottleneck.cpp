// torchvision's ImageNet ResNets with bottleneck blocks (ResNet-50 v1.5), names and initialization
// as torchvision.models.resnet50. See models.h.
#include "autograd/elementwise.h"
#include "autograd/pool.h"
#include "nn/init.h"
#include "nn/models/models.h"

namespace stoke::nn::models {

namespace {

std::shared_ptr<Conv2d> conv(int64_t in, int64_t out, int64_t kernel, int64_t stride,
                             Generator* gen) {
  const int64_t pad = kernel / 2;
  return std::make_shared<Conv2d>(
      in, out, kernel,
      Conv2dLayerOptions{
          .stride = {stride, stride}, .padding = {pad, pad}, .bias = false, .generator = gen});
}

}  // namespace

Bottleneck::Bottleneck(int64_t in_planes, int64_t planes, int64_t stride, Generator* gen) {
  const int64_t out_planes = planes * kExpansion;
  conv1 = register_module("conv1", conv(in_planes, planes, 1, 1, gen));
  bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(planes));
  conv2 = register_module("conv2", conv(planes, planes, 3, stride, gen));  // v1.5: stride here
  bn2 = register_module("bn2", std::make_shared<BatchNorm2d>(planes));
  conv3 = register_module("conv3", conv(planes, out_planes, 1, 1, gen));
  bn3 = register_module("bn3", std::make_shared<BatchNorm2d>(out_planes));
  if (stride != 1 || in_planes != out_planes) {
    downsample =
        register_module("downsample", std::make_shared<Sequential>(std::initializer_list<ModulePtr>{
                                          conv(in_planes, out_planes, 1, stride, gen),
                                          std::make_shared<BatchNorm2d>(out_planes)}));
  }
}

Tensor Bottleneck::forward(const Tensor& x) {
  Tensor out = norm_relu(*bn1, (*conv1)(x));
  out = norm_relu(*bn2, (*conv2)(out));
  out = (*bn3)((*conv3)(out));
  return relu(out + (downsample ? (*downsample)(x) : x));
}

BottleneckResNet::BottleneckResNet(const std::vector<int64_t>& blocks, ModelOptions o) {
  STOKE_CHECK(blocks.size() == 4, "BottleneckResNet", "expected 4 stages, got ", blocks.size());
  conv1 = register_module("conv1", conv(o.in_channels, 64, 7, 2, o.generator));
  bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(64));
  maxpool =
      register_module("maxpool", std::make_shared<MaxPool2d>(ops::Pool2dOptions{
                                     .kernel_size = {3, 3}, .stride = {2, 2}, .padding = {1, 1}}));
  int64_t in = 64;
  for (size_t s = 0; s < blocks.size(); ++s) {
    const int64_t planes = int64_t{64} << s;
    auto layer = std::make_shared<Sequential>();
    for (int64_t b = 0; b < blocks[s]; ++b) {
      const int64_t stride = (s > 0 && b == 0) ? 2 : 1;
      layer->push_back(std::make_shared<Bottleneck>(in, planes, stride, o.generator));
      in = planes * Bottleneck::kExpansion;
    }
    layers.push_back(register_module("layer" + std::to_string(s + 1), layer));
  }
  fc = register_module(
      "fc", std::make_shared<Linear>(in, o.num_classes, LinearOptions{.generator = o.generator}));
  // torchvision's initialization: convolutions N(0, 2 / fan_out); batch norms ones and zeros (as
  // constructed); the linear layer keeps torch's default (Linear's own).
  for_each_module(*this, [&](Module& m) {
    if (auto* c = dynamic_cast<Conv2d*>(&m)) init::kaiming_normal_fan_out_(c->weight, o.generator);
  });
}

Tensor BottleneckResNet::forward(const Tensor& x) {
  Tensor h = (*maxpool)(norm_relu(*bn1, (*conv1)(x)));
  for (auto& layer : layers) h = (*layer)(h);
  h = adaptive_avg_pool2d(h, {1, 1}).flatten(1);
  return (*fc)(h);
}

}  // namespace stoke::nn::models
