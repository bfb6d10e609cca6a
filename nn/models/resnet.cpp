#include <algorithm>

#include "autograd/elementwise.h"
#include "autograd/pool.h"
#include "nn/models/models.h"

namespace stoke::nn::models {

namespace {

std::shared_ptr<Conv2d> conv3x3(int64_t in, int64_t out, int64_t stride, Generator* gen) {
  return std::make_shared<Conv2d>(
      in, out, 3,
      Conv2dLayerOptions{
          .stride = {stride, stride}, .padding = {1, 1}, .bias = false, .generator = gen});
}

}  // namespace

ModulePtr make_resnet_norm(int64_t channels, ResNetNorm norm) {
  if (!norm.group_norm) return std::make_shared<BatchNorm2d>(channels);
  return std::make_shared<GroupNorm>(std::min<int64_t>(32, std::max<int64_t>(1, channels / 2)),
                                     channels);
}

BasicBlock::BasicBlock(int64_t in_planes, int64_t planes, int64_t stride, Generator* gen,
                       ResNetNorm norm) {
  conv1 = register_module("conv1", conv3x3(in_planes, planes, stride, gen));
  bn1 = register_module("bn1", make_resnet_norm(planes, norm));
  conv2 = register_module("conv2", conv3x3(planes, planes, 1, gen));
  bn2 = register_module("bn2", make_resnet_norm(planes, norm));
  if (stride != 1 || in_planes != planes) {
    downsample = register_module(
        "downsample",
        std::make_shared<Sequential>(std::initializer_list<ModulePtr>{
            std::make_shared<Conv2d>(
                in_planes, planes, 1,
                Conv2dLayerOptions{.stride = {stride, stride}, .bias = false, .generator = gen}),
            make_resnet_norm(planes, norm)}));
  }
}

Tensor BasicBlock::forward(const Tensor& x) {
  Tensor out = norm_relu(*bn1, (*conv1)(x));  // fused when bn1 is a BatchNorm2d
  out = (*bn2)((*conv2)(out));
  return relu(out + (downsample ? (*downsample)(x) : x));
}

ResNet::ResNet(const std::vector<int64_t>& blocks, const std::vector<int64_t>& widths,
               ModelOptions o, ResNetNorm norm, ResNetStem stem) {
  STOKE_CHECK(blocks.size() == widths.size() && !blocks.empty(), "ResNet",
              "expected one width per stage, got ", blocks.size(), " stages and ", widths.size(),
              " widths");
  conv1 = register_module("conv1", conv3x3(o.in_channels, widths[0], 1, o.generator));
  bn1 = register_module("bn1", make_resnet_norm(widths[0], norm));
  if (stem.max_pool) maxpool = register_module("maxpool", std::make_shared<MaxPool2d>(2));
  int64_t in = widths[0];
  for (size_t s = 0; s < blocks.size(); ++s) {
    auto layer = std::make_shared<Sequential>();
    for (int64_t b = 0; b < blocks[s]; ++b) {
      const int64_t stride = (s > 0 && b == 0) ? 2 : 1;
      layer->push_back(std::make_shared<BasicBlock>(in, widths[s], stride, o.generator, norm));
      in = widths[s];
    }
    layers.push_back(register_module("layer" + std::to_string(s + 1), layer));
  }
  fc = register_module(
      "fc", std::make_shared<Linear>(in, o.num_classes, LinearOptions{.generator = o.generator}));
}

Tensor ResNet::forward(const Tensor& x) {
  Tensor h = norm_relu(*bn1, (*conv1)(x));
  if (maxpool) h = (*maxpool)(h);
  for (auto& layer : layers) h = (*layer)(h);
  h = adaptive_avg_pool2d(h, {1, 1}).flatten(1);
  return (*fc)(h);
}

namespace {

std::shared_ptr<Sequential> conv_bn(int64_t in, int64_t out, Generator* gen, bool pool = false) {
  auto s = std::make_shared<Sequential>(std::initializer_list<ModulePtr>{
      std::make_shared<Conv2d>(
          in, out, 3, Conv2dLayerOptions{.padding = {1, 1}, .bias = false, .generator = gen}),
      std::make_shared<BatchNorm2d>(out), std::make_shared<ReLU>()});
  if (pool) s->push_back(std::make_shared<MaxPool2d>(2));
  return s;
}

}  // namespace

ResNet9::ResNet9(ModelOptions o) {
  prep = register_module("prep", conv_bn(o.in_channels, 64, o.generator));
  layer1 = register_module("layer1", conv_bn(64, 128, o.generator, true));
  res1 =
      register_module("res1", std::make_shared<Sequential>(std::initializer_list<ModulePtr>{
                                  conv_bn(128, 128, o.generator), conv_bn(128, 128, o.generator)}));
  layer2 = register_module("layer2", conv_bn(128, 256, o.generator, true));
  layer3 = register_module("layer3", conv_bn(256, 512, o.generator, true));
  res3 =
      register_module("res3", std::make_shared<Sequential>(std::initializer_list<ModulePtr>{
                                  conv_bn(512, 512, o.generator), conv_bn(512, 512, o.generator)}));
  fc = register_module(
      "fc", std::make_shared<Linear>(512, o.num_classes,
                                     LinearOptions{.bias = false, .generator = o.generator}));
}

Tensor ResNet9::forward(const Tensor& x) {
  Tensor h = (*layer1)((*prep)(x));
  h = h + (*res1)(h);
  h = (*layer3)((*layer2)(h));
  h = h + (*res3)(h);
  h = adaptive_avg_pool2d(h, {1, 1}).flatten(1);
  return (*fc)(h)*0.125;
}

}  // namespace stoke::nn::models
