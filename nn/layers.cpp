#include "nn/layers.h"

#include <cmath>

#include "autograd/batch_norm.h"
#include "autograd/conv2d.h"
#include "autograd/dropout.h"
#include "autograd/elementwise.h"
#include "autograd/group_norm.h"
#include "autograd/linalg.h"
#include "autograd/pool.h"
#include "core/grad_mode.h"
#include "nn/init.h"
#include "ops/creation.h"

namespace stoke::nn {

Linear::Linear(int64_t in_features, int64_t out_features, LinearOptions options) {
  STOKE_CHECK(in_features > 0 && out_features > 0, "Linear", "expected positive sizes, got ",
              in_features, " -> ", out_features);
  weight =
      register_parameter("weight", empty({out_features, in_features}, {.dtype = options.dtype}));
  init::kaiming_uniform_(weight, std::sqrt(5.0), options.generator);
  if (options.bias) {
    bias = register_parameter("bias", empty({out_features}, {.dtype = options.dtype}));
    const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
    init::uniform_(bias, -bound, bound, options.generator);
  }
}

Tensor Linear::forward(const Tensor& x) {
  return linear(x, weight, bias);
}

namespace {

void check_conv_groups(const char* layer, int64_t in_channels, int64_t out_channels,
                       int64_t groups) {
  STOKE_CHECK(groups > 0 && in_channels % groups == 0 && out_channels % groups == 0, layer,
              "in_channels ", in_channels, " and out_channels ", out_channels,
              " must be divisible by groups ", groups);
}

// torch's _ConvNd.reset_parameters, for Conv2d and ConvTranspose2d alike: the weight
// kaiming_uniform_(a = sqrt(5)), the bias (if any) U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in
// being the weight's dim 1 times its kernel (in/groups for a convolution, out/groups for a
// transposed one).
void reset_conv_parameters(const Tensor& weight, const Tensor& bias, Generator* generator) {
  init::kaiming_uniform_(weight, std::sqrt(5.0), generator);
  if (!bias.defined()) return;
  const double bound = 1.0 / std::sqrt(static_cast<double>(init::fan_in(weight)));
  init::uniform_(bias, -bound, bound, generator);
}

}  // namespace

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, std::array<int64_t, 2> kernel_size,
               Conv2dLayerOptions options)
    : conv{.stride = options.stride,
           .padding = options.padding,
           .dilation = options.dilation,
           .groups = options.groups} {
  check_conv_groups("Conv2d", in_channels, out_channels, options.groups);
  weight = register_parameter(
      "weight", empty({out_channels, in_channels / options.groups, kernel_size[0], kernel_size[1]},
                      {.dtype = options.dtype}));
  if (options.bias)
    bias = register_parameter("bias", empty({out_channels}, {.dtype = options.dtype}));
  reset_conv_parameters(weight, bias, options.generator);
}

Tensor Conv2d::forward(const Tensor& x) {
  return conv2d(x, weight, bias, conv);
}

ConvTranspose2d::ConvTranspose2d(int64_t in_channels, int64_t out_channels,
                                 std::array<int64_t, 2> kernel_size,
                                 ConvTranspose2dLayerOptions options)
    : conv{.stride = options.stride,
           .padding = options.padding,
           .output_padding = options.output_padding,
           .groups = options.groups,
           .dilation = options.dilation} {
  check_conv_groups("ConvTranspose2d", in_channels, out_channels, options.groups);
  weight = register_parameter(
      "weight", empty({in_channels, out_channels / options.groups, kernel_size[0], kernel_size[1]},
                      {.dtype = options.dtype}));
  if (options.bias)
    bias = register_parameter("bias", empty({out_channels}, {.dtype = options.dtype}));
  reset_conv_parameters(weight, bias, options.generator);
}

Tensor ConvTranspose2d::forward(const Tensor& x) {
  return conv_transpose2d(x, weight, bias, conv);
}

BatchNorm::BatchNorm(int64_t num_features, BatchNormLayerOptions options) : options(options) {
  if (options.affine) {
    weight = register_parameter("weight", ones({num_features}, {.dtype = options.dtype}));
    bias = register_parameter("bias", zeros({num_features}, {.dtype = options.dtype}));
  }
  if (options.track_running_stats) {
    running_mean = register_buffer("running_mean", zeros({num_features}, {.dtype = options.dtype}));
    running_var = register_buffer("running_var", ones({num_features}, {.dtype = options.dtype}));
    num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, {.dtype = DType::i64}));
  }
}

