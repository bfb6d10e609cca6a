// A graph is freed after backward and item() keeps nothing alive: over 1,000 steps of a tiny
// training loop that logs its loss, the allocator's live memory does not grow.
#include <catch2/catch.hpp>

#include "autograd/elementwise.h"
#include "autograd/linalg.h"
#include "autograd/loss.h"
#include "stoke/stoke.h"

using namespace stoke;

TEST_CASE("memory stays flat over 1000 training steps", "[autograd][memory]") {
  Generator g(1);
  Tensor w1 = (randn({32, 16}, {}, &g) * 0.1).detach().set_requires_grad(true);
  Tensor b1 = zeros({32}, {.requires_grad = true});
  Tensor w2 = (randn({4, 32}, {}, &g) * 0.1).detach().set_requires_grad(true);
  Tensor x = randn({64, 16}, {}, &g);
  Tensor y = randint(0, 4, {64}, {.dtype = DType::i64}, &g);
  std::vector<double> losses;
  AllocatorStats after_warmup, end;
  for (int step = 0; step < 1000; ++step) {
    Tensor loss = cross_entropy(linear(relu(linear(x, w1, b1)), w2), y);
    losses.push_back(loss.item());  // logging the loss must not keep the graph alive
    loss.backward();
    {
      NoGradGuard no_grad;
      for (Tensor* p : {&w1, &b1, &w2}) {
        sub_(*p, p->grad(), 0.1);
        p->set_grad(Tensor());
      }
    }
    // Measured at the same point of the loop (the step's loss tensor is still alive there).
    if (step == 9) after_warmup = cpu_allocator().stats();
    if (step == 999) end = cpu_allocator().stats();
  }
  CHECK(end.live_blocks == after_warmup.live_blocks);
  CHECK(end.allocated_bytes == after_warmup.allocated_bytes);
  CHECK(losses.back() < losses.front());  // it did train
}
