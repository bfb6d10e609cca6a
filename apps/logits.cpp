// stoke-logits: loads a model's state_dict from a safetensors file and prints the logits of the
// first N test images as one JSON line. bench/check_interop.py compares them with PyTorch's
// logits for the same file loaded into the PyTorch twin of the model.
//
//   stoke-logits --model lenet5 --weights ckpt/best.safetensors [--count 16] [--data DIR]
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "data/batcher.h"
#include "data/channel_stats.h"
#include "data/idx.h"
#include "nn/checkpoint/safetensors.h"
#include "nn/models/models.h"
#include "stoke/stoke.h"

using namespace stoke;

namespace {
const char kUsage[] =
    "usage: stoke-logits --weights FILE.safetensors [--model lenet5] [--count N] [--data DIR]\n"
    "  prints the logits of the first N Fashion-MNIST test images as one JSON line,\n"
    "  normalized with the mean and std in the file's metadata (stoke-train's checkpoints),\n"
    "  or Fashion-MNIST's 0.2860 / 0.3530 for a file without them;\n"
    "  N in [1, 10000] (16). Weights or logits that are not finite are an error (exit 1),\n"
    "  naming the tensor or the image: JSON has no nan or inf.\n";

// The index of the first value of `v` that is not finite, or -1.
template <class T>
int64_t first_non_finite(const std::vector<T>& v) {
  for (size_t i = 0; i < v.size(); ++i)
    if (!std::isfinite(v[i])) return static_cast<int64_t>(i);
  return -1;
}

const char* name_of(double x) {
  return std::isnan(x) ? "nan" : x > 0 ? "inf" : "-inf";
}
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
    const nn::SafetensorsFile file = nn::load_safetensors(weights);
    // A diverged checkpoint's nan would be printed as a bare nan: not JSON, and exit 0 besides.
    for (const auto& [name, t] : file.tensors) {
      if (!is_floating(t.dtype())) continue;
      const std::vector<double> v = t.to_vector<double>();
      const int64_t bad = first_non_finite(v);
      STOKE_CHECK(bad < 0, "stoke-logits", weights, ": tensor '", name, "' is not finite (element ",
                  bad, " is ", bad < 0 ? "" : name_of(v[static_cast<size_t>(bad)]),
                  "): the weights diverged; no logits printed");
    }
    model->load_state_dict(file.tensors);
    model->eval();
    // The normalization the weights were trained with: stoke-train keeps it in the checkpoint's
    // metadata. A file without it (a PyTorch state_dict, an older checkpoint) gets
    // Fashion-MNIST's 0.2860 / 0.3530, what stoke-train used before it kept them.
    float mean = 0.2860f, std = 0.3530f;
    if (const auto n = data::read_normalization(file.metadata, "stoke-logits", weights)) {
      STOKE_CHECK(n->mean.size() == 1 && n->std.size() == 1, "stoke-logits", weights,
                  ": the weights were trained on ", std::max(n->mean.size(), n->std.size()),
                  "-channel images (normalize_mean '", file.metadata.at("normalize_mean"),
                  "'); the test images here are ", data, "'s, with 1 channel");
      mean = n->mean[0];
      std = n->std[0];
    }
    // Only the first COUNT test images are read (the files inflated only as far as they need).
    const auto test = data::load_mnist(data, false, count);
    STOKE_CHECK(test.images.size(0) == count, "stoke-logits", "--count ", count, ": ", data,
                " has only ", test.images.size(0), " test images");
    data::InMemoryBatcher batcher(
        test.images, test.labels,
        {.batch_size = count, .shuffle = false, .mean = mean, .std = std});
    NoGradGuard no_grad;
    const auto logits = (*model)(batcher.batch(0).images).to_vector<float>();
    // Finite weights can still overflow (a logit past f32's range is inf).
    const int64_t bad = first_non_finite(logits);
    const int64_t classes = static_cast<int64_t>(logits.size()) / count;
    STOKE_CHECK(bad < 0, "stoke-logits", weights, ": the logits of image ", bad / classes,
                " are not finite (", bad < 0 ? "" : name_of(logits[static_cast<size_t>(bad)]),
                "): the model overflowed; no logits printed");
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
