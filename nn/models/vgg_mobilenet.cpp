#include "autograd/elementwise.h"
#include "autograd/pool.h"
#include "nn/models/models.h"

namespace stoke::nn::models {

VGG::VGG(const std::vector<int64_t>& config, ModelOptions o) {
  features = register_module("features", std::make_shared<Sequential>());
  int64_t in = o.in_channels, size = o.input_size;
  for (int64_t c : config) {
    if (c < 0) {
      if (size >= 2) {
        features->push_back(std::make_shared<MaxPool2d>(2));
        size /= 2;
      }
      continue;
    }
    features->push_back(std::make_shared<Conv2d>(
        in, c, 3, Conv2dLayerOptions{.padding = {1, 1}, .generator = o.generator}));
    features->push_back(std::make_shared<BatchNorm2d>(c));
    features->push_back(std::make_shared<ReLU>());
    in = c;
  }
  classifier = register_module(
      "classifier",
      std::make_shared<Linear>(in, o.num_classes, LinearOptions{.generator = o.generator}));
}

Tensor VGG::forward(const Tensor& x) {
  Tensor h = adaptive_avg_pool2d((*features)(x), {1, 1}).flatten(1);
  return (*classifier)(h);
}

namespace {

// Inverted residual: 1x1 expand, 3x3 depthwise, 1x1 project; a residual connection when the
// stride is 1 (through a 1x1 conv when the channel count changes, as in kuangliu's model).
class InvertedResidual : public Module {
 public:
  InvertedResidual(int64_t in, int64_t out, int64_t expansion, int64_t stride, Generator* gen)
      : stride_(stride) {
    const int64_t planes = expansion * in;
    conv1 = register_module(
        "conv1", std::make_shared<Conv2d>(in, planes, 1,
                                          Conv2dLayerOptions{.bias = false, .generator = gen}));
    bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(planes));
    conv2 = register_module("conv2",
                            std::make_shared<Conv2d>(planes, planes, 3,
                                                     Conv2dLayerOptions{.stride = {stride, stride},
                                                                        .padding = {1, 1},
                                                                        .groups = planes,
                                                                        .bias = false,
                                                                        .generator = gen}));
    bn2 = register_module("bn2", std::make_shared<BatchNorm2d>(planes));
    conv3 = register_module(
        "conv3", std::make_shared<Conv2d>(planes, out, 1,
                                          Conv2dLayerOptions{.bias = false, .generator = gen}));
    bn3 = register_module("bn3", std::make_shared<BatchNorm2d>(out));
    if (stride == 1 && in != out)
      shortcut = register_module(
          "shortcut", std::make_shared<Sequential>(std::initializer_list<ModulePtr>{
                          std::make_shared<Conv2d>(
                              in, out, 1, Conv2dLayerOptions{.bias = false, .generator = gen}),
                          std::make_shared<BatchNorm2d>(out)}));
  }

  Tensor forward(const Tensor& x) override {
    Tensor h = norm_relu(*bn1, (*conv1)(x));
    h = norm_relu(*bn2, (*conv2)(h));
    h = (*bn3)((*conv3)(h));
    if (stride_ != 1) return h;
    return h + (shortcut ? (*shortcut)(x) : x);
  }
  std::string name() const override { return "InvertedResidual"; }

 private:
  int64_t stride_;
  std::shared_ptr<Conv2d> conv1, conv2, conv3;
  std::shared_ptr<BatchNorm> bn1, bn2, bn3;
  std::shared_ptr<Sequential> shortcut;
};

}  // namespace

MobileNetV2::MobileNetV2(ModelOptions o) {
  // (expansion, out_planes, num_blocks, stride); strides of the first stages are 1 for CIFAR.
  const int64_t config[7][4] = {{1, 16, 1, 1}, {6, 24, 2, 1},  {6, 32, 3, 2}, {6, 64, 4, 2},
                                {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1}};
  conv1 = register_module(
      "conv1", std::make_shared<Conv2d>(
                   o.in_channels, 32, 3,
                   Conv2dLayerOptions{.padding = {1, 1}, .bias = false, .generator = o.generator}));
  bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(32));
  layers = register_module("layers", std::make_shared<Sequential>());
  int64_t in = 32;
  for (const auto& c : config)
    for (int64_t b = 0; b < c[2]; ++b) {
      layers->push_back(
          std::make_shared<InvertedResidual>(in, c[1], c[0], b == 0 ? c[3] : 1, o.generator));
      in = c[1];
    }
  conv2 = register_module(
      "conv2", std::make_shared<Conv2d>(
                   320, 1280, 1, Conv2dLayerOptions{.bias = false, .generator = o.generator}));
  bn2 = register_module("bn2", std::make_shared<BatchNorm2d>(1280));
  linear = register_module(
      "linear",
      std::make_shared<Linear>(1280, o.num_classes, LinearOptions{.generator = o.generator}));
}

