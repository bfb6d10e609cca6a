// cuda/kernels/dropout.cu in cuda/emu against ops::dropout_with_mask / dropout_backward:
// dropout_kernel reproduces the CPU's Philox mask bit for bit for the same (seed, offset), at any
// block size and grid cap, and dropout_backward_kernel matches ops::dropout_backward.
#include <catch2/catch.hpp>

#include "core/random.h"
#include "cuda/kernels/dropout.h"
#include "ops/creation.h"
#include "ops/dropout.h"
#include "ops/elementwise.h"
#include "test_kernels_util.h"

using namespace stoke;
namespace kt = stoke::kernels_test;

namespace {

// The CPU's output and mask for x (f32) with generator state (seed, offset).
ops::DropoutResult cpu_dropout(const Tensor& x32, double p, uint64_t seed, uint64_t offset) {
  Generator g(seed);
  g.set_state({seed, offset});
  return ops::dropout_with_mask(x32, p, &g);
}

}  // namespace

TEST_CASE("cuda kernels: dropout_kernel reproduces the CPU mask for any launch shape",
          "[cuda][kernels][dropout]") {
  uint64_t seed = 1234;
  for (DType dtype : {DType::f32, DType::f16, DType::bf16})
    for (int64_t n : {1, 3, 4, 5, 17, 1000, 1029})
      for (bool mis : {false, true})
        for (double p : {0.1, 0.5, 0.9}) {
          const uint64_t offset = static_cast<uint64_t>(n % 7) * 3;
          const Tensor x = kt::input({n}, dtype, mis, -2, 2, seed);
          const auto want = cpu_dropout(x.to(DType::f32), p, seed, offset);
          const std::string what = detail::str_cat("dropout ", dtype, " n=", n, " p=", p,
                                                   mis ? " misaligned" : " aligned");
          // Three launch shapes: small blocks, default, and one block that grid-strides.
          for (cuda::DropoutLaunch launch :
               {cuda::DropoutLaunch{.block_threads = 32}, cuda::DropoutLaunch{},
                cuda::DropoutLaunch{.block_threads = 64, .max_blocks = 1}}) {
            Tensor out = kt::output({n}, dtype, mis);
            Tensor mask = kt::output({n}, DType::u8, !mis);
            cuda::dropout_forward(dtype, x.data_ptr(), out.data_ptr(), mask.data<uint8_t>(), n, p,
                                  seed, offset, nullptr, launch);
            kt::require_equal(mask, want.mask, what + " mask");
            // f32: the CPU's exact products; f16/bf16: the same product rounded once.
            kt::require_equal(out.to(DType::f32), kt::rounded(want.output, dtype),
                              what + " output");
          }
          ++seed;
        }
}

TEST_CASE("cuda kernels: dropout_kernel in place, and dropout_backward_kernel",
          "[cuda][kernels][dropout]") {
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    const int64_t n = 203;
    const double p = 0.3;
    const Tensor x = kt::input({n}, dtype, true, -2, 2, 5);
    const auto want = cpu_dropout(x.to(DType::f32), p, 77, 9);
    Tensor t = x.clone();
    Tensor mask = kt::output({n}, DType::u8, false);
    cuda::dropout_forward(dtype, t.data_ptr(), t.data_ptr(), mask.data<uint8_t>(), n, p, 77, 9,
                          nullptr);
    kt::require_equal(t.to(DType::f32), kt::rounded(want.output, dtype), "in place");
    const Tensor g = kt::input({n}, dtype, true, -1, 1, 6);
    Tensor dx = kt::output({n}, dtype, false);
    cuda::dropout_backward(dtype, g.data_ptr(), mask.data<uint8_t>(), dx.data_ptr(), n, p, nullptr);
    kt::require_equal(dx.to(DType::f32),
                      kt::rounded(ops::dropout_backward(g.to(DType::f32), want.mask, p), dtype),
                      "backward");
  }
}

TEST_CASE("cuda kernels: dropout launchers check p and the block size",
          "[cuda][kernels][dropout]") {
  Tensor x = zeros({8});
  Tensor m = zeros({8}, {.dtype = DType::u8});
  for (double p : {0.0, 1.0, -0.5})
    CHECK_THROWS_WITH(cuda::dropout_forward(DType::f32, x.data_ptr(), x.data_ptr(),
                                            m.data<uint8_t>(), 8, p, 0, 0, nullptr),
                      Catch::Contains("cuda::dropout") && Catch::Contains("expected 0 < p < 1"));
  CHECK_THROWS_WITH(cuda::dropout_forward(DType::f32, x.data_ptr(), x.data_ptr(), m.data<uint8_t>(),
                                          8, 0.5, 0, 0, nullptr, {.block_threads = 48}),
                    Catch::Contains("multiple of 32") && Catch::Contains("got 48"));
  CHECK_THROWS_WITH(cuda::dropout_backward(DType::f32, x.data_ptr(), m.data<uint8_t>(),
                                           x.data_ptr(), 8, 2.0, nullptr),
                    Catch::Contains("cuda::dropout_backward") && Catch::Contains("got 2"));
}
