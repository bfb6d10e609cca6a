// The standard layers, with PyTorch's parameter names and default initialization.
#pragma once

#include <array>
#include <initializer_list>
#include <memory>
#include <optional>

#include "core/random.h"
#include "nn/module.h"
#include "ops/batch_norm.h"
#include "ops/conv2d.h"
#include "ops/pool.h"

namespace stoke::nn {

struct LinearOptions {
  bool bias = true;
  DType dtype = DType::f32;
  Generator* generator = nullptr;  // for initialization; the default generator if null
};

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, LinearOptions options = {});
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Linear"; }
  Tensor weight, bias;  // (out, in), (out) or undefined
};

struct Conv2dLayerOptions {
  std::array<int64_t, 2> stride{1, 1};
  std::array<int64_t, 2> padding{0, 0};
  std::array<int64_t, 2> dilation{1, 1};
  int64_t groups = 1;
  bool bias = true;
  DType dtype = DType::f32;
  Generator* generator = nullptr;
};

class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, std::array<int64_t, 2> kernel_size,
         Conv2dLayerOptions options = {});
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size,
         Conv2dLayerOptions options = {})
      : Conv2d(in_channels, out_channels, {kernel_size, kernel_size}, options) {}
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Conv2d"; }
  Tensor weight, bias;  // (out, in/groups, kh, kw), (out) or undefined
  ops::Conv2dOptions conv;
};

struct ConvTranspose2dLayerOptions {
  std::array<int64_t, 2> stride{1, 1};
  std::array<int64_t, 2> padding{0, 0};
  std::array<int64_t, 2> output_padding{0, 0};
  int64_t groups = 1;
  bool bias = true;
  std::array<int64_t, 2> dilation{1, 1};
  DType dtype = DType::f32;
  Generator* generator = nullptr;
};

// torch.nn.ConvTranspose2d: weight (in, out/groups, kh, kw), bias (out), torch's initialization.
class ConvTranspose2d : public Module {
 public:
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, std::array<int64_t, 2> kernel_size,
                  ConvTranspose2dLayerOptions options = {});
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size,
                  ConvTranspose2dLayerOptions options = {})
      : ConvTranspose2d(in_channels, out_channels, {kernel_size, kernel_size}, options) {}
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "ConvTranspose2d"; }
  Tensor weight, bias;
  ops::ConvTranspose2dOptions conv;
};

struct BatchNormLayerOptions {
  double eps = 1e-5;
  double momentum = 0.1;
  bool affine = true;
  bool track_running_stats = true;
  DType dtype = DType::f32;
};

// BatchNorm over dim 1 of (N, C, ...) inputs. BatchNorm1d and BatchNorm2d are this module under
// the names torch prints; they differ only in name().
class BatchNorm : public Module {
 public:
  explicit BatchNorm(int64_t num_features, BatchNormLayerOptions options = {});
  Tensor forward(const Tensor& x) override;
  // relu(forward(x)) in one pass forward and backward (BatchNormOptions::relu): the same values
  // and gradients, without the pre-ReLU tensor or ReLU's gradient ever written.
  Tensor forward_relu(const Tensor& x);
  std::string name() const override { return "BatchNorm"; }
  Tensor weight, bias, running_mean, running_var, num_batches_tracked;
  BatchNormLayerOptions options;

 private:
  Tensor forward_impl(const Tensor& x, bool fuse_relu);
};
// relu(norm->forward(x)), fused when `norm` is a BatchNorm (forward_relu), else as written: for
// models whose norm layer is chosen at construction (ResNet's BatchNorm2d or GroupNorm).
Tensor norm_relu(Module& norm, const Tensor& x);

class BatchNorm2d : public BatchNorm {
 public:
  using BatchNorm::BatchNorm;
  std::string name() const override { return "BatchNorm2d"; }
};
class BatchNorm1d : public BatchNorm {
 public:
  using BatchNorm::BatchNorm;
  std::string name() const override { return "BatchNorm1d"; }
};

