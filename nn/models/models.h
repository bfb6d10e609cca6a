// Reference CNNs. Each takes the input channels, the number of classes and the input size, so the
// same model trains on 1-channel 28x28 (Fashion-MNIST) and 3-channel 32x32 (CIFAR) images.
// Parameter names follow the usual PyTorch implementations named beside each model.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "nn/layers.h"

namespace stoke::nn::models {

struct ModelOptions {
  int64_t in_channels = 1;
  int64_t num_classes = 10;
  int64_t input_size = 28;  // height = width of the input images
  // For initialization only (it need not outlive the constructor); the default generator if
  // null. Noise while training (dropout, drop path) draws from the default generator.
  Generator* generator = nullptr;
};

// LeNet-5 with ReLU and max-pooling: conv1 (5x5, 6; padded by 2 for 28x28 inputs), conv2 (5x5,
// 16), fc1 400-120, fc2 120-84, fc3 84-classes.
class LeNet5 : public Module {
 public:
  explicit LeNet5(ModelOptions options = {});
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "LeNet5"; }
  std::shared_ptr<Conv2d> conv1, conv2;
  std::shared_ptr<Linear> fc1, fc2, fc3;
};

// The normalization layers of a ResNet: BatchNorm2d (group_norm = false), or GroupNorm (Wu & He
// 2018) with min(32, C / 2) groups of C channels: torchvision's GroupNorm(32, C) where C >= 64,
// groups of two channels below (CIFAR's 16 and 32 channels). The layers keep torchvision's names
// (bn1, bn2, downsample.1) whichever they are, as torchvision's norm_layer argument does.
struct ResNetNorm {
  bool group_norm = false;
};
ModulePtr make_resnet_norm(int64_t channels, ResNetNorm norm);

// The stem of a ResNet: the 3x3 conv + norm + ReLU, followed (max_pool = true) by a 2x2 max-pool
// named "maxpool" (torchvision's ImageNet stem pools too), so that the stages run on planes half
// as wide: resnet8_pool's stages see 14x14, 7x7 and 4x4 of a 28x28 image, a third of ResNet-8's
// training time, and the same parameters (the pool has none).
struct ResNetStem {
  bool max_pool = false;
};

// The basic residual block (He et al. 2016); a 1x1 conv + norm "downsample" shortcut where the
// shape changes (torchvision's names: conv1, bn1, conv2, bn2, downsample.0, downsample.1).
class BasicBlock : public Module {
 public:
  BasicBlock(int64_t in_planes, int64_t planes, int64_t stride, Generator* gen,
             ResNetNorm norm = {});
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "BasicBlock"; }
  std::shared_ptr<Conv2d> conv1, conv2;
  ModulePtr bn1, bn2;                      // BatchNorm2d or GroupNorm (ResNetNorm)
  std::shared_ptr<Sequential> downsample;  // null for an identity shortcut
};

// CIFAR-style ResNet: a 3x3 stem, stages of BasicBlocks, global average pool and fc.
//   resnet8/20/56: depth 6n+2, stages of n blocks at 16/32/64 channels (He et al. 2016, sec. 4.2);
//   resnet18: stages of 2 blocks at 64/128/256/512 channels with a 3x3 stem and no max-pool;
//   resnet8_gn, resnet20_gn, resnet18_gn: the same with GroupNorm (ResNetNorm);
//   resnet8_pool: ResNet-8 with a max-pooled stem (ResNetStem).
class ResNet : public Module {
 public:
  ResNet(const std::vector<int64_t>& blocks, const std::vector<int64_t>& widths,
         ModelOptions options, ResNetNorm norm = {}, ResNetStem stem = {});
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "ResNet"; }
  std::shared_ptr<Conv2d> conv1;
  ModulePtr bn1;
  std::shared_ptr<MaxPool2d> maxpool;               // null unless ResNetStem::max_pool
  std::vector<std::shared_ptr<Sequential>> layers;  // layer1, layer2, ...
  std::shared_ptr<Linear> fc;
};

// The bottleneck block of torchvision's ImageNet ResNets (v1.5: the stride on the 3x3 conv):
// 1x1 conv to `planes`, 3x3 conv, 1x1 conv to 4 planes, each with a batch norm, and the 1x1 conv +
// batch norm "downsample" shortcut where the shape changes. Names as torchvision's Bottleneck.
class Bottleneck : public Module {
 public:
  static constexpr int64_t kExpansion = 4;
  Bottleneck(int64_t in_planes, int64_t planes, int64_t stride, Generator* gen);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Bottleneck"; }
  std::shared_ptr<Conv2d> conv1, conv2, conv3;
  std::shared_ptr<BatchNorm2d> bn1, bn2, bn3;
  std::shared_ptr<Sequential> downsample;  // null for an identity shortcut
};

