// autocast on "cuda" tensors (emulated here): the policy table's dtypes through the CUDA backend's
// own f16/bf16 kernels, and an autocast LeNet-5 forward + backward against its f32 run there.
#include <catch2/catch.hpp>

#include "ops_cuda_util.h"
#include "support/autocast_util.h"

using namespace stoke;
using namespace stoke::test;

TEST_CASE("autocast on cuda: the policy table's dtypes, f32 gradients, a CNN within tolerance",
          "[autocast]") {
  for (const DType low : {DType::f16, DType::bf16}) {
    for (const AutocastEntry& e : kAutocastPolicy) {
      INFO("op " << e.op << ", autocast " << low);
      const auto it = autocast_samples().find(std::string(e.op));
      REQUIRE(it != autocast_samples().end());
      const DType main = e.policy == AutocastPolicy::lower ? DType::f32 : low;
      std::vector<Tensor> leaves;
      Tensor out;
      {
        autocast region(Device::Type::cuda, {.dtype = low});
        autocast cpu_off(Device::Type::cpu, {.enabled = false});  // only the cuda region counts
        out = it->second({.main = main, .other = DType::f32, .device = kCuda}, leaves);
      }
      CHECK(out.device() == kCuda);
      CHECK(out.dtype() == (e.policy == AutocastPolicy::lower ? low : DType::f32));
      sum(out.to(DType::f32)).backward();
      for (const Tensor& leaf : leaves) {
        REQUIRE(leaf.grad().defined());
        CHECK(leaf.grad().dtype() == leaf.dtype());
      }
    }
#if !defined(__SANITIZE_THREAD__)  // minutes under TSan; the policy loop above is what it checks
    INFO("lenet5 under autocast " << low);
    const AmpComparison c = compare_with_f32("lenet5", low, kCuda, 4);  // 4 images: emulated
    const AmpTolerance tol = amp_tolerance(c);  // as on the CPU (autocast_util.h says why)
    INFO("loss " << c.loss_rel_err << " (bound " << tol.loss << "), logits " << c.logits_rel_err
                 << " (calibration " << c.cal_logits_rel_err << "), gradient " << c.grad_rel_err
                 << " (" << c.cal_grad_rel_err << "), classifier's " << c.last_grad_rel_err << " ("
                 << c.cal_last_grad_rel_err << ")");
    CHECK(c.logits_rel_err < tol.logits);
    CHECK(c.loss_rel_err < tol.loss);
    CHECK(c.last_grad_rel_err < tol.last_grad);
    CHECK(c.grad_rel_err < tol.grad);
    CHECK(c.grads_f32);
#endif
  }
}
