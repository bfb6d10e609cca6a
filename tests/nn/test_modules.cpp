#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <set>

#include "nn/layers.h"
#include "nn/models/models.h"
#include "stoke/stoke.h"
#include "support/fixture_tensor.h"

using namespace stoke;
using stoke::testing::max_abs_diff;
using namespace stoke::nn;

namespace {
std::vector<std::string> keys(const NamedTensors& t) {
  std::vector<std::string> k;
  for (const auto& [n, x] : t) k.push_back(n);
  return k;
}
bool has(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}
}  // namespace

TEST_CASE("models: parameter counts match the published ones", "[nn][models]") {
  const models::ModelOptions cifar{.in_channels = 3, .num_classes = 10, .input_size = 32};
  CHECK(models::make_model("lenet5")->num_parameters() == 61706);  // 1x28x28
  // ResNet-20 with 1x1-conv shortcuts: the paper's 0.27M (269,722 with option A) + 2,752.
  CHECK(models::make_model("resnet20", cifar)->num_parameters() == 272474);
  CHECK(models::make_model("resnet18", cifar)->num_parameters() == 11173962);    // 11.2M
  CHECK(models::make_model("mobilenetv2", cifar)->num_parameters() == 2296922);  // 2.3M
  CHECK(models::make_model("vgg16", cifar)->num_parameters() == 14728266);
  CHECK(models::make_model("vgg11", cifar)->num_parameters() == 9231114);
  CHECK(models::make_model("resnet9", cifar)->num_parameters() == 6573120);
  // torchvision's resnet50 (3 channels, 1000 classes).
  CHECK(models::make_model("resnet50", {.in_channels = 3, .num_classes = 1000})->num_parameters() ==
        25557032);
  // GroupNorm has BatchNorm's weight and bias and no buffers: the same counts.
  CHECK(models::make_model("resnet20_gn", cifar)->num_parameters() == 272474);
  CHECK(models::make_model("resnet18_gn", cifar)->num_parameters() == 11173962);
  CHECK(models::make_model("resnet8_gn", cifar)->named_buffers().empty());
  const int64_t r56 = models::make_model("resnet56", cifar)->num_parameters();
  CHECK(r56 > 850000);  // the paper's 0.85M
  CHECK(r56 < 860000);
  // torchvision's efficientnet_b0 and convnext_tiny with 10 classes, and the narrow ConvNeXt
  // built as torchvision.models.convnext.ConvNeXt with a 2x2 stem (bench/torch_models.py).
  CHECK(models::make_model("efficientnet_b0", cifar)->num_parameters() == 4020358);
  CHECK(models::make_model("efficientnet_b0")->num_parameters() == 4019782);  // 1 channel
  CHECK(models::make_model("convnext_tiny", cifar)->num_parameters() == 27827818);
  CHECK(models::make_model("convnext_nano", cifar)->num_parameters() == 2178794);
  CHECK(models::make_model("convnext_nano")->num_parameters() == 2178538);
  CHECK_THROWS_WITH(
      models::make_model("convnext_tiny"),
      Catch::Contains("28x28 inputs shrink to nothing") && Catch::Contains("at least 32 pixels"));
  CHECK_THROWS_WITH(models::make_model("resnet7"),
                    Catch::Contains("unknown model 'resnet7'") && Catch::Contains("lenet5"));
}

TEST_CASE("models: every model runs forward and backward on 28x28 and 32x32 inputs",
          "[nn][models]") {
  for (const auto& name : models::model_names()) {
    if (name == "resnet56" || name == "vgg16" || name == "resnet18" || name == "resnet18_gn" ||
        name == "convnext_tiny")
      continue;  // slow; same code (convnext_tiny is convnext_nano's, wider and deeper)
    for (auto [c, size] : {std::pair<int64_t, int64_t>{1, 28}, {3, 32}}) {
      INFO(name << " " << c << "x" << size);
      auto m = models::make_model(name, {.in_channels = c, .num_classes = 7, .input_size = size});
      Tensor x = randn({2, c, size, size});
      Tensor y = (*m)(x);
      REQUIRE(y.shape() == Shape{2, 7});
      y.backward(ones({2, 7}));
      for (const auto& [n, p] : m->named_parameters()) {
        INFO(n);
        REQUIRE(p.grad().defined());
      }
    }
  }
}