Tensor MobileNetV2::forward(const Tensor& x) {
  Tensor h = norm_relu(*bn1, (*conv1)(x));
  h = (*layers)(h);
  h = norm_relu(*bn2, (*conv2)(h));
  h = adaptive_avg_pool2d(h, {1, 1}).flatten(1);
  return (*linear)(h);
}

std::vector<std::string> model_names() {
  return {"lenet5",   "resnet8",     "resnet8_pool",    "resnet20",      "resnet56",     "resnet18",
          "resnet50", "resnet8_gn",  "resnet20_gn",     "resnet18_gn",   "resnet9",      "vgg11",
          "vgg16",    "mobilenetv2", "efficientnet_b0", "convnext_tiny", "convnext_nano"};
}

std::shared_ptr<Module> make_model(const std::string& name, ModelOptions o) {
  if (name == "lenet5") return std::make_shared<LeNet5>(o);
  if (name == "resnet8")
    return std::make_shared<ResNet>(std::vector<int64_t>{1, 1, 1}, std::vector<int64_t>{16, 32, 64},
                                    o);
  if (name == "resnet8_pool")
    return std::make_shared<ResNet>(std::vector<int64_t>{1, 1, 1}, std::vector<int64_t>{16, 32, 64},
                                    o, ResNetNorm{}, ResNetStem{.max_pool = true});
  if (name == "resnet20")
    return std::make_shared<ResNet>(std::vector<int64_t>{3, 3, 3}, std::vector<int64_t>{16, 32, 64},
                                    o);
  if (name == "resnet56")
    return std::make_shared<ResNet>(std::vector<int64_t>{9, 9, 9}, std::vector<int64_t>{16, 32, 64},
                                    o);
  if (name == "resnet18")
    return std::make_shared<ResNet>(std::vector<int64_t>{2, 2, 2, 2},
                                    std::vector<int64_t>{64, 128, 256, 512}, o);
  if (name == "resnet50")
    return std::make_shared<BottleneckResNet>(std::vector<int64_t>{3, 4, 6, 3}, o);
  const ResNetNorm gn{.group_norm = true};
  if (name == "resnet8_gn")
    return std::make_shared<ResNet>(std::vector<int64_t>{1, 1, 1}, std::vector<int64_t>{16, 32, 64},
                                    o, gn);
  if (name == "resnet20_gn")
    return std::make_shared<ResNet>(std::vector<int64_t>{3, 3, 3}, std::vector<int64_t>{16, 32, 64},
                                    o, gn);
  if (name == "resnet18_gn")
    return std::make_shared<ResNet>(std::vector<int64_t>{2, 2, 2, 2},
                                    std::vector<int64_t>{64, 128, 256, 512}, o, gn);
  if (name == "resnet9") return std::make_shared<ResNet9>(o);
  if (name == "vgg11")
    return std::make_shared<VGG>(
        std::vector<int64_t>{64, -1, 128, -1, 256, 256, -1, 512, 512, -1, 512, 512, -1}, o);
  if (name == "vgg16")
    return std::make_shared<VGG>(std::vector<int64_t>{64, 64, -1, 128, 128, -1, 256, 256, 256, -1,
                                                      512, 512, 512, -1, 512, 512, 512, -1},
                                 o);
  if (name == "mobilenetv2") return std::make_shared<MobileNetV2>(o);
  if (name == "efficientnet_b0") return std::make_shared<EfficientNet>(o);
  if (name == "convnext_tiny") return std::make_shared<ConvNeXt>(o);
  if (name == "convnext_nano")
    return std::make_shared<ConvNeXt>(
        o, ConvNeXtOptions{.dims = {32, 64, 128, 256}, .depths = {2, 2, 6, 2}, .stem_patch = 2});
  std::string known;
  for (const auto& n : model_names()) known += (known.empty() ? "" : ", ") + n;
  STOKE_FAIL("make_model", "unknown model '", name, "'; known models: ", known);
}

}  // namespace stoke::nn::models
