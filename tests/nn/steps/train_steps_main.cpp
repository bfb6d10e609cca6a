// stoke-test-train-steps: trains a model of the zoo for a few steps from given weights and batches
// and writes what each step computed, for tests/nn/train_vs_torch.py, which compares it with
// PyTorch's float64 run of the same steps.
//
//   stoke-test-train-steps --model resnet8 --init DIR/init.safetensors --optimizer sgd|adamw
//                          --steps 5 --out DIR
//
// init.safetensors holds "param.<name>" and "buffer.<name>" (the state dict to start from, strict)
// and "x.<k>", "y.<k>" (the batch of step k, k = 1..steps). After step k the program writes
// DIR/step<k>.safetensors with "loss" (the batch's mean cross-entropy before the update),
// "grad.<name>" (the gradient of the loss alone: weight decay is the optimizer's), "param.<name>"
// and "buffer.<name>" (after the update), and "optim.<key>" (the optimizer's state_dict, which
// init.safetensors may also hold to start from). Dropout and stochastic depth are off (p = 0), so
// the step is deterministic and torch's twin computes the same function. The thread count and the
// conv paths come from the environment (STOKE_NUM_THREADS, STOKE_CONV_*), as in any stoke program.
//
// --decisions 1 also writes "relu.<i>" (U8): whether each element of the step's i-th ReLU output
// (in call order, batch norm's fused ReLU included) is above zero, the decision stoke's float32
// took at the kink (autograd/elementwise_relu_observer.h).
//
// --plant NAME:STEP:REL multiplies the first row of parameter NAME's gradient (its first output
// channel) by 1 + REL at step STEP, before the step is written and taken: a planted error that
// the comparison must catch (ctest "... with 3% planted in one channel of a depthwise weight
// gradient fails, naming it").
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "autograd/elementwise_relu_observer.h"
#include "stoke/stoke.h"

namespace {

using namespace stoke;
using nn::NamedTensors;

std::shared_ptr<nn::Module> build(const std::string& name) {
  using namespace nn::models;
  // The zoo's models with their stochastic layers at p = 0 (torch's twins get the same).
  if (name == "efficientnet_b0")
    return std::make_shared<EfficientNet>(ModelOptions{},
                                          EfficientNetOptions{.dropout = 0, .stochastic_depth = 0});
  if (name == "convnext_nano")
    return std::make_shared<ConvNeXt>(ModelOptions{}, ConvNeXtOptions{.dims = {32, 64, 128, 256},
                                                                      .depths = {2, 2, 6, 2},
                                                                      .stem_patch = 2,
                                                                      .stochastic_depth = 0});
  return make_model(name);
}

std::map<std::string, Tensor> by_name(const NamedTensors& tensors) {
  std::map<std::string, Tensor> m;
  for (const auto& [n, t] : tensors) m.emplace(n, t);
  return m;
}

Tensor require(const std::map<std::string, Tensor>& m, const std::string& key,
               const std::string& path) {
  auto it = m.find(key);
  STOKE_CHECK(it != m.end(), "stoke-test-train-steps", path, " has no tensor '", key, "'");
  return it->second;
}

int run(int argc, char** argv) {
  std::string model_name, init_path, optimizer = "sgd", out_dir, plant;
  int steps = 5;
  bool decisions = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    STOKE_CHECK(i + 1 < argc, "stoke-test-train-steps", "flag ", a, " expects a value");
    const std::string v = argv[++i];
    if (a == "--model")
      model_name = v;
    else if (a == "--init")
      init_path = v;
    else if (a == "--optimizer")
      optimizer = v;
    else if (a == "--steps")
      steps = std::stoi(v);
    else if (a == "--out")
      out_dir = v;
    else if (a == "--plant")
      plant = v;
    else if (a == "--decisions")
      decisions = v == "1";
    else
      STOKE_FAIL("stoke-test-train-steps", "unknown flag ", a);
  }
  STOKE_CHECK(!model_name.empty() && !init_path.empty() && !out_dir.empty(),
              "stoke-test-train-steps", "--model, --init and --out are required");