struct LayerNormLayerOptions {
  double eps = 1e-5;
  bool elementwise_affine = true;  // weight (ones) and bias (zeros) of normalized_shape
  DType dtype = DType::f32;
};

// LayerNorm over the last normalized_shape.size() dims (torch.nn.LayerNorm).
class LayerNorm : public Module {
 public:
  explicit LayerNorm(Shape normalized_shape, LayerNormLayerOptions options = {});
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "LayerNorm"; }
  Tensor weight, bias;
  Shape normalized_shape;
  LayerNormLayerOptions options;
};

struct GroupNormLayerOptions {
  double eps = 1e-5;
  bool affine = true;  // weight (ones) and bias (zeros) of (num_channels)
  DType dtype = DType::f32;
};

// GroupNorm of (N, C, ...) inputs over num_groups groups of channels (torch.nn.GroupNorm).
class GroupNorm : public Module {
 public:
  GroupNorm(int64_t num_groups, int64_t num_channels, GroupNormLayerOptions options = {});
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "GroupNorm"; }
  Tensor weight, bias;
  int64_t num_groups, num_channels;
  GroupNormLayerOptions options;
};

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "ReLU"; }
};

class LeakyReLU : public Module {
 public:
  explicit LeakyReLU(double negative_slope = 0.01) : negative_slope(negative_slope) {}
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "LeakyReLU"; }
  double negative_slope;
};

class GELU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "GELU"; }
};

class SiLU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "SiLU"; }
};

class Hardswish : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Hardswish"; }
};

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(ops::Pool2dOptions options) : options(options) {}
  explicit MaxPool2d(int64_t kernel_size) : options{.kernel_size = {kernel_size, kernel_size}} {}
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "MaxPool2d"; }
  ops::Pool2dOptions options;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(ops::Pool2dOptions options) : options(options) {}
  explicit AvgPool2d(int64_t kernel_size) : options{.kernel_size = {kernel_size, kernel_size}} {}
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "AvgPool2d"; }
  ops::Pool2dOptions options;
};

class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(std::array<int64_t, 2> output_size) : output_size(output_size) {}
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "AdaptiveAvgPool2d"; }
  std::array<int64_t, 2> output_size;
};

class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5, Generator* generator = nullptr) : p(p), generator(generator) {}
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Dropout"; }
  double p;
  Generator* generator;
};

// Zeroes whole channels of (N, C, H, W) inputs in training (torch.nn.Dropout2d).
class Dropout2d : public Module {
 public:
  explicit Dropout2d(double p = 0.5, Generator* generator = nullptr) : p(p), generator(generator) {}
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Dropout2d"; }
  double p;
  Generator* generator;
};

// Stochastic depth: zeroes whole samples of a residual branch in training (timm's DropPath,
// torchvision's StochasticDepth(p, "row")).
class DropPath : public Module {
 public:
  explicit DropPath(double p = 0.0, Generator* generator = nullptr) : p(p), generator(generator) {}
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "DropPath"; }
  double p;
  Generator* generator;
};

class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1)
      : start_dim(start_dim), end_dim(end_dim) {}
  Tensor forward(const Tensor& x) override { return x.flatten(start_dim, end_dim); }
  std::string name() const override { return "Flatten"; }
  int64_t start_dim, end_dim;
};

class Identity : public Module {
 public:
  Tensor forward(const Tensor& x) override { return x; }
  std::string name() const override { return "Identity"; }
};

// Children named "0", "1", ... applied in order.
class Sequential : public Module {
 public:
  Sequential() = default;
  Sequential(std::initializer_list<ModulePtr> modules);
  void push_back(ModulePtr m);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Sequential"; }
  size_t size() const { return modules_.size(); }
  const ModulePtr& operator[](size_t i) const { return modules_.at(i); }

 private:
  std::vector<ModulePtr> modules_;
};

}  // namespace stoke::nn
