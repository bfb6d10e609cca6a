// cuda/kernels/optimizer.cu in cuda/emu against the CPU ops: fused_sgd_kernel, fused_adam_kernel,
// unscale_kernel, sum_of_squares_kernel and sum_partials_kernel (through their multi-tensor
// launchers) give ops::fused_sgd_'s, fused_adam_'s, non_finite_check_and_unscale_'s and
// sum_of_squares' results on lists with sizes 0, 1, 7, 1000 and 2^16 + 3 (a chunk and a tail),
// aligned operands (vector accesses) and misaligned ones (element accesses), f32, f16 and bf16,
// lists longer than one launch holds (more than 36 tensors; more than 320 chunks); then the ops on
// "cuda" tensors, the optimizers and clip_grad_norm_ on them, and the errors a device adds.
#include <catch2/catch.hpp>

#include "core/grad_mode.h"
#include "cuda/kernels/optimizer.h"
#include "nn/optim/optimizer.h"
#include "ops/creation.h"
#include "ops/optimizer.h"
#include "ops_cuda_util.h"
#include "test_kernels_util.h"

using namespace stoke;
using stoke::test::kCuda;
namespace kt = stoke::kernels_test;

namespace {

const std::vector<int64_t> kSizes = {0, 1, 7, 1000, (1 << 16) + 3};

// Bit for bit: the kernels' sgd_update and adam_update (cuda/kernels/optimizer.cu) are the CPU's
// sgd_range and adam_range (ops/cpu/optimizer.cpp) written alike: the same f32 operations in the
// same order on the same f32 constants (each cast once from the same double), the update reading
// the unrounded state, f16/bf16 rounding once on store; FMA contraction is off in the host
// compiler that builds both here (issue 37), so neither fuses a multiply-add the other rounds.
// (On a GPU nvcc's --fmad may fuse them: a few ulps.)
kt::Tolerance tol_for(DType) {
  return {0, 0};
}

// The sum of squares, kernel against the CPU's f64 sum (exact to ~1e-16): f16/bf16 squares are
// exact in f32; the kernel's per-thread sums of <= 65536 / 256 = 256 squares (one sign:
// 2 sqrt(256) u = 32u typically, see kernels_test::positive_sum_rtol), its block tree (8 levels)
// and the partials' (at most 2 per thread, then 8 levels): under 64u relative.
constexpr double kSumSqRtol = 64 * kt::kU;

// Tensors of kSizes, each aligned or misaligned (alternating from `mis`), values in [lo, hi).
std::vector<Tensor> inputs(DType d, bool mis, double lo, double hi, uint64_t seed) {
  std::vector<Tensor> r;
  for (size_t i = 0; i < kSizes.size(); ++i)
    r.push_back(kt::input({kSizes[i]}, d, mis && i % 2 == 0, lo, hi, seed + i));
  return r;
}

// Copies of ts at aligned or misaligned addresses (the kernel's operands).
std::vector<Tensor> placed(const std::vector<Tensor>& ts, bool mis) {
  std::vector<Tensor> r;
  for (const Tensor& t : ts) {
    Tensor o = kt::output(t.shape(), t.dtype(), mis);
    o.copy_(t);
    r.push_back(o);
  }
  return r;
}

std::vector<Tensor> clones(const std::vector<Tensor>& ts) {
  std::vector<Tensor> r;
  for (const Tensor& t : ts) r.push_back(t.clone());
  return r;
}

std::vector<void*> ptrs(const std::vector<Tensor>& ts) {
  std::vector<void*> r;
  for (const Tensor& t : ts) r.push_back(t.data_ptr());
  return r;
}

std::vector<const void*> cptrs(const std::vector<Tensor>& ts) {
  std::vector<const void*> r;
  for (const Tensor& t : ts) r.push_back(t.data_ptr());
  return r;
}

std::vector<int64_t> sizes_of(const std::vector<Tensor>& ts) {
  std::vector<int64_t> r;
  for (const Tensor& t : ts) r.push_back(t.numel());
  return r;
}

void require_all_close(const std::vector<Tensor>& got, const std::vector<Tensor>& want,
                       kt::Tolerance t, const std::string& what) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i)
    kt::require_close(got[i].to(DType::f32), want[i].to(DType::f32), t,
                      what + " tensor " + std::to_string(i));
}

}  // namespace

