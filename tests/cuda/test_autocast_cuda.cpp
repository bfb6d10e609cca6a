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
      // mixed_norm (batch norm) keeps the f16/bf16 input's dtype on cuda.
      const bool low_out =
          e.policy == AutocastPolicy::lower || e.policy == AutocastPolicy::mixed_norm;
      CHECK(out.dtype() == (low_out ? low : DType::f32));
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

namespace {

std::vector<double> values(const Tensor& t) {
  return t.detach().to(Device::cpu()).to(DType::f64).contiguous().to_vector<double>();
}

}  // namespace

// Batch norm under autocast on cuda reads the f16/bf16 activations as they are, with f32 weight,
// bias and statistics (AutocastPolicy::mixed_norm), against an f64 loop over the same rounded
// values: 3 training steps on the same running statistics (reused buffers), then evaluation.
TEST_CASE(
    "cuda: batch_norm under --amp autocast takes f16/bf16 activations with f32 statistics, no "
    "cast pass, and matches an f64 loop over 3 steps",
    "[autocast][batch_norm]") {
  const int64_t N = 8, C = 3, HW = 9, n = N * HW;
  const double eps = 1e-5, momentum = 0.1;  // batch norm's options (torch's defaults), no tolerance
  for (const DType low : {DType::f16, DType::bf16}) {
    INFO("autocast " << low);
    // The low dtype's unit roundoff: the output's and the input gradient's last rounding.
    const double u_low = low == DType::f16 ? 0x1p-11 : 0x1p-8;
    Tensor w = (rand_cpu({C}, 1) * 0.5 + 1).to(kCuda), b = rand_cpu({C}, 2).to(kCuda);
    w.set_requires_grad(true);
    b.set_requires_grad(true);
    const Tensor rm = zeros({C}, {.device = kCuda}), rv = ones({C}, {.device = kCuda});
    std::vector<double> ref_rm(C, 0.0), ref_rv(C, 1.0);
    const std::vector<double> wv = values(w), bv = values(b);
    for (int step = 0; step < 3; ++step) {
      INFO("step " << step);
      const Tensor x_low = (rand_cpu({N, C, 3, 3}, 10 + step) * 2 + 0.5).to(low);
      const Tensor gw = rand_cpu({N, C, 3, 3}, 20 + step);
      Tensor x = x_low.to(kCuda);
      x.set_requires_grad(true);
      w.set_grad(Tensor());
      b.set_grad(Tensor());
      Tensor y;
      int64_t launches = 0;
      {
        autocast region(Device::Type::cuda, {.dtype = low});
        const DeviceActivity a0 = device_activity();
        y = batch_norm(x, rm, rv, w, b, {.training = true, .momentum = momentum, .eps = eps});
        launches = (device_activity() - a0).launches;
      }
      // No cast pass: as many launches as the same call on f16/bf16 input outside a region.
      {
        const Tensor rm2 = rm.clone(), rv2 = rv.clone();
        const DeviceActivity a0 = device_activity();
        (void)batch_norm(x.detach(), rm2, rv2, w.detach(), b.detach(), {.training = true});
        CHECK(launches == (device_activity() - a0).launches);
      }
      REQUIRE(y.dtype() == low);
      CHECK(rm.dtype() == DType::f32);
      CHECK(rv.dtype() == DType::f32);
      sum(y.to(DType::f32) * gw.to(kCuda)).backward();
      REQUIRE(x.grad().defined());
      CHECK(x.grad().dtype() == low);
      CHECK(w.grad().dtype() == DType::f32);
      CHECK(b.grad().dtype() == DType::f32);
      // The f64 loop. dy is the f32 gradient rounded to the low dtype (the cast's backward).
      const std::vector<double> xv = values(x_low), dyv = values(gw.to(low)), yv = values(y),
                                gx = values(x.grad()), gwt = values(w.grad()),
                                gb = values(b.grad()), rmv = values(rm), rvv = values(rv);
      for (int64_t c = 0; c < C; ++c) {
        INFO("channel " << c);
        auto at = [&](int64_t i) { return (i / HW) * C * HW + c * HW + i % HW; };
        double mean = 0, var = 0, sdy = 0, sdyx = 0, sabs_dy = 0, sabs_dyx = 0;
        for (int64_t i = 0; i < n; ++i) mean += xv[at(i)];
        mean /= n;
        for (int64_t i = 0; i < n; ++i) var += (xv[at(i)] - mean) * (xv[at(i)] - mean);
        var /= n;
        const double invstd = 1 / std::sqrt(var + eps);
        for (int64_t i = 0; i < n; ++i) {
          const double xh = (xv[at(i)] - mean) * invstd;
          sdy += dyv[at(i)];
          sdyx += dyv[at(i)] * xh;
          sabs_dy += std::abs(dyv[at(i)]);
          sabs_dyx += std::abs(dyv[at(i)] * xh);
        }
        // The f32 statistics: sums of n terms, each within n kU of their magnitude (worst case),
        // moving x-hat by about 4 n kU (1 + |x-hat|) through the mean and the variance.
        const double stat = 4 * n * kU;
        for (int64_t i = 0; i < n; ++i) {
          const double xh = (xv[at(i)] - mean) * invstd;
          const double ref_y = xh * wv[c] + bv[c];
          const double f32_err = stat * (1 + std::abs(xh)) * std::abs(wv[c]);
          CHECK(std::abs(yv[at(i)] - ref_y) <= f32_err * (1 + u_low) + u_low * std::abs(ref_y));
          const double ref_gx = wv[c] * invstd * (dyv[at(i)] - sdy / n - xh * sdyx / n);
          const double gx_err = 2 * stat * std::abs(wv[c]) * invstd *
                                (std::abs(dyv[at(i)]) + (sabs_dy + std::abs(xh) * sabs_dyx) / n);
          CHECK(std::abs(gx[at(i)] - ref_gx) <= gx_err * (1 + u_low) + u_low * std::abs(ref_gx));
        }
        // Parameter gradients: f32 sums of n products of the low values and x-hat.
        CHECK(std::abs(gb[c] - sdy) <= n * kU * sabs_dy);
        CHECK(std::abs(gwt[c] - sdyx) <= 2 * stat * (sabs_dy + sabs_dyx));
        ref_rm[c] = (1 - momentum) * ref_rm[c] + momentum * mean;
        ref_rv[c] = (1 - momentum) * ref_rv[c] + momentum * var * n / (n - 1);
        // Three steps of one f32 statistic each (plus the update's own roundings).
        CHECK(std::abs(rmv[c] - ref_rm[c]) <= 3 * stat * (1 + std::abs(mean)));
        CHECK(std::abs(rvv[c] - ref_rv[c]) <= 3 * stat * (1 + var));
      }
    }
    // Evaluation from the running statistics, still in the low dtype.
    const Tensor x_low = rand_cpu({N, C, 3, 3}, 30).to(low);
    Tensor y;
    {
      autocast region(Device::Type::cuda, {.dtype = low});
      NoGradGuard no_grad;
      y = batch_norm(x_low.to(kCuda), rm, rv, w, b, {.training = false, .eps = eps});
    }
    REQUIRE(y.dtype() == low);
    const std::vector<double> xv = values(x_low), yv = values(y), rmv = values(rm),
                              rvv = values(rv);
    for (int64_t i = 0; i < N * C * HW; ++i) {
      const int64_t c = (i / HW) % C;
      const double xh = (xv[i] - rmv[c]) / std::sqrt(rvv[c] + eps);
      const double ref_y = xh * wv[c] + bv[c];
      // A handful of f32 operations on each element (4 kU), then the low rounding.
      const double f32_err = 4 * kU * (1 + std::abs(xh)) * (std::abs(wv[c]) + std::abs(bv[c]));
      CHECK(std::abs(yv[i] - ref_y) <= f32_err * (1 + u_low) + u_low * std::abs(ref_y));
    }
  }
}