TEST_CASE("modules: forward hooks fire through operator() for every module that owns parameters",
          "[nn][models]") {
  for (const auto& name : models::model_names()) {
    if (name == "resnet56" || name == "vgg16" || name == "resnet18" || name == "resnet18_gn" ||
        name == "convnext_tiny")
      continue;  // slow; same code as others
    INFO(name);
    auto m = models::make_model(name, {.in_channels = 1, .num_classes = 7, .input_size = 28});
    std::map<const Module*, int> calls;
    int64_t owners = 0;
    for_each_module(*m, [&](Module& sub) {
      if (sub.named_parameters(false).empty()) return;
      ++owners;
      calls[&sub] = 0;
      sub.register_forward_hook([&calls](Module& self, const Tensor&, const Tensor&) {
        ++calls[&self];
        return Tensor();
      });
    });
    (*m)(randn({2, 1, 28, 28}));
    REQUIRE(owners > 0);
    for (const auto& [module, n] : calls) {
      INFO(module->name());
      CHECK(n == 1);  // each parameter owner runs once per forward in the zoo
    }
  }
}

TEST_CASE("modules: a pre-hook replaces the input, a hook the output, and removal stops them",
          "[nn]") {
  Generator gen(3);
  Linear lin(4, 3, {.generator = &gen});
  const Tensor x = randn({2, 4}, {}, &gen);
  const Tensor plain = lin(x);
  const int64_t pre = lin.register_forward_pre_hook(
      [](Module&, const Tensor& in) { return mul(in, 2.0); });  // exact: a power of two
  const int64_t post = lin.register_forward_hook(
      [](Module&, const Tensor& in, const Tensor& out) { return add(out, sum(in)); });
  CHECK(lin.has_forward_hooks());
  const Tensor hooked = lin(x);
  const Tensor want = add(lin.forward(mul(x, 2.0)), sum(mul(x, 2.0)));  // the same ops in order
  CHECK(hooked.to_vector<float>() == want.to_vector<float>());
  CHECK(lin.forward(x).to_vector<float>() == plain.to_vector<float>());  // forward() runs none
  lin.remove_forward_hook(pre);
  lin.remove_forward_hook(post);
  CHECK_FALSE(lin.has_forward_hooks());
  CHECK(lin(x).to_vector<float>() == plain.to_vector<float>());
  CHECK_THROWS_WITH(lin.remove_forward_hook(post), Catch::Contains("no forward hook with id"));
}

TEST_CASE("models: resnet8_pool is ResNet-8 with a 2x2 max-pool between the stem and layer1",
          "[nn][models]") {
  auto plain = models::make_model("resnet8");
  auto pooled = std::dynamic_pointer_cast<models::ResNet>(models::make_model("resnet8_pool"));
  REQUIRE(pooled);
  REQUIRE(pooled->maxpool);
  // The same parameters and state_dict (the pool has none), so one checkpoint loads in either.
  CHECK(pooled->num_parameters() == 77754);
  CHECK(keys(pooled->state_dict()) == keys(plain->state_dict()));
  pooled->load_state_dict(plain->state_dict());
  pooled->eval();
  plain->eval();
  NoGradGuard no_grad;
  manual_seed(3);
  const Tensor x = randn({2, 1, 28, 28});
  // The stem's output, pooled to 14x14, then the stages: 14x14 -> 7x7 -> 4x4.
  Tensor h = norm_relu(*pooled->bn1, pooled->conv1->forward(x));
  h = max_pool2d(h, {.kernel_size = {2, 2}});
  REQUIRE(h.shape() == Shape{2, 16, 14, 14});
  for (auto& layer : pooled->layers) h = layer->forward(h);
  CHECK(h.shape() == Shape{2, 64, 4, 4});
  const Tensor want = pooled->fc->forward(adaptive_avg_pool2d(h, {1, 1}).flatten(1));
  const Tensor got = (*pooled)(x);
  // Bit for bit: ResNet::forward (nn/models/resnet.cpp) makes these same calls on the same values,
  // so the same kernels run in the same order (a rerun).
  CHECK(max_abs_diff(got, want) == 0.0);
  // The pool changes the output: not ResNet-8 under another name.
  CHECK(max_abs_diff(got, (*plain)(x)) > 1e-3);
}