TEST_CASE("cuda kernels: fused_sgd_kernel matches ops::fused_sgd_", "[cuda][kernels][optimizer]") {
  NoGradGuard no_grad;
  struct Case {
    double momentum, dampening, weight_decay;
    bool nesterov;
  };
  const std::vector<Case> cases = {{0, 0, 0, false}, {0.9, 0.2, 0.01, false}, {0.8, 0, 0.05, true}};
  for (DType d : kt::kFloatDtypes)
    for (bool mis : {false, true})
      for (const Case& c : cases) {
        const std::string what =
            detail::str_cat("sgd ", dtype_name(d), mis ? " misaligned" : "",
                            " momentum=", c.momentum, c.nesterov ? " nesterov" : "");
        const std::vector<Tensor> p0 = inputs(d, mis, -2, 2, 1);
        std::vector<Tensor> pk = placed(p0, mis), bk = placed(p0, !mis);
        std::vector<Tensor> pc = clones(p0), bc = clones(p0);
        const bool momentum = c.momentum != 0;
        for (int step = 0; step < 3; ++step) {
          // Step 1's gradients are misaligned even in the aligned runs: element accesses there.
          const std::vector<Tensor> g =
              inputs(d, mis || step == 1, -1, 1, static_cast<uint64_t>(10 + 7 * step));
          // A schedule: another rate each step, from device memory on step 1 (the argument then
          // -1, so a kernel that read it would fail).
          const ops::SgdStepOptions o{.lr = 0.1 / (1 + step),
                                      .momentum = c.momentum,
                                      .dampening = c.dampening,
                                      .weight_decay = c.weight_decay,
                                      .nesterov = c.nesterov,
                                      .first_step = step == 0};
          const Tensor lr_device = full({1}, o.lr, {.dtype = DType::f64});
          const bool from_device = step == 1;
          ops::fused_sgd_(pc, g, momentum ? bc : std::vector<Tensor>(), o);
          cuda::fused_sgd(d, ptrs(pk), cptrs(g), momentum ? ptrs(bk) : std::vector<void*>(),
                          sizes_of(pk),
                          {.lr = from_device ? -1.0 : o.lr,
                           .momentum = o.momentum,
                           .dampening = o.dampening,
                           .weight_decay = o.weight_decay,
                           .nesterov = o.nesterov,
                           .first_step = o.first_step,
                           .lr_device = from_device ? lr_device.data<double>() : nullptr},
                          nullptr);
          const std::string at = what + " step " + std::to_string(step);
          require_all_close(pk, pc, tol_for(d), at + " param");
          if (momentum) require_all_close(bk, bc, tol_for(d), at + " buffer");
        }
      }
}

