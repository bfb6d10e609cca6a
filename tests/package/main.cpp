// Smoke test of the installed package: creates tensors and runs a small backward pass through
// the public headers only. Prints "package ok" and exits 0 on success.
#include <cstdio>
#include <vector>

#include "stoke/stoke.h"

int main() {
  using namespace stoke;
  try {
    Tensor x = randn({3, 4}, {.requires_grad = true});
    // A transpose view made contiguous: both steps are recorded by autograd.
    Tensor y = x.t().contiguous();
    if (y.shape() != Shape{4, 3} || !y.requires_grad()) {
      std::fprintf(stderr, "package: unexpected y: shape %s\n", y.str().c_str());
      return 1;
    }
    y.backward(ones({4, 3}));
    Tensor g = x.grad();
    if (!g.defined() || g.shape() != Shape{3, 4}) {
      std::fprintf(stderr, "package: x.grad() missing or of the wrong shape\n");
      return 1;
    }
    for (float v : g.to_vector<float>()) {
      if (v != 1.0f) {
        std::fprintf(stderr, "package: expected x.grad() all ones, got\n%s\n", g.str().c_str());
        return 1;
      }
    }
    // One training step of LeNet-5 through the installed nn/ and optimizer headers.
    auto model = nn::models::make_model("lenet5");
    nn::optim::SGD opt(model->parameters(), {.lr = 0.1, .momentum = 0.9});
    Tensor images = randn({8, 1, 28, 28});
    Tensor labels = randint(0, 10, {8});
    const double before = cross_entropy((*model)(images), labels).item();
    for (int step = 0; step < 5; ++step) {
      cross_entropy((*model)(images), labels).backward();
      opt.step();
      opt.zero_grad();
    }
    const double after = cross_entropy((*model)(images), labels).item();
    if (!(after < before)) {
      std::fprintf(stderr, "package: LeNet-5 loss did not decrease (%g -> %g)\n", before, after);
      return 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "package: %s\n", e.what());
    return 1;
  }
  std::printf("package ok\n");
  return 0;
}