TEST_CASE("models: ResNet-50, EfficientNet-B0 and ConvNeXt keep torchvision's state_dict keys",
          "[nn][models]") {
  const auto r50 = keys(models::make_model("resnet50")->state_dict());
  CHECK(r50.size() == 320);  // as torchvision's resnet50: 161 parameters, 159 buffers
  CHECK(r50.front() == "conv1.weight");
  CHECK(has(r50, "bn1.num_batches_tracked"));
  CHECK(has(r50, "layer1.0.downsample.0.weight"));  // 64 -> 256 planes at stride 1
  CHECK(has(r50, "layer2.0.downsample.1.running_mean"));
  CHECK(!has(r50, "layer2.1.downsample.0.weight"));
  CHECK(has(r50, "layer3.5.conv3.weight"));
  CHECK(has(r50, "layer4.2.bn3.running_var"));
  CHECK(r50.back() == "fc.bias");
  const auto b0 = keys(models::make_model("efficientnet_b0")->state_dict());
  CHECK(b0.size() == 360);  // as torchvision's efficientnet_b0
  CHECK(b0.front() == "features.0.0.weight");
  CHECK(has(b0, "features.0.1.num_batches_tracked"));
  CHECK(has(b0, "features.1.0.block.0.0.weight"));  // expand ratio 1: depthwise first
  CHECK(has(b0, "features.1.0.block.1.fc1.weight"));
  CHECK(has(b0, "features.1.0.block.2.1.running_var"));
  CHECK(has(b0, "features.2.0.block.3.0.weight"));  // expand, depthwise, SE, project
  CHECK(has(b0, "features.6.3.block.2.fc2.bias"));
  CHECK(has(b0, "features.8.1.weight"));
  CHECK(b0.back() == "classifier.1.bias");
  const auto cn = keys(models::make_model("convnext_nano")->state_dict());
  CHECK(cn.size() == 128);
  CHECK(cn.front() == "features.0.0.weight");
  CHECK(has(cn, "features.0.1.bias"));  // the stem's LayerNorm2d
  CHECK(has(cn, "features.1.0.layer_scale"));
  CHECK(has(cn, "features.1.1.block.0.weight"));  // depthwise 7x7
  CHECK(has(cn, "features.1.1.block.2.weight"));  // LayerNorm
  CHECK(has(cn, "features.5.5.block.5.bias"));
  CHECK(has(cn, "features.6.1.weight"));  // the last downsampling conv
  CHECK(cn.back() == "classifier.2.bias");
  auto tiny = models::make_model("convnext_tiny", {.in_channels = 3, .input_size = 32});
  CHECK(tiny->state_dict().size() == 182);
  for (const auto& [n, p] : tiny->named_parameters())
    if (n == "features.1.0.layer_scale")
      CHECK(p.to(DType::f64).contiguous().data<double>()[0] == Approx(1e-6));
}

TEST_CASE("modules: state_dict keys follow PyTorch's names", "[nn][modules]") {
  auto m = models::make_model("resnet20", {.in_channels = 3, .input_size = 32});
  const auto k = keys(m->state_dict());
  CHECK(k.front() == "conv1.weight");
  CHECK(has(k, "bn1.running_mean"));
  CHECK(has(k, "bn1.num_batches_tracked"));
  CHECK(has(k, "layer1.0.conv1.weight"));
  CHECK(has(k, "layer1.2.bn2.running_var"));
  CHECK(has(k, "layer2.0.downsample.0.weight"));
  CHECK(has(k, "layer2.0.downsample.1.bias"));
  CHECK_FALSE(has(k, "layer1.0.downsample.0.weight"));
  CHECK(k.back() == "fc.bias");
  CHECK(std::set<std::string>(k.begin(), k.end()).size() == k.size());
  // Parameters exclude buffers.
  CHECK_FALSE(has(keys(m->named_parameters()), "bn1.running_mean"));
  CHECK(has(keys(m->named_buffers()), "bn1.running_mean"));
  // The GroupNorm ResNet keeps the norm layers' names (torchvision's norm_layer) and its group
  // counts: min(32, C / 2).
  auto g = models::make_model("resnet20_gn", {.in_channels = 3, .input_size = 32});
  const auto kg = keys(g->state_dict());
  CHECK(has(kg, "bn1.weight"));
  CHECK(has(kg, "layer2.0.downsample.1.bias"));
  CHECK(has(kg, "layer3.2.bn2.weight"));
  CHECK_FALSE(has(kg, "bn1.running_mean"));
  auto* r = dynamic_cast<models::ResNet*>(g.get());
  REQUIRE(r);
  auto gn1 = std::dynamic_pointer_cast<GroupNorm>(r->bn1);
  REQUIRE(gn1);
  CHECK(gn1->num_groups == 8);  // 16 channels
  auto* b = dynamic_cast<models::BasicBlock*>(r->layers[2]->named_children()[0].second.get());
  REQUIRE(b);
  CHECK(std::dynamic_pointer_cast<GroupNorm>(b->bn1)->num_groups == 32);  // 64 channels
}