TEST_CASE("cuda kernels: fused_adam_kernel matches ops::fused_adam_",
          "[cuda][kernels][optimizer]") {
  NoGradGuard no_grad;
  for (DType d : kt::kFloatDtypes)
    for (bool mis : {false, true})
      for (bool decoupled : {false, true})
        for (bool amsgrad : {false, true}) {
          const std::string what =
              detail::str_cat(decoupled ? "adamw " : "adam ", dtype_name(d),
                              mis ? " misaligned" : "", amsgrad ? " amsgrad" : "");
          const std::vector<Tensor> p0 = inputs(d, mis, -2, 2, 2);
          std::vector<Tensor> zero;
          for (int64_t n : kSizes) zero.push_back(zeros({n}, {.dtype = d}));
          std::vector<Tensor> pk = placed(p0, mis), mk = placed(zero, false),
                              vk = placed(zero, mis), xk = placed(zero, !mis);
          std::vector<Tensor> pc = clones(p0), mc = clones(zero), vc = clones(zero),
                              xc = clones(zero);
          for (int64_t t = 1; t <= 3; ++t) {
            const std::vector<Tensor> g = inputs(d, mis, -1, 1, 20 + 7 * static_cast<uint64_t>(t));
            // With amsgrad a short beta2 lets v fall below its maximum on many elements.
            // A schedule, the rate from device memory on step 2 (the host's scalars then -1).
            const ops::AdamStepOptions o{.lr = 0.01 * static_cast<double>(t),
                                         .beta1 = 0.9,
                                         .beta2 = amsgrad ? 0.5 : 0.99,
                                         .eps = 1e-6,
                                         .weight_decay = 0.03,
                                         .decoupled = decoupled,
                                         .amsgrad = amsgrad,
                                         .step = t};
            ops::fused_adam_(pc, g, mc, vc, amsgrad ? xc : std::vector<Tensor>(), o);
            const ops::AdamStepScalars s = ops::adam_step_scalars(o);
            const Tensor lr_device = full({1}, o.lr, {.dtype = DType::f64});
            const bool from_device = t == 2;
            cuda::fused_adam(d, ptrs(pk), cptrs(g), ptrs(mk), ptrs(vk),
                             amsgrad ? ptrs(xk) : std::vector<void*>(), sizes_of(pk),
                             {.lr = from_device ? -1.0 : o.lr,
                              .beta1 = o.beta1,
                              .beta2 = o.beta2,
                              .eps = o.eps,
                              .weight_decay = o.weight_decay,
                              .decoupled = o.decoupled,
                              .amsgrad = o.amsgrad,
                              .step_size = from_device ? -1.0 : s.step_size,
                              .bias2_sqrt = s.bias2_sqrt,
                              .bias1 = s.bias1,
                              .lr_device = from_device ? lr_device.data<double>() : nullptr},
                             nullptr);
            const std::string at = what + " step " + std::to_string(t);
            require_all_close(pk, pc, tol_for(d), at + " param");
            require_all_close(mk, mc, tol_for(d), at + " exp_avg");
            require_all_close(vk, vc, tol_for(d), at + " exp_avg_sq");
            if (amsgrad) require_all_close(xk, xc, tol_for(d), at + " max_exp_avg_sq");
          }
          if (amsgrad && d == DType::f32) {
            // The maximum did its work: somewhere it holds more than the last exp_avg_sq.
            const std::vector<float> x = xc.back().to_vector<float>(),
                                     v = vc.back().to_vector<float>();
            size_t above = 0;
            for (size_t i = 0; i < x.size(); ++i) above += x[i] > v[i];
            CHECK(above > x.size() / 10);
          }
        }
}

TEST_CASE("cuda kernels: a list of 1,000 tensors takes several launches and matches the CPU",
          "[cuda][kernels][optimizer]") {
  NoGradGuard no_grad;
  // 1,000 tensors of random sizes 0..200 (more than 36 per launch), every other one misaligned.
  Generator gen(5);
  const std::vector<double> u = uniform({1000}, 0, 1, {}, &gen).to_vector<double>();
  std::vector<Tensor> p0, g;
  for (size_t i = 0; i < u.size(); ++i) {
    const int64_t n = i % 10 == 0 ? 0 : i % 10 == 1 ? 1 : static_cast<int64_t>(u[i] * 200);
    p0.push_back(kt::input({n}, DType::f32, i % 2 == 1, -1, 1, 100 + i));
    g.push_back(kt::input({n}, DType::f32, i % 3 == 1, -1, 1, 5000 + i));
  }
  std::vector<Tensor> pk = clones(p0), pc = clones(p0), bk = clones(p0), bc = clones(p0);
  const ops::SgdStepOptions o{.lr = 0.1, .momentum = 0.9, .nesterov = true, .first_step = true};
  ops::fused_sgd_(pc, g, bc, o);
  cuda::fused_sgd(DType::f32, ptrs(pk), cptrs(g), ptrs(bk), sizes_of(pk),
                  {.lr = 0.1, .momentum = 0.9, .nesterov = true, .first_step = true}, nullptr);
  require_all_close(pk, pc, tol_for(DType::f32), "1000 tensors param");
  require_all_close(bk, bc, tol_for(DType::f32), "1000 tensors buffer");
  // The sum of squares of the same list (one partial per chunk: one per non-empty tensor).
  Tensor partials = full({cuda::multi_tensor_chunks(sizes_of(g))}, NAN), out = full({1}, NAN);
  cuda::sum_of_squares(DType::f32, cptrs(g), sizes_of(g), partials.data<float>(), out.data<float>(),
                       nullptr);
  const double want = ops::sum_of_squares(g).item();
  CHECK(std::abs(out.item() - want) <= kSumSqRtol * want);
}

