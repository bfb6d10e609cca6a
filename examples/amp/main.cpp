// examples/amp: mixed-precision training with autocast and the GradScaler, as in PyTorch.
//
//   build/examples/stoke-example-amp [--dtype f16|bf16] [--steps N] [--device cpu|cuda]
//
// Inside `autocast`, the ops that gain from it (conv, linear, matmul) run in f16 or bf16 and the
// ones that need range (softmax, losses, norms' statistics) in f32; the parameters stay f32. With
// f16 the loss is scaled before backward so that small gradients do not flush to zero, and the
// GradScaler unscales them, skips a step whose gradients overflowed and adapts the scale. bf16 has
// f32's range and needs no scaler (the disabled scaler just steps).
#include <cstdio>
#include <cstdlib>
#include <string>

#include "stoke/stoke.h"

using namespace stoke;

int main(int argc, char** argv) {
  DType dtype = DType::f16;
  int64_t steps = 30;
  Device device = Device::cpu();
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--dtype" && (value == "f16" || value == "bf16"))
      dtype = value == "f16" ? DType::f16 : DType::bf16;
    else if (flag == "--steps")
      steps = std::atoll(value.c_str());
    else if (flag == "--device" && (value == "cpu" || value == "cuda"))
      device = value == "cpu" ? Device::cpu() : Device::cuda();
    else
      return std::fprintf(stderr, "amp: bad flag %s %s\n", flag.c_str(), value.c_str()), 2;
  }
  try {
    manual_seed(0);
    auto model = nn::models::make_model("resnet8");  // batch norm, convs, a linear head
    model->to(device);
    nn::optim::SGD opt(model->parameters(), {.lr = 0.05, .momentum = 0.9});
    nn::amp::GradScaler scaler({.enabled = dtype == DType::f16});

    // One fixed batch of 32 random 28x28 images, learned by heart: the loss must fall.
    Tensor images = randn({32, 1, 28, 28}).to(device);
    Tensor labels = randint(0, 10, {32}).to(device);
    double first = 0, last = 0;
    for (int64_t step = 0; step < steps; ++step) {
      Tensor loss;
      {
        autocast region(device.type, {.dtype = dtype});
        Tensor logits = (*model)(images);      // f16/bf16 from the convs and the linear layer
        loss = cross_entropy(logits, labels);  // f32: losses run in f32 under autocast
      }
      opt.zero_grad();
      scaler.scale(loss).backward();  // backward outside the region, as in torch
      const bool skipped = scaler.step(opt);
      scaler.update();
      const double value = loss.item();
      if (step == 0) first = value;
      last = value;
      if (step % 10 == 0 || skipped)
        std::printf("step %3lld: loss %.4f, scale %g%s\n", static_cast<long long>(step), value,
                    scaler.get_scale(), skipped ? " (skipped: inf/NaN gradients)" : "");
    }
    std::printf("%s on %s: loss %.4f -> %.4f in %lld steps, %lld skipped, final scale %g\n",
                dtype_name(dtype), device.str().c_str(), first, last, static_cast<long long>(steps),
                static_cast<long long>(scaler.skipped_steps()), scaler.get_scale());
    return last < first ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "amp: %s\n", e.what());
    return 1;
  }
}
