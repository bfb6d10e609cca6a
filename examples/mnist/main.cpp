// examples/mnist: train a small CNN of your own on MNIST or Fashion-MNIST, in one file.
//
//   build/examples/stoke-example-mnist [--data DIR] [--epochs N] [--limit-train N]
//                                      [--limit-test N] [--out FILE]
//
// What it shows: a Module defined here (its layers registered under PyTorch's state_dict names),
// the Dataset and the threaded DataLoader, uint8 batches normalized to f32, SGD with momentum,
// evaluation under NoGradGuard, and a safetensors checkpoint saved and loaded into a new model.
// DIR holds {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]; Debian's dataset-fashion-mnist
// (scripts/install-deps.sh) puts Fashion-MNIST in the default place.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "stoke/stoke.h"

using namespace stoke;

// Two conv blocks and a classifier. register_module names the children: the checkpoint's keys
// are "conv1.weight", "conv1.bias", ..., as torch would name the same nn.Module.
class Net : public nn::Module {
 public:
  Net() {
    conv1 = register_module(
        "conv1", std::make_shared<nn::Conv2d>(1, 16, 3, nn::Conv2dLayerOptions{.padding = {1, 1}}));
    conv2 = register_module("conv2", std::make_shared<nn::Conv2d>(
                                         16, 32, 3, nn::Conv2dLayerOptions{.padding = {1, 1}}));
    fc = register_module("fc", std::make_shared<nn::Linear>(32 * 7 * 7, 10));
  }
  Tensor forward(const Tensor& x) override {
    const ops::Pool2dOptions pool{.kernel_size = {2, 2}};
    Tensor h = max_pool2d(relu(conv1->forward(x)), pool);  // (N, 16, 14, 14)
    h = max_pool2d(relu(conv2->forward(h)), pool);         // (N, 32, 7, 7)
    return fc->forward(h.flatten(1));                      // (N, 10) logits
  }
  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::Linear> fc;
};

// Fashion-MNIST's pixel mean and standard deviation over its training set (x / 255).
const data::NormalizeOptions kNormalize{.mean = {0.2860f}, .std = {0.3530f}};

// Accuracy of `model` on every batch of `loader`, without building a graph.
double evaluate(Net& model, data::DataLoader& loader) {
  NoGradGuard no_grad;
  model.eval();
  int64_t correct = 0, seen = 0;
  loader.set_epoch(0);
  while (auto batch = loader.next()) {
    Tensor logits = model(data::normalize(batch->images, kNormalize));
    const auto pred = argmax(logits, 1).to_vector<int64_t>();
    const auto want = batch->labels.to_vector<int64_t>();
    for (size_t i = 0; i < pred.size(); ++i) correct += pred[i] == want[i];
    seen += static_cast<int64_t>(pred.size());
  }
  model.train();
  return seen ? 100.0 * static_cast<double>(correct) / static_cast<double>(seen) : 0.0;
}

int main(int argc, char** argv) {
  std::string dir = "/usr/share/datasets/fashion-mnist", out = "mnist_example.safetensors";
  int64_t epochs = 2, limit_train = 0, limit_test = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--data")
      dir = value;
    else if (flag == "--out")
      out = value;
    else if (flag == "--epochs")
      epochs = std::atoll(value.c_str());
    else if (flag == "--limit-train")
      limit_train = std::atoll(value.c_str());
    else if (flag == "--limit-test")
      limit_test = std::atoll(value.c_str());
    else
      return std::fprintf(stderr, "mnist: unknown flag %s\n", flag.c_str()), 2;
  }
  if (argc % 2 == 0) return std::fprintf(stderr, "mnist: %s needs a value\n", argv[argc - 1]), 2;
  try {
    manual_seed(1);  // the weights' initialization
    auto train_set = std::make_shared<data::IdxImageDataset>(
        dir, data::IdxImageOptions{.train = true, .limit = limit_train});
    auto test_set = std::make_shared<data::IdxImageDataset>(
        dir, data::IdxImageOptions{.train = false, .limit = limit_test});
    // Two worker threads build batches (uint8 NHWC) while the model trains on the last one.
    data::DataLoader train_loader(train_set, {.batch_size = 64, .seed = 1, .workers = 2});
    data::DataLoader test_loader(test_set, {.batch_size = 256, .shuffle = false});

    Net model;
    nn::optim::SGD opt(model.parameters(), {.lr = 0.05, .momentum = 0.9, .weight_decay = 5e-4});
    std::printf("%lld parameters, %lld training images, %lld test images\n",
                static_cast<long long>(model.num_parameters()),
                static_cast<long long>(train_set->size()),
                static_cast<long long>(test_set->size()));

    for (int64_t epoch = 0; epoch < epochs; ++epoch) {
      train_loader.set_epoch(epoch);  // a new shuffle every epoch
      double loss_sum = 0;
      int64_t steps = 0;
      while (auto batch = train_loader.next()) {
        Tensor loss =
            cross_entropy(model(data::normalize(batch->images, kNormalize)), batch->labels);
        opt.zero_grad();
        loss.backward();
        opt.step();
        loss_sum += loss.item();
        ++steps;
      }
      std::printf("epoch %lld: mean loss %.4f, test accuracy %.2f%%\n",
                  static_cast<long long>(epoch + 1), loss_sum / static_cast<double>(steps),
                  evaluate(model, test_loader));
    }

    // A checkpoint is the state_dict as safetensors (torch's safetensors.torch.load_file reads it).
    nn::save_safetensors(out, model.state_dict());
    Net restored;
    restored.load_state_dict(nn::load_safetensors(out).tensors);
    const double a = evaluate(model, test_loader), b = evaluate(restored, test_loader);
    std::printf("saved %s; the restored model scores %.2f%% (the trained one %.2f%%)\n",
                out.c_str(), b, a);
    return a == b ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mnist: %s\n", e.what());
    return 1;
  }
}