TEST_CASE("cuda kernels: more chunks than one launch holds, a tensor split across launches",
          "[cuda][kernels][optimizer]") {
  NoGradGuard no_grad;
  // Three bf16 tensors of 110 chunks and a tail each: 333 chunks, past the 320 blocks of a launch,
  // so the third tensor starts in one launch and ends in the next.
  const int64_t n = 110 * cuda::kMultiTensorChunk + 5;
  std::vector<Tensor> g;
  for (uint64_t i = 0; i < 3; ++i) g.push_back(kt::input({n}, DType::bf16, i == 1, -4, 4, 40 + i));
  REQUIRE(cuda::multi_tensor_chunks(sizes_of(g)) == 333);
  std::vector<Tensor> gk = clones(g), gc = clones(g);
  // An inf in the last chunk of the last tensor: seen by the second launch.
  fill_(gk[2].narrow(0, n - 2, 1), INFINITY);
  fill_(gc[2].narrow(0, n - 2, 1), INFINITY);
  Tensor fk = zeros({1}), fc = zeros({1});
  const Tensor inv = full({1}, 0.5);
  cuda::non_finite_check_and_unscale(DType::bf16, ptrs(gk), sizes_of(gk), fk.data<float>(),
                                     inv.data<float>(), nullptr);
  ops::non_finite_check_and_unscale_(gc, fc, inv);
  CHECK(fk.item() == 1);
  CHECK(fc.item() == 1);
  for (size_t i = 0; i < 3; ++i) kt::require_equal(gk[i], gc[i], "unscaled " + std::to_string(i));
  Tensor partials = full({333}, NAN), out = full({1}, NAN);
  cuda::sum_of_squares(DType::bf16, cptrs(g), sizes_of(g), partials.data<float>(),
                       out.data<float>(), nullptr);
  const double want = ops::sum_of_squares(g).item();
  CHECK(std::abs(out.item() - want) <= kSumSqRtol * want);
  CHECK_FALSE(std::isnan(partials.to_vector<double>().back()));
}

TEST_CASE("cuda kernels: unscale_kernel and sum_of_squares_kernel match the CPU",
          "[cuda][kernels][optimizer][amp]") {
  NoGradGuard no_grad;
  for (DType d : kt::kFloatDtypes)
    for (bool mis : {false, true}) {
      const std::string what = detail::str_cat(dtype_name(d), mis ? " misaligned" : "");
      const std::vector<Tensor> g0 = inputs(d, mis, -3, 3, 7);
      // Finite gradients: unscaled by 1/1024, the flag untouched.
      std::vector<Tensor> gk = placed(g0, mis), gc = clones(g0);
      Tensor fk = zeros({1}), fc = zeros({1});
      const Tensor inv = full({1}, 1.0 / 1024);
      cuda::non_finite_check_and_unscale(d, ptrs(gk), sizes_of(gk), fk.data<float>(),
                                         inv.data<float>(), nullptr);
      ops::non_finite_check_and_unscale_(gc, fc, inv);
      CHECK(fk.item() == 0);
      require_all_close(gk, gc, {0, 0}, what + " unscaled");
      // A NaN in the tail of the 2^16 + 3 tensor, an inf in the 7-element one.
      std::vector<Tensor> hk = placed(g0, mis);
      fill_(hk[4].narrow(0, kSizes[4] - 1, 1), NAN);
      cuda::non_finite_check_and_unscale(d, ptrs(hk), sizes_of(hk), fk.data<float>(),
                                         inv.data<float>(), nullptr);
      CHECK(fk.item() == 1);
      std::vector<Tensor> ik = placed(g0, mis);
      fill_(ik[2].narrow(0, 3, 1), -INFINITY);
      Tensor f2 = zeros({1});
      cuda::non_finite_check_and_unscale(d, ptrs(ik), sizes_of(ik), f2.data<float>(),
                                         inv.data<float>(), nullptr);
      CHECK(f2.item() == 1);
      // The sum of squares, f32 partials against the CPU's f64.
      Tensor partials = full({cuda::multi_tensor_chunks(sizes_of(g0))}, NAN), out = full({1}, NAN);
      const std::vector<Tensor> a = placed(g0, mis);
      cuda::sum_of_squares(d, cptrs(a), sizes_of(a), partials.data<float>(), out.data<float>(),
                           nullptr);
      const double want = ops::sum_of_squares(g0).item();
      INFO(what);
      CHECK(std::abs(out.item() - want) <= kSumSqRtol * want);
    }
  // No tensors: the sum is 0 (sum_partials_kernel over nothing).
  Tensor out = full({1}, NAN);
  cuda::sum_of_squares(DType::f32, {}, {}, nullptr, out.data<float>(), nullptr);
  CHECK(out.item() == 0);
}