// torchvision's ImageNet ResNet with bottleneck blocks: a 7x7 stride-2 stem conv, batch norm,
// ReLU, a 3x3 stride-2 max-pool, four stages of Bottlenecks at 64/128/256/512 planes (x4 out),
// global average pool and fc; torchvision's names (conv1, bn1, layer1-4, fc) and initialization.
//   resnet50: stages of 3/4/6/3 blocks; 25,557,032 parameters with 3 input channels and 1000
//   classes, torchvision.models.resnet50's state_dict loads strictly. Any input of at least
//   28x28 (its planes shrink 32-fold: 28x28 reaches 1x1 in the last stage, 224x224 7x7).
class BottleneckResNet : public Module {
 public:
  BottleneckResNet(const std::vector<int64_t>& blocks, ModelOptions options);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "BottleneckResNet"; }
  std::shared_ptr<Conv2d> conv1;
  std::shared_ptr<BatchNorm2d> bn1;
  std::shared_ptr<MaxPool2d> maxpool;
  std::vector<std::shared_ptr<Sequential>> layers;  // layer1, ..., layer4
  std::shared_ptr<Linear> fc;
};

// ResNet-9 of the DAWNBench / airbench family (Myrtle.ai): prep, layer1 (+res1), layer2, layer3
// (+res3), global pooling, a bias-free linear layer and the 0.125 output scale. Global average
// pooling replaces the original 4x4 max-pool so that 28x28 inputs work too.
class ResNet9 : public Module {
 public:
  explicit ResNet9(ModelOptions options = {});
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "ResNet9"; }
  std::shared_ptr<Sequential> prep, layer1, res1, layer2, layer3, res3;
  std::shared_ptr<Linear> fc;
};

// VGG with batch norm (Simonyan & Zisserman; the CIFAR variant with one linear classifier).
// A max-pool that would shrink the feature map below 1x1 (28x28 inputs) is left out.
class VGG : public Module {
 public:
  VGG(const std::vector<int64_t>& config, ModelOptions options);  // -1 = max-pool
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "VGG"; }
  std::shared_ptr<Sequential> features;
  std::shared_ptr<Linear> classifier;
};

// MobileNetV2 for CIFAR (Sandler et al. 2018; the first strides set to 1 for 32x32 inputs, as in
// the widely used kuangliu/pytorch-cifar model and its names: conv1, bn1, layers.N, conv2, bn2,
// linear).
class MobileNetV2 : public Module {
 public:
  explicit MobileNetV2(ModelOptions options = {});
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "MobileNetV2"; }
  std::shared_ptr<Conv2d> conv1, conv2;
  std::shared_ptr<BatchNorm> bn1, bn2;
  std::shared_ptr<Sequential> layers;
  std::shared_ptr<Linear> linear;
};

// EfficientNet-B0 (Tan & Le 2019), torchvision's efficientnet_b0: its module tree and names
// (features.0 stem, features.1-7 MBConv stages with squeeze-excitation and SiLU, features.8 head,
// classifier.1), its initialization, stochastic depth growing linearly to `stochastic_depth` over
// the blocks, dropout before the classifier. Strides total 32: 28x28 inputs end at 1x1.
struct EfficientNetOptions {
  double dropout = 0.2;
  double stochastic_depth = 0.2;
};
class EfficientNet : public Module {
 public:
  explicit EfficientNet(ModelOptions options = {}, EfficientNetOptions efficientnet = {});
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "EfficientNet"; }
  std::shared_ptr<Sequential> features, classifier;
};

// ConvNeXt (Liu et al. 2022), torchvision's module tree and names: features.0 the patchify stem
// (conv + LayerNorm2d), then stages of CNBlocks (depthwise 7x7 conv, LayerNorm over channels,
// Linear 4x, GELU, Linear, layer scale, stochastic depth) with LayerNorm2d + 2x2 stride-2
// downsampling between them, classifier (LayerNorm2d, Flatten, Linear).
//   convnext_tiny: torchvision's convnext_tiny (96/192/384/768, 3/3/9/3 blocks, 4x4 stem): inputs
//   of at least 32x32 (the features shrink 32-fold);
//   convnext_nano: a narrow ConvNeXt for 28x28 images (32/64/128/256, 2/2/6/2 blocks, 2x2 stem,
//   so 28x28 ends at 1x1), the same modules and names.
struct ConvNeXtOptions {
  std::vector<int64_t> dims = {96, 192, 384, 768};
  std::vector<int64_t> depths = {3, 3, 9, 3};
  int64_t stem_patch = 4;         // the stem's kernel size and stride
  double stochastic_depth = 0.1;  // the last block's drop-path probability (linear from 0)
  double layer_scale = 1e-6;      // the initial layer scale of every block
};
class ConvNeXt : public Module {
 public:
  explicit ConvNeXt(ModelOptions options = {}, ConvNeXtOptions convnext = {});
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "ConvNeXt"; }
  std::shared_ptr<Sequential> features, classifier;
};

// Builds a model by name: lenet5, resnet8, resnet8_pool, resnet20, resnet56, resnet18, resnet50,
// resnet8_gn, resnet20_gn, resnet18_gn, resnet9, vgg11, vgg16, mobilenetv2, efficientnet_b0,
// convnext_tiny, convnext_nano. Unknown names are an error listing the known ones.
std::shared_ptr<Module> make_model(const std::string& name, ModelOptions options = {});
std::vector<std::string> model_names();

}  // namespace stoke::nn::models
