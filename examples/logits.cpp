// stoke-logits: loads a model's state_dict from a safetensors file and prints the logits of the
// first N test images as one JSON line. bench/check_interop.py compares them with PyTorch's
// logits for the same file loaded into the PyTorch twin of the model.
//
//   stoke-logits --model lenet5 --weights ckpt/best.safetensors [--count 16] [--data DIR]
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "data/batcher.h"
#include "data/idx.h"
#include "nn/checkpoint/safetensors.h"
#include "nn/models/models.h"
#include "stoke/stoke.h"

using namespace stoke;

namespace {
const char kUsage[] =
    "usage: stoke-logits --weights FILE.safetensors [--model lenet5] [--count 16] [--data DIR]\n"
    "  prints the logits of the first COUNT Fashion-MNIST test images as one JSON line\n";
}  // namespace

int main(int argc, char** argv) {
  std::string model_name = "lenet5", weights, data = "/usr/share/datasets/fashion-mnist";
  int64_t count = 16;
  for (int i = 1; i < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--help" || k == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "stoke-logits: flag %s needs a value\n%s", k.c_str(), kUsage);
      return 2;
    }
    const std::string v = argv[i + 1];
    if (k == "--model") {
      model_name = v;
    } else if (k == "--weights") {
      weights = v;
    } else if (k == "--data") {
      data = v;
    } else if (k == "--count") {
      // A count in [1, 10000] (the test set's size), parsed without exceptions.
      char* end = nullptr;
      errno = 0;
      const long long n = std::strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || errno == ERANGE || n < 1 || n > 10000) {
        std::fprintf(stderr, "stoke-logits: --count expects an integer in [1, 10000], got '%s'\n",
                     v.c_str());
        return 2;
      }
      count = n;
    } else {
      std::fprintf(stderr, "stoke-logits: unknown flag %s\n%s", k.c_str(), kUsage);
      return 2;
    }
  }
  if (weights.empty()) {
    std::fprintf(stderr, "stoke-logits: --weights is required\n%s", kUsage);
    return 2;
  }
  try {
    auto model = nn::models::make_model(model_name);
    model->load_state_dict(nn::load_safetensors(weights).tensors);
    model->eval();
    const auto test = data::load_mnist(data, false);
    data::InMemoryBatcher batcher(
        test.images.narrow(0, 0, count), test.labels.narrow(0, 0, count),
        {.batch_size = count, .shuffle = false, .mean = 0.2860f, .std = 0.3530f});
    NoGradGuard no_grad;
    const auto logits = (*model)(batcher.batch(0).images).to_vector<float>();
    std::printf("{\"model\":\"%s\",\"count\":%lld,\"logits\":[", model_name.c_str(),
                static_cast<long long>(count));
    for (size_t i = 0; i < logits.size(); ++i) std::printf("%s%.9g", i ? "," : "", logits[i]);
    std::printf("]}\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