TEST_CASE("cuda kernels: the optimizer launchers check their arguments",
          "[cuda][kernels][optimizer]") {
  Tensor p = zeros({8}), g = zeros({8});
  CHECK_THROWS_WITH(cuda::fused_sgd(DType::f32, {p.data_ptr()}, {g.data_ptr()}, {}, {8},
                                    {.momentum = 0.9}, nullptr),
                    Catch::Contains("a momentum needs a momentum buffer per tensor (1), got 0"));
  CHECK_THROWS_WITH(cuda::fused_adam(DType::f32, {p.data_ptr()}, {g.data_ptr()}, {p.data_ptr()},
                                     {p.data_ptr()}, {}, {-1}, {}, nullptr),
                    Catch::Contains("tensor 0 has size -1"));
  CHECK_THROWS_WITH(cuda::fused_adam(DType::f32, {p.data_ptr()}, {}, {}, {}, {}, {8}, {}, nullptr),
                    Catch::Contains("expected lists of 1 tensors (the sizes'), got one of 0"));
  CHECK_THROWS_WITH(cuda::fused_adam(DType::f32, {p.data_ptr()}, {g.data_ptr()}, {p.data_ptr()},
                                     {p.data_ptr()}, {}, {8}, {.amsgrad = true}, nullptr),
                    Catch::Contains("expected lists of 1 tensors (the sizes'), got one of 0"));
  CHECK_THROWS_WITH(cuda::non_finite_check_and_unscale(DType::f64, {p.data_ptr()}, {8},
                                                       p.data<float>(), p.data<float>(), nullptr),
                    Catch::Contains("cuda::non_finite_check_and_unscale"));
}