  const auto init = by_name(nn::load_safetensors(init_path).tensors);
  auto model = build(model_name);
  NamedTensors state;
  for (const auto& [name, t] : model->state_dict()) {
    const bool is_param = init.count("param." + name) != 0;
    state.emplace_back(name, require(init, (is_param ? "param." : "buffer.") + name, init_path));
  }
  model->load_state_dict(state, /*strict=*/true);
  model->train();

  std::unique_ptr<nn::optim::Optimizer> opt;
  if (optimizer == "sgd")
    opt = std::make_unique<nn::optim::SGD>(
        model->parameters(),
        nn::optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 5e-4});
  else if (optimizer == "adamw")
    opt = std::make_unique<nn::optim::AdamW>(
        model->parameters(), nn::optim::AdamWOptions{.lr = 1e-3, .weight_decay = 1e-2});
  else
    STOKE_FAIL("stoke-test-train-steps", "--optimizer expects sgd or adamw, got '", optimizer, "'");

  // Optional "optim.<key>": an optimizer state to start from (the optimizer's state_dict names).
  NamedTensors opt_state;
  for (const auto& [name, t] : init)
    if (name.rfind("optim.", 0) == 0) opt_state.emplace_back(name.substr(6), t);
  if (!opt_state.empty()) opt->load_state_dict(opt_state);

  Tensor plant_param;  // --plant's parameter
  int plant_step = 0;
  double plant_rel = 0;
  if (!plant.empty()) {
    const auto c1 = plant.find(':'), c2 = plant.rfind(':');
    STOKE_CHECK(c1 != std::string::npos && c2 != c1, "stoke-test-train-steps",
                "--plant expects NAME:STEP:REL, got '", plant, "'");
    const std::string plant_name = plant.substr(0, c1);
    plant_step = std::stoi(plant.substr(c1 + 1, c2 - c1 - 1));
    plant_rel = std::stod(plant.substr(c2 + 1));
    const auto params = by_name(model->named_parameters());
    STOKE_CHECK(params.count(plant_name) != 0, "stoke-test-train-steps",
                "--plant names no parameter '", plant_name, "'");
    plant_param = params.at(plant_name);
  }

  std::vector<Tensor> relu_masks;  // this step's ReLU decisions, in call order (--decisions 1)
  if (decisions)
    set_relu_observer([&](const Tensor& y) { relu_masks.push_back(gt(y, 0.0).to(DType::u8)); });

  for (int k = 1; k <= steps; ++k) {
    relu_masks.clear();
    const std::string key = std::to_string(k);
    const Tensor x = require(init, "x." + key, init_path);
    const Tensor y = require(init, "y." + key, init_path);
    opt->zero_grad();
    Tensor loss = cross_entropy(model->forward(x), y);
    loss.backward();
    if (k == plant_step) {
      NoGradGuard no_grad;
      mul_(plant_param.grad().select(0, 0), 1 + plant_rel);
    }
    NamedTensors out;
    out.emplace_back("loss", loss.detach().to(DType::f64));
    for (const auto& [name, p] : model->named_parameters()) {
      STOKE_CHECK(p.grad().defined(), "stoke-test-train-steps", "parameter ", name,
                  " got no gradient at step ", k);
      out.emplace_back("grad." + name, p.grad().clone());
    }
    opt->step();
    for (const auto& [name, p] : model->named_parameters())
      out.emplace_back("param." + name, p.detach().clone());
    for (const auto& [name, b] : model->named_buffers())
      out.emplace_back("buffer." + name, b.clone());
    for (const auto& [name, t] : opt->state_dict()) out.emplace_back("optim." + name, t.clone());
    for (size_t i = 0; i < relu_masks.size(); ++i)
      out.emplace_back("relu." + std::to_string(i), relu_masks[i]);
    // The parameters' order, which numbers the optimizer's state ("optim.state.<i>. ...").
    std::string order;
    for (const auto& [name, p] : model->named_parameters())
      order += (order.empty() ? "" : ",") + name;
    nn::save_safetensors(out_dir + "/step" + key + ".safetensors", out, {{"parameters", order}});
  }
  set_relu_observer({});
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stoke-test-train-steps: %s\n", e.what());
    return 1;
  }
}
