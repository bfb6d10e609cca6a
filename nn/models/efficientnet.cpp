// EfficientNet-B0 (Tan & Le 2019) with torchvision's module tree, names and initialization
// (torchvision.models.efficientnet_b0): features.0 the stem, features.1-7 the MBConv stages,
// features.8 the 1x1 head, classifier.1 the linear layer.
#include <cmath>

#include "autograd/dropout.h"
#include "autograd/elementwise.h"
#include "autograd/pool.h"
#include "nn/init.h"
#include "nn/models/models.h"

namespace stoke::nn::models {

namespace {

// torchvision's _make_divisible(v, 8): channels rounded to a multiple of 8, never below 90% of v.
int64_t make_divisible(double v, int64_t divisor = 8) {
  int64_t out =
      std::max<int64_t>(divisor, static_cast<int64_t>(v + divisor / 2.0) / divisor * divisor);
  if (static_cast<double>(out) < 0.9 * v) out += divisor;
  return out;
}

// torchvision's Conv2dNormActivation: conv (no bias), BatchNorm2d, SiLU (when `act`); names 0, 1.
std::shared_ptr<Sequential> conv_bn_act(int64_t in, int64_t out, int64_t kernel, int64_t stride,
                                        int64_t groups, bool act, Generator* gen) {
  const int64_t pad = (kernel - 1) / 2;
  auto seq = std::make_shared<Sequential>(std::initializer_list<ModulePtr>{
      std::make_shared<Conv2d>(in, out, kernel,
                               Conv2dLayerOptions{.stride = {stride, stride},
                                                  .padding = {pad, pad},
                                                  .groups = groups,
                                                  .bias = false,
                                                  .generator = gen}),
      std::make_shared<BatchNorm2d>(out)});
  if (act) seq->push_back(std::make_shared<SiLU>());
  return seq;
}

// torchvision.ops.SqueezeExcitation with SiLU: x * sigmoid(fc2(silu(fc1(avgpool(x))))), fc1 and
// fc2 1x1 convolutions with bias.
class SqueezeExcitation : public Module {
 public:
  SqueezeExcitation(int64_t channels, int64_t squeeze, Generator* gen) {
    fc1 = register_module("fc1", std::make_shared<Conv2d>(channels, squeeze, 1,
                                                          Conv2dLayerOptions{.generator = gen}));
    fc2 = register_module("fc2", std::make_shared<Conv2d>(squeeze, channels, 1,
                                                          Conv2dLayerOptions{.generator = gen}));
  }
  Tensor forward(const Tensor& x) override {
    const Tensor s = adaptive_avg_pool2d(x, {1, 1});
    return x * sigmoid((*fc2)(silu((*fc1)(s))));
  }
  std::string name() const override { return "SqueezeExcitation"; }

 private:
  std::shared_ptr<Conv2d> fc1, fc2;
};

// The inverted residual block with squeeze-excitation (torchvision's MBConv): block.0 the 1x1
// expansion (left out when expand_ratio is 1), then the depthwise conv, the SE, the 1x1 projection
// without activation; a residual connection through stochastic depth where the shape stays.
class MBConv : public Module {
 public:
  // `gen` initializes the weights only: it may not outlive construction (ModelOptions), so drop
  // path draws from the default generator.
  MBConv(int64_t expand_ratio, int64_t kernel, int64_t stride, int64_t in, int64_t out,
         double drop_path_p, Generator* gen)
      : residual_(stride == 1 && in == out), drop_path_p_(drop_path_p) {
    const int64_t expanded = make_divisible(static_cast<double>(in * expand_ratio));
    block = register_module("block", std::make_shared<Sequential>());
    if (expanded != in) block->push_back(conv_bn_act(in, expanded, 1, 1, 1, true, gen));
    block->push_back(conv_bn_act(expanded, expanded, kernel, stride, expanded, true, gen));
    block->push_back(
        std::make_shared<SqueezeExcitation>(expanded, std::max<int64_t>(1, in / 4), gen));
    block->push_back(conv_bn_act(expanded, out, 1, 1, 1, false, gen));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = (*block)(x);
    if (!residual_) return h;
    return drop_path(h, drop_path_p_, is_training()) + x;
  }
  std::string name() const override { return "MBConv"; }
  std::shared_ptr<Sequential> block;

 private:
  bool residual_;
  double drop_path_p_;
};

}  // namespace

EfficientNet::EfficientNet(ModelOptions o, EfficientNetOptions e) {
  STOKE_CHECK(e.dropout >= 0 && e.dropout < 1 && e.stochastic_depth >= 0 && e.stochastic_depth < 1,
              "EfficientNet", "dropout and stochastic_depth must be in [0, 1), got ", e.dropout,
              " and ", e.stochastic_depth);
  // B0: (expand ratio, kernel, stride, input channels, output channels, blocks) per stage.
  const int64_t config[7][6] = {
      {1, 3, 1, 32, 16, 1},  {6, 3, 2, 16, 24, 2},   {6, 5, 2, 24, 40, 2},  {6, 3, 2, 40, 80, 3},
      {6, 5, 1, 80, 112, 3}, {6, 5, 2, 112, 192, 4}, {6, 3, 1, 192, 320, 1}};
  int64_t total_blocks = 0;
  for (const auto& c : config) total_blocks += c[5];
  features = register_module("features", std::make_shared<Sequential>());
  features->push_back(conv_bn_act(o.in_channels, 32, 3, 2, 1, true, o.generator));
  int64_t block_id = 0;
  for (const auto& c : config) {
    auto stage = std::make_shared<Sequential>();
    for (int64_t b = 0; b < c[5]; ++b) {
      // Stochastic depth grows linearly with the block's index over the whole network.
      const double p =
          e.stochastic_depth * static_cast<double>(block_id++) / static_cast<double>(total_blocks);
      stage->push_back(std::make_shared<MBConv>(c[0], c[1], b == 0 ? c[2] : 1, b == 0 ? c[3] : c[4],
                                                c[4], p, o.generator));  // see MBConv
    }
    features->push_back(stage);
  }
  features->push_back(conv_bn_act(320, 1280, 1, 1, 1, true, o.generator));
  classifier = register_module(
      "classifier",
      std::make_shared<Sequential>(std::initializer_list<ModulePtr>{
          std::make_shared<Dropout>(e.dropout),  // the default generator: see ModelOptions
          std::make_shared<Linear>(1280, o.num_classes, LinearOptions{.generator = o.generator})}));
  // torchvision's initialization: convolutions N(0, 2 / fan_out), their biases 0; linear layers
  // U(-1/sqrt(out), 1/sqrt(out)), biases 0 (batch norms keep ones and zeros).
  for_each_module(*this, [&](Module& m) {
    if (auto* conv = dynamic_cast<Conv2d*>(&m)) {
      init::kaiming_normal_fan_out_(conv->weight, o.generator);
      if (conv->bias.defined()) init::zeros_(conv->bias);
    } else if (auto* linear = dynamic_cast<Linear*>(&m)) {
      const double range = 1.0 / std::sqrt(static_cast<double>(linear->weight.size(0)));
      init::uniform_(linear->weight, -range, range, o.generator);
      if (linear->bias.defined()) init::zeros_(linear->bias);
    }
  });
}

Tensor EfficientNet::forward(const Tensor& x) {
  const Tensor h = adaptive_avg_pool2d((*features)(x), {1, 1}).flatten(1);
  return (*classifier)(h);
}

}  // namespace stoke::nn::models