TEST_CASE("cuda ops: the optimizer ops on cuda tensors, and the optimizers on them",
          "[ops_cuda][optimizer]") {
  using test::kCuda;
  NoGradGuard no_grad;
  const Tensor p0 = test::rand_cpu({33, 5}, 1), g = test::rand_cpu({33, 5}, 2);
  {
    Tensor pc = p0.clone(), bc = zeros({33, 5});
    Tensor pd = p0.to(kCuda), bd = zeros({33, 5}, {.device = kCuda});
    const ops::SgdStepOptions o{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01};
    ops::sgd_step_(pc, g, bc,
                   {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .first_step = true});
    ops::sgd_step_(pd, g.to(kCuda), bd,
                   {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .first_step = true});
    ops::sgd_step_(pc, g, bc, o);
    // A strided gradient on the device too.
    ops::sgd_step_(pd, g.t().contiguous().to(kCuda).t(), bd, o);
    // Bit for bit: the same update formulas (tol_for above says why).
    CHECK(test::max_diff(pd, pc) == 0);
    CHECK(test::max_diff(bd, bc) == 0);
  }
  {
    Tensor pc = p0.clone(), mc = zeros({33, 5}), vc = zeros({33, 5});
    Tensor pd = p0.to(kCuda), md = zeros({33, 5}, {.device = kCuda}),
           vd = zeros({33, 5}, {.device = kCuda});
    const ops::AdamStepOptions o{.weight_decay = 0.01, .decoupled = true, .step = 2};
    ops::adam_step_(pc, g, mc, vc, o);
    ops::adam_step_(pd, g.to(kCuda).t().contiguous().t(), md, vd, o);
    CHECK(test::max_diff(pd, pc) == 0);  // as above
    CHECK(test::max_diff(vd, vc) == 0);
  }
  {
    // The unscale of gradients of two dtypes (one list per dtype on cuda), the flag a device
    // scalar, and the sum of squares on the device.
    const std::vector<Tensor> gc = {g.clone(), g.to(DType::bf16)};
    const std::vector<Tensor> gd = {g.to(kCuda), g.to(DType::bf16).to(kCuda)};
    Tensor fc = zeros({1}), fd = zeros({1}, {.device = kCuda});
    ops::non_finite_check_and_unscale_(gc, fc, full({1}, 0.25));
    ops::non_finite_check_and_unscale_(gd, fd, full({1}, 0.25, {.device = kCuda}));
    CHECK(fd.to(Device::cpu()).item() == 0);
    CHECK(test::max_diff(gd[0], gc[0]) == 0);
    CHECK(test::max_diff(gd[1].to(DType::f32), gc[1].to(DType::f32)) == 0);
    fill_(gd[1].narrow(0, 7, 1), NAN);
    ops::non_finite_check_and_unscale_(gd, fd, full({1}, 0.25, {.device = kCuda}));
    CHECK(fd.to(Device::cpu()).item() == 1);
    const Tensor sd = ops::sum_of_squares({g.to(kCuda), g.to(DType::f16).to(kCuda)});
    CHECK(sd.device() == kCuda);
    CHECK(sd.dtype() == DType::f32);
    const double want = ops::sum_of_squares({g, g.to(DType::f16)}).item();
    CHECK(std::abs(sd.to(Device::cpu()).item() - want) <= kSumSqRtol * want);
  }
  // Three steps of each optimizer with device parameters equal the CPU's, and clip_grad_norm_.
  for (int which = 0; which < 3; ++which) {
    INFO("optimizer " << which);
    Tensor wc = p0.clone().set_requires_grad(true);
    Tensor wd = p0.to(kCuda).set_requires_grad(true);
    auto make = [&](Tensor w) -> std::unique_ptr<nn::optim::Optimizer> {
      if (which == 0)
        return std::make_unique<nn::optim::SGD>(
            std::vector<Tensor>{w},
            nn::optim::SGDOptions{
                .lr = 0.1, .momentum = 0.9, .weight_decay = 1e-3, .nesterov = true});
      if (which == 1)
        return std::make_unique<nn::optim::Adam>(std::vector<Tensor>{w},
                                                 nn::optim::AdamOptions{.weight_decay = 1e-2});
      return std::make_unique<nn::optim::AdamW>(std::vector<Tensor>{w},
                                                nn::optim::AdamWOptions{.lr = 1e-2});
    };
    auto oc = make(wc), od = make(wd);
    for (int step = 0; step < 3; ++step) {
      const Tensor gs = test::rand_cpu({33, 5}, 10 + static_cast<uint64_t>(step));
      wc.set_grad(gs);
      wd.set_grad(gs.to(kCuda));
      const double nc = nn::optim::clip_grad_norm_({wc}, 1.0);
      const double nd = nn::optim::clip_grad_norm_({wd}, 1.0);
      // The norm: the square root of the sum of squares, half its relative error.
      CHECK(std::abs(nd - nc) <= kSumSqRtol * nc);
      oc->step();
      od->step();
    }
    // The clip's scale, max_norm / (norm + 1e-6), within 64u relative on the two devices, and
    // the gradients with it (|g| <= 1 after the clip); the steps are the same formulas (bit for
    // bit, tol_for above). SGD moves w by lr (1 + 1.9 + 2.71) |g| <= 0.56 over three steps:
    // 0.56 x 64u = 2.1e-6; Adam's step is invariant to the gradient's scale to first order.
    CHECK(test::max_diff(wd, wc) <= 0.56 * kSumSqRtol);
  }
}

