// ConvNeXt (Liu et al. 2022) with torchvision's module tree, names and initialization
// (torchvision.models.convnext_tiny): the block's Sequential keeps torchvision's indices (0 the
// depthwise conv, 1 a permute to channels-last, 2 the LayerNorm, 3 and 5 the linear layers, 4 GELU,
// 6 the permute back), so state_dict keys are features.1.0.block.3.weight and so on.
#include "autograd/dropout.h"
#include "autograd/elementwise.h"
#include "autograd/pool.h"
#include "nn/init.h"
#include "nn/models/models.h"
#include "ops/creation.h"

namespace stoke::nn::models {

namespace {

// (N, C, H, W) <-> (N, H, W, C), torchvision's Permute module.
class Permute : public Module {
 public:
  explicit Permute(std::vector<int64_t> dims) : dims_(std::move(dims)) {}
  Tensor forward(const Tensor& x) override { return x.permute(dims_); }
  std::string name() const override { return "Permute"; }

 private:
  std::vector<int64_t> dims_;
};

// LayerNorm over the channels of (N, C, H, W), torchvision's LayerNorm2d: channels-last, normalize,
// back. Its parameters are LayerNorm's (weight and bias of C).
class LayerNorm2d : public LayerNorm {
 public:
  explicit LayerNorm2d(int64_t channels)
      : LayerNorm(Shape{channels}, LayerNormLayerOptions{.eps = 1e-6}) {}
  Tensor forward(const Tensor& x) override {
    STOKE_CHECK(x.dim() == 4, "LayerNorm2d", "expected (N, C, H, W), got shape ", x.shape());
    return LayerNorm::forward(x.permute({0, 2, 3, 1})).permute({0, 3, 1, 2});
  }
  std::string name() const override { return "LayerNorm2d"; }
};

// The ConvNeXt block: x + drop_path(layer_scale * block(x)).
class CNBlock : public Module {
 public:
  // `gen` initializes the weights only (it may not outlive construction): drop path draws from
  // the default generator.
  CNBlock(int64_t dim, double initial_scale, double drop_path_p, Generator* gen)
      : drop_path_p_(drop_path_p) {
    layer_scale = register_parameter("layer_scale", full({dim, 1, 1}, initial_scale));
    block = register_module(
        "block", std::make_shared<Sequential>(std::initializer_list<ModulePtr>{
                     std::make_shared<Conv2d>(
                         dim, dim, 7,
                         Conv2dLayerOptions{.padding = {3, 3}, .groups = dim, .generator = gen}),
                     std::make_shared<Permute>(std::vector<int64_t>{0, 2, 3, 1}),
                     std::make_shared<LayerNorm>(Shape{dim}, LayerNormLayerOptions{.eps = 1e-6}),
                     std::make_shared<Linear>(dim, 4 * dim, LinearOptions{.generator = gen}),
                     std::make_shared<GELU>(),
                     std::make_shared<Linear>(4 * dim, dim, LinearOptions{.generator = gen}),
                     std::make_shared<Permute>(std::vector<int64_t>{0, 3, 1, 2})}));
  }
  Tensor forward(const Tensor& x) override {
    const Tensor r = layer_scale * (*block)(x);
    return drop_path(r, drop_path_p_, is_training()) + x;
  }
  std::string name() const override { return "CNBlock"; }
  Tensor layer_scale;  // (dim, 1, 1)
  std::shared_ptr<Sequential> block;

 private:
  double drop_path_p_;
};

}  // namespace

ConvNeXt::ConvNeXt(ModelOptions o, ConvNeXtOptions c) {
  STOKE_CHECK(!c.dims.empty() && c.dims.size() == c.depths.size(), "ConvNeXt",
              "expected one width per stage, got ", c.dims.size(), " widths and ", c.depths.size(),
              " depths");
  STOKE_CHECK(c.stem_patch >= 1 && c.stochastic_depth >= 0 && c.stochastic_depth < 1, "ConvNeXt",
              "expected stem_patch >= 1 and stochastic_depth in [0, 1), got ", c.stem_patch,
              " and ", c.stochastic_depth);
  // The features shrink by the stem's patch and then 2x per stage after the first: say so here,
  // not as an empty tensor deep in the forward.
  int64_t size = o.input_size / c.stem_patch;
  for (size_t s = 1; s < c.dims.size(); ++s) size /= 2;
  STOKE_CHECK(size >= 1, "ConvNeXt", o.input_size, "x", o.input_size,
              " inputs shrink to nothing: a ", c.stem_patch, "x", c.stem_patch, " stem and ",
              c.dims.size() - 1, " 2x downsamplings need at least ",
              c.stem_patch << (c.dims.size() - 1), " pixels (convnext_nano takes 28x28)");
  int64_t total_blocks = 0;
  for (const int64_t d : c.depths) total_blocks += d;
  features = register_module("features", std::make_shared<Sequential>());
  features->push_back(std::make_shared<Sequential>(std::initializer_list<ModulePtr>{
      std::make_shared<Conv2d>(
          o.in_channels, c.dims[0], c.stem_patch,
          Conv2dLayerOptions{.stride = {c.stem_patch, c.stem_patch}, .generator = o.generator}),
      std::make_shared<LayerNorm2d>(c.dims[0])}));
  int64_t block_id = 0;
  for (size_t s = 0; s < c.dims.size(); ++s) {
    auto stage = std::make_shared<Sequential>();
    for (int64_t b = 0; b < c.depths[s]; ++b) {
      // Stochastic depth grows linearly from 0 at the first block to `stochastic_depth`.
      const double p = total_blocks > 1 ? c.stochastic_depth * static_cast<double>(block_id) /
                                              static_cast<double>(total_blocks - 1)
                                        : 0.0;
      ++block_id;
      stage->push_back(std::make_shared<CNBlock>(c.dims[s], c.layer_scale, p, o.generator));
    }
    features->push_back(stage);
    if (s + 1 < c.dims.size())
      features->push_back(std::make_shared<Sequential>(std::initializer_list<ModulePtr>{
          std::make_shared<LayerNorm2d>(c.dims[s]),
          std::make_shared<Conv2d>(
              c.dims[s], c.dims[s + 1], 2,
              Conv2dLayerOptions{.stride = {2, 2}, .generator = o.generator})}));
  }
  classifier = register_module(
      "classifier", std::make_shared<Sequential>(std::initializer_list<ModulePtr>{
                        std::make_shared<LayerNorm2d>(c.dims.back()), std::make_shared<Flatten>(1),
                        std::make_shared<Linear>(c.dims.back(), o.num_classes,
                                                 LinearOptions{.generator = o.generator})}));
  // torchvision's initialization: convolutions and linear layers from a normal of std 0.02
  // truncated at +-2, biases 0 (the LayerNorms keep ones and zeros).
  for_each_module(*this, [&](Module& m) {
    if (auto* conv = dynamic_cast<Conv2d*>(&m)) {
      init::trunc_normal_(conv->weight, 0.02, -2, 2, o.generator);
      if (conv->bias.defined()) init::zeros_(conv->bias);
    } else if (auto* linear = dynamic_cast<Linear*>(&m)) {
      init::trunc_normal_(linear->weight, 0.02, -2, 2, o.generator);
      if (linear->bias.defined()) init::zeros_(linear->bias);
    }
  });
}

Tensor ConvNeXt::forward(const Tensor& x) {
  return (*classifier)(adaptive_avg_pool2d((*features)(x), {1, 1}));
}

}  // namespace stoke::nn::models
