// stoke-test-forward: loads a state dict saved by PyTorch (torchvision's names, strict) into a
// model of the zoo and writes its eval-mode logits, for tests/nn/resnet50_vs_torchvision.py, which
// compares them with torchvision's float64 forward of the same weights.
//
//   stoke-test-forward --model resnet50 --in-channels 3 --classes 1000 --weights W.safetensors
//                      --input X.safetensors --out OUT.safetensors
//
// W.safetensors is `model.state_dict()` as PyTorch names it (every parameter and buffer, the
// batch norms' int64 num_batches_tracked included); X.safetensors holds "x" (N, C, H, W) f32.
// OUT.safetensors gets "logits" (N, classes) f32. The thread count comes from STOKE_NUM_THREADS.
#include <cstdio>
#include <string>

#include "stoke/stoke.h"

namespace {

using namespace stoke;

int run(int argc, char** argv) {
  std::string model_name, weights, input, out;
  int64_t in_channels = 3, classes = 1000;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    STOKE_CHECK(i + 1 < argc, "stoke-test-forward", "flag ", a, " expects a value");
    const std::string v = argv[++i];
    if (a == "--model")
      model_name = v;
    else if (a == "--in-channels")
      in_channels = std::stoll(v);
    else if (a == "--classes")
      classes = std::stoll(v);
    else if (a == "--weights")
      weights = v;
    else if (a == "--input")
      input = v;
    else if (a == "--out")
      out = v;
    else
      STOKE_FAIL("stoke-test-forward", "unknown flag ", a);
  }
  STOKE_CHECK(!model_name.empty() && !weights.empty() && !input.empty() && !out.empty(),
              "stoke-test-forward", "--model, --weights, --input and --out are required");
  auto model =
      nn::models::make_model(model_name, {.in_channels = in_channels, .num_classes = classes});
  model->load_state_dict(nn::load_safetensors(weights).tensors, /*strict=*/true);
  model->eval();
  Tensor x;
  for (const auto& [name, t] : nn::load_safetensors(input).tensors)
    if (name == "x") x = t;
  STOKE_CHECK(x.defined(), "stoke-test-forward", input, " has no tensor 'x'");
  NoGradGuard no_grad;
  const Tensor logits = model->forward(x);
  nn::save_safetensors(out, {{"logits", logits}});
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stoke-test-forward: %s\n", e.what());
    return 1;
  }
}