TEST_CASE("cuda ops: the optimizer ops refuse f64 on cuda and mixed devices",
          "[ops_cuda][optimizer]") {
  using test::kCuda;
  NoGradGuard no_grad;
  const Tensor p = zeros({4}, {.dtype = DType::f64, .device = kCuda});
  CHECK_THROWS_WITH(
      ops::sgd_step_(p, zeros({4}, {.dtype = DType::f64, .device = kCuda}), Tensor(), {}),
      Catch::Contains("stoke::sgd_step_") &&
          Catch::Contains("expected f32, f16 or bf16 tensors on cuda, got f64"));
  CHECK_THROWS_WITH(ops::adam_step_(p, p.clone(), p.clone(), p.clone(), {}),
                    Catch::Contains("expected f32, f16 or bf16 tensors on cuda, got f64"));
  const Tensor pd = zeros({4}, {.device = kCuda});
  CHECK_THROWS_WITH(ops::sgd_step_(pd, zeros({4}), Tensor(), {}),
                    Catch::Contains("stoke::sgd_step_") && Catch::Contains("cpu"));
  CHECK_THROWS_WITH(ops::adam_step_(pd, pd.clone(), zeros({4}), pd.clone(), {}),
                    Catch::Contains("stoke::adam_step_") && Catch::Contains("cpu"));
  CHECK_THROWS_WITH(ops::non_finite_check_and_unscale_({pd}, zeros({1}), full({1}, 1.0)),
                    Catch::Contains("grad 0 is on cuda") && Catch::Contains("found_inf on cpu"));
  // A device learning rate: one f64 on the parameters' device.
  const Tensor g = zeros({4}, {.device = kCuda});
  CHECK_THROWS_WITH(
      ops::sgd_step_(pd, g, Tensor(), {.lr_tensor = full({1}, 0.1, {.dtype = DType::f64})}),
      Catch::Contains("stoke::sgd_step_") && Catch::Contains("lr_tensor is on cpu"));
  CHECK_THROWS_WITH(
      ops::adam_step_(pd, g, g.clone(), g.clone(),
                      {.lr_tensor = full({1}, 0.1, {.device = kCuda})}),
      Catch::Contains("stoke::adam_step_") &&
          Catch::Contains("expected lr_tensor to be a one-element f64 tensor, got f32"));
  CHECK_THROWS_WITH(
      ops::sgd_step_(pd, g, Tensor(),
                     {.lr_tensor = full({2}, 0.1, {.dtype = DType::f64, .device = kCuda})}),
      Catch::Contains("one-element f64 tensor, got f64 [2]"));
}

// The GradScaler's device-side skip: fused_sgd_kernel and fused_adam_kernel return at once when
// *found_inf is set, and with step counts each tensor's first step (SGD) or update number (Adam)
// is its own count, advanced by advance_step_counts_kernel unless found_inf is set. The CPU
// entry point takes the same decision on the host (it reads the flag and the counts, and groups
// the tensors by count): the reference. Counts start unequal (0 for some tensors, 2 for others)
// so that a kernel reading one count for all would differ; step 2 is skipped. The cuda side also
// reads its learning rate from device memory (ops' lr_tensor), the CPU side takes it as a value.
TEST_CASE(
    "cuda kernels: fused_sgd_kernel and fused_adam_kernel skip on found_inf and read each "
    "tensor's step count (advance_step_counts_kernel)",
    "[cuda][kernels][optimizer]") {
  NoGradGuard no_grad;
  const std::vector<float> found = {0, 1, 0, 0};
  auto counts_on = [](Device dev) {
    std::vector<Tensor> c;
    for (size_t i = 0; i < kSizes.size(); ++i)
      c.push_back(full({1}, i % 2 ? 2.0 : 0.0, {.device = dev}));
    return c;
  };
  auto on_cuda = [](const std::vector<Tensor>& ts) {
    std::vector<Tensor> r;
    for (const Tensor& t : ts) r.push_back(t.to(kCuda));
    return r;
  };
  for (DType d : kt::kFloatDtypes) {
    INFO(dtype_name(d));
    const std::vector<Tensor> p0 = inputs(d, false, -2, 2, 3);
    std::vector<Tensor> zero;
    for (int64_t n : kSizes) zero.push_back(zeros({n}, {.dtype = d}));
    // SGD with momentum and dampening (a first step differs from a later one).
    std::vector<Tensor> pc = clones(p0), bc = clones(zero), cc = counts_on(Device::cpu());
    std::vector<Tensor> pk = on_cuda(p0), bk = on_cuda(zero), ck = counts_on(kCuda);
    // Adam.
    std::vector<Tensor> qc = clones(p0), mc = clones(zero), vc = clones(zero),
                        ac = counts_on(Device::cpu());
    std::vector<Tensor> qk = on_cuda(p0), mk = on_cuda(zero), vk = on_cuda(zero),
                        ak = counts_on(kCuda);
    for (size_t step = 0; step < found.size(); ++step) {
      const std::vector<Tensor> g = inputs(d, false, -1, 1, 40 + 7 * step);
      const std::vector<Tensor> p_before = clones(pc), q_before = clones(qc);
      const Tensor fc = full({1}, found[step]), fk = full({1}, found[step], {.device = kCuda});
      // A learning rate schedule; on cuda the rate comes from device memory (lr_tensor; the
      // host's lr then -1, so that a kernel reading it would fail).
      const double scale = 1.0 / static_cast<double>(step + 1);
      ops::SgdStepOptions so{
          .lr = 0.1 * scale, .momentum = 0.9, .dampening = 0.3, .weight_decay = 0.01};
      so.found_inf = fc;
      so.step_counts = cc;
      ops::fused_sgd_(pc, g, bc, so);
      so.found_inf = fk;
      so.step_counts = ck;
      so.lr_tensor = full({1}, so.lr, {.dtype = DType::f64, .device = kCuda});
      so.lr = -1;
      ops::fused_sgd_(pk, on_cuda(g), bk, so);
      ops::AdamStepOptions ao{
          .lr = 0.01 * scale, .beta2 = 0.99, .eps = 1e-6, .weight_decay = 0.03, .decoupled = true};
      ao.found_inf = fc;
      ao.step_counts = ac;
      ops::fused_adam_(qc, g, mc, vc, ao);
      ao.found_inf = fk;
      ao.step_counts = ak;
      ao.lr_tensor = full({1}, ao.lr, {.dtype = DType::f64, .device = kCuda});
      ao.lr = -1;
      ops::fused_adam_(qk, on_cuda(g), mk, vk, ao);
      const std::string at = "step " + std::to_string(step);
      require_all_close(pk, pc, tol_for(d), at + " sgd param");
      require_all_close(bk, bc, tol_for(d), at + " sgd buffer");
      require_all_close(qk, qc, tol_for(d), at + " adam param");
      require_all_close(mk, mc, tol_for(d), at + " adam exp_avg");
      require_all_close(vk, vc, tol_for(d), at + " adam exp_avg_sq");
      if (found[step] != 0) {  // skipped: nothing moved
        require_all_close(pc, p_before, {0, 0}, at + " sgd param, skipped");
        require_all_close(qc, q_before, {0, 0}, at + " adam param, skipped");
      }
      for (size_t i = 0; i < kSizes.size(); ++i) {
        // Advanced on the steps not skipped: 3 of the 4.
        const double want = (i % 2 ? 2.0 : 0.0) + (step >= 1 ? static_cast<double>(step) : 1.0);
        CHECK(ck[i].item() == want);
        CHECK(ak[i].item() == want);
        CHECK(cc[i].item() == want);
      }
    }
  }
}