Tensor BatchNorm::forward(const Tensor& x) {
  return forward_impl(x, false);
}

Tensor BatchNorm::forward_relu(const Tensor& x) {
  return forward_impl(x, true);
}

Tensor norm_relu(Module& norm, const Tensor& x) {
  // Fused unless the norm has forward hooks, which must see its output before the ReLU.
  if (auto* bn = dynamic_cast<BatchNorm*>(&norm); bn && !bn->has_forward_hooks())
    return bn->forward_relu(x);
  return relu(norm(x));
}

Tensor BatchNorm::forward_impl(const Tensor& x, bool fuse_relu) {
  const bool use_batch_stats = is_training() || !options.track_running_stats;
  if (is_training() && options.track_running_stats) {
    if (num_batches_tracked.device().is_cpu()) {
      ++*num_batches_tracked.data<int64_t>();
    } else {
      NoGradGuard no_grad;
      stoke::add_(num_batches_tracked, 1.0);  // an i64 kernel on the device, no host round trip
    }
  }
  // Without running statistics (track_running_stats=false) both modes normalize with the batch's.
  return batch_norm(x, running_mean, running_var, weight, bias,
                    {.training = use_batch_stats,
                     .momentum = options.momentum,
                     .eps = options.eps,
                     .relu = fuse_relu});
}

LayerNorm::LayerNorm(Shape normalized_shape, LayerNormLayerOptions options)
    : normalized_shape(std::move(normalized_shape)), options(options) {
  if (options.elementwise_affine) {
    weight = register_parameter("weight", ones(this->normalized_shape, {.dtype = options.dtype}));
    bias = register_parameter("bias", zeros(this->normalized_shape, {.dtype = options.dtype}));
  }
}

Tensor LayerNorm::forward(const Tensor& x) {
  return layer_norm(x, normalized_shape, weight, bias, {.eps = options.eps});
}

GroupNorm::GroupNorm(int64_t num_groups, int64_t num_channels, GroupNormLayerOptions options)
    : num_groups(num_groups), num_channels(num_channels), options(options) {
  STOKE_CHECK(num_groups >= 1 && num_channels % num_groups == 0, "nn::GroupNorm",
              "expected num_groups >= 1 dividing num_channels, got num_groups ", num_groups,
              " and num_channels ", num_channels);
  if (options.affine) {
    weight = register_parameter("weight", ones({num_channels}, {.dtype = options.dtype}));
    bias = register_parameter("bias", zeros({num_channels}, {.dtype = options.dtype}));
  }
}

Tensor GroupNorm::forward(const Tensor& x) {
  return group_norm(x, num_groups, weight, bias, {.eps = options.eps});
}

Tensor ReLU::forward(const Tensor& x) {
  return relu(x);
}
Tensor LeakyReLU::forward(const Tensor& x) {
  return leaky_relu(x, negative_slope);
}
Tensor GELU::forward(const Tensor& x) {
  return gelu(x);
}
Tensor SiLU::forward(const Tensor& x) {
  return silu(x);
}
Tensor Hardswish::forward(const Tensor& x) {
  return hardswish(x);
}
Tensor MaxPool2d::forward(const Tensor& x) {
  return max_pool2d(x, options);
}
Tensor AvgPool2d::forward(const Tensor& x) {
  return avg_pool2d(x, options);
}
Tensor AdaptiveAvgPool2d::forward(const Tensor& x) {
  return adaptive_avg_pool2d(x, output_size);
}
Tensor Dropout::forward(const Tensor& x) {
  return dropout(x, p, is_training(), generator);
}

Tensor Dropout2d::forward(const Tensor& x) {
  return dropout2d(x, p, is_training(), generator);
}

Tensor DropPath::forward(const Tensor& x) {
  return drop_path(x, p, is_training(), generator);
}

Sequential::Sequential(std::initializer_list<ModulePtr> modules) {
  for (const auto& m : modules) push_back(m);
}

void Sequential::push_back(ModulePtr m) {
  register_module(std::to_string(modules_.size()), m);
  modules_.push_back(std::move(m));
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (auto& m : modules_) h = (*m)(h);
  return h;
}

}  // namespace stoke::nn