TEST_CASE("modules: load_state_dict copies values and reports every mismatch at once",
          "[nn][modules]") {
  auto a = models::make_model("lenet5");
  auto b = models::make_model("lenet5");
  b->load_state_dict(a->state_dict());
  for (size_t i = 0; i < a->state_dict().size(); ++i)  // a copy: bit for bit
    CHECK(a->state_dict()[i].second.to_vector<float>() ==
          b->state_dict()[i].second.to_vector<float>());
  NamedTensors bad = a->state_dict();
  bad.erase(bad.begin());                        // missing conv1.weight
  bad[0].second = zeros({3});                    // conv1.bias of the wrong shape
  bad[1].second = bad[1].second.to(DType::f64);  // conv2.weight of the wrong dtype
  bad.emplace_back("extra.weight", zeros({1}));  // unexpected
  try {
    b->load_state_dict(bad);
    FAIL("expected an error");
  } catch (const Error& e) {
    const std::string msg = e.what();
    CHECK(msg.find("4 problem(s)") != std::string::npos);
    CHECK(msg.find("missing key 'conv1.weight'") != std::string::npos);
    CHECK(msg.find("'conv1.bias': expected shape [6], got [3]") != std::string::npos);
    CHECK(msg.find("'conv2.weight': expected dtype f32, got f64") != std::string::npos);
    CHECK(msg.find("unexpected key 'extra.weight'") != std::string::npos);
  }
}

TEST_CASE("layers: PyTorch's default initialization statistics", "[nn][init]") {
  Generator g(11);
  Linear fc(784, 256, {.generator = &g});
  // kaiming_uniform(a=sqrt(5)): U(-1/sqrt(fan_in), 1/sqrt(fan_in)), std = bound / sqrt(3).
  const double bound = 1 / std::sqrt(784.0);
  const auto w = fc.weight.to_vector<double>();
  double mean = 0, sq = 0, lo = 1, hi = -1;
  for (double v : w) {
    mean += v;
    sq += v * v;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  mean /= static_cast<double>(w.size());
  const double std = std::sqrt(sq / static_cast<double>(w.size()) - mean * mean);
  CHECK(std::fabs(std - bound / std::sqrt(3.0)) < 0.01 * bound);
  CHECK(lo >= -bound);
  CHECK(hi <= bound);
  CHECK(std::fabs(mean) < 0.01 * bound);
  BatchNorm bn(8);
  CHECK(bn.weight.to_vector<float>() == std::vector<float>(8, 1.f));
  CHECK(bn.bias.to_vector<float>() == std::vector<float>(8, 0.f));
  CHECK(bn.running_var.to_vector<float>() == std::vector<float>(8, 1.f));
}

TEST_CASE("modules: train/eval, to(dtype), zero_grad, batch norm bookkeeping", "[nn][modules]") {
  auto m = models::make_model("resnet8");
  Tensor x = randn({4, 1, 28, 28});
  (*m)(x).backward(ones({4, 10}));
  auto bn1 =
      std::dynamic_pointer_cast<BatchNorm>(std::dynamic_pointer_cast<models::ResNet>(m)->bn1);
  REQUIRE(bn1);
  CHECK(bn1->num_batches_tracked.item<int64_t>() == 1);
  CHECK(bn1->running_mean.to_vector<float>() != std::vector<float>(16, 0.f));
  m->eval();
  CHECK_FALSE(bn1->is_training());
  const auto before = bn1->running_mean.to_vector<float>();
  (void)(*m)(x);
  CHECK(bn1->running_mean.to_vector<float>() == before);  // eval does not update running stats
  m->zero_grad();
  for (auto& p : m->parameters()) CHECK_FALSE(p.grad().defined());
  Tensor w = std::dynamic_pointer_cast<models::ResNet>(m)->conv1->weight;
  m->to(DType::f64);
  CHECK(w.dtype() == DType::f64);  // the handle the module holds sees the cast
  CHECK(bn1->num_batches_tracked.dtype() == DType::i64);
  CHECK((*m)(x.to(DType::f64)).dtype() == DType::f64);
}

TEST_CASE("modules: BatchNorm1d and BatchNorm2d carry torch's names", "[nn]") {
  CHECK(nn::BatchNorm1d(4).name() == "BatchNorm1d");
  CHECK(nn::BatchNorm2d(4).name() == "BatchNorm2d");
  nn::BatchNorm1d bn(3);
  CHECK(bn.forward(randn({5, 3})).shape() == Shape{5, 3});
}

TEST_CASE("models: the initialization generator need not outlive the model", "[nn][models]") {
  // stoke-train builds its model with a Generator on the stack; dropout and drop path at
  // training time draw from the default generator, never from that one.
  for (const char* name : {"efficientnet_b0", "convnext_nano"}) {
    INFO(name);
    auto make = [&] {
      Generator init(7);
      return models::make_model(name, {.generator = &init});
    };
    auto m = make();
    std::vector<char> scribble(1 << 16, 0x5a);  // reuse the stack the generator lived on
    (void)scribble;
    m->train();
    manual_seed(3);
    const Tensor a = (*m)(randn({2, 1, 28, 28}, {}, nullptr));
    CHECK(a.shape() == Shape{2, 10});
  }
}