// amp_update_scale_kernel against the CPU's ops::amp_update_scale_ and against the rule written
// out here: growth every 3 finite steps (capped at max_scale), backoff on a non-finite one, and a
// backoff that would go below min_scale leaving the scale and raising the collapse flag.
TEST_CASE("cuda kernels: amp_update_scale_kernel follows torch's _amp_update_scale_",
          "[cuda][kernels][optimizer]") {
  NoGradGuard no_grad;
  const ops::AmpUpdateScaleOptions o{.growth_interval = 3, .min_scale = 0.5, .max_scale = 8};
  const std::vector<float> found = {0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 0, 0, 0};
  std::vector<Tensor> c, k;
  for (float init : {1.f, 0.f, 0.f, 0.f}) {
    c.push_back(full({1}, init));
    k.push_back(full({1}, init, {.device = kCuda}));
  }
  double scale = 1, tracker = 0, skipped = 0, collapsed = 0;
  for (size_t step = 0; step < found.size(); ++step) {
    ops::amp_update_scale_(c[0], c[1], c[2], c[3], full({1}, found[step]), o);
    ops::amp_update_scale_(k[0], k[1], k[2], k[3], full({1}, found[step], {.device = kCuda}), o);
    if (found[step] != 0) {
      if (scale * 0.5 < 0.5)
        collapsed = 1;
      else
        scale *= 0.5;
      tracker = 0;
      skipped += 1;
    } else if (++tracker == 3) {
      scale = std::min(scale * 2, 8.0);
      tracker = 0;
    }
    INFO("step " << step);
    const double want[] = {scale, tracker, skipped, collapsed};
    for (size_t i = 0; i < 4; ++i) {
      CHECK(c[i].item() == want[i]);
      CHECK(k[i].item() == want[i]);
    }
  }
}
