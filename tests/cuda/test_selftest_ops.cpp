// stoke-gpu-selftest's checks of the public API on cuda tensors (apps/selftest/ops_checks*.cpp)
// and of the raw kernel launchers (kernel_checks.cpp), run here in cuda/emu in their quick mode:
// every row must pass, and every method of the cuda kernels (ops/cuda/backend.h) must be reached,
// as counted at run time by the selftest's coverage decorator. The selftest's sources are compiled
// into this file (test_cuda globs tests/cuda/*.cpp only); vendor_checks.cpp is real-backend only.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <stdexcept>

#include "apps/selftest/coverage.cpp"
#include "apps/selftest/kernel_checks.cpp"
#include "apps/selftest/nccl_checks.cpp"
#include "apps/selftest/ops_checks.cpp"
#include "apps/selftest/ops_checks_elementwise.cpp"
#include "apps/selftest/ops_checks_index.cpp"
#include "apps/selftest/ops_checks_nn.cpp"
#include "apps/selftest/ops_checks_reduce.cpp"
#include "apps/selftest/suite.cpp"
#include "ops_cuda_util.h"

using namespace stoke;

TEST_CASE("selftest: a row fails on a mismatch, a NaN, a shape or an exact integer", "[selftest]") {
  selftest::Suite s;
  const Tensor x = test::rand_cpu({4, 5}, 2);
  s.compare("same", "4x5", "f32", x.to(test::kCuda), x, 0);
  // Synthetic rows for the comparator itself (not tolerances of an op): 1e-6 against 1e-5 passes,
  // 1e-3 against 1e-4 fails.
  s.compare("within tolerance", "4x5", "f32", ops::add(x, 1e-6), x, 1e-5);
  s.compare("off by 1e-3", "4x5", "f32", ops::add(x, 1e-3), x, 1e-4);
  Tensor y = x.clone();
  y.data<float>()[7] = NAN;
  s.compare("NaN", "4x5", "f32", y, x, 1.0);
  s.compare("shape", "4x5", "f32", x.t(), x, 1.0);
  // 2^53 and 2^53 + 1: equal once converted to f64, so only an exact comparison tells them apart.
  const Tensor big = full({3}, 9007199254740992.0, {.dtype = DType::i64});
  s.compare("i64 beyond 2^53", "3", "i64", ops::add(big, 1.0), big, 0);
  s.expect("expect false", "-", "-", false, "why");
  REQUIRE(s.rows().size() == 7);
  CHECK(s.rows()[0].pass);
  CHECK(s.rows()[1].pass);
  CHECK_FALSE(s.rows()[2].pass);
  // fl(x + 1e-3) - x in f32: the addition's rounding, at most u |x| <= 2^-24 * 4, off 1e-3:
  // 2.4e-4 relative.
  CHECK(s.rows()[2].max_abs == Approx(1e-3).epsilon(2.4e-4));
  CHECK_FALSE(s.rows()[3].pass);
  CHECK_FALSE(s.rows()[4].pass);
  CHECK_FALSE(s.rows()[5].pass);
  CHECK(s.rows()[5].max_abs == 1);
  CHECK_FALSE(s.rows()[6].pass);
  CHECK(s.failures() == 5);
  s.run("throws", [](selftest::Suite&) { throw std::runtime_error("boom"); });
  REQUIRE(s.rows().size() == 8);
  CHECK_FALSE(s.rows()[7].pass);
  CHECK(s.rows()[7].note == "boom");
}

TEST_CASE("selftest: the coverage decorator counts calls and puts the kernels back", "[selftest]") {
  ops::Backend* before = &ops::backend_for("test", test::kCuda);
  {
    selftest::CoverageScope scope;
    CHECK(&ops::backend_for("test", test::kCuda) != before);
    CHECK(scope.snapshot().calls_of("binary") == 0);
    CHECK(scope.snapshot().never_called().find("binary") != std::string::npos);
    const Tensor a = test::rand_cpu({3, 4}, 1).to(test::kCuda);
    const Tensor b = ops::add(a, a);  // forwarded to the backend: the right values
    CHECK(test::max_diff(b, ops::mul(a, 2.0)) == 0);
    const selftest::Coverage c = scope.snapshot();
    CHECK(c.calls_of("binary") == 1);
    CHECK(c.calls_of("binary_scalar") == 1);
    CHECK(c.saw("binary", DType::f32));
    CHECK_FALSE(c.saw("binary", DType::i32));
    CHECK(c.never_called().find("binary,") == std::string::npos);
  }
  CHECK(&ops::backend_for("test", test::kCuda) == before);
}

TEST_CASE("selftest: every ops check passes on cuda tensors in emu and reaches every kernel method",
          "[selftest]") {
  manual_seed(1234);
  selftest::Suite suite;
  if (std::getenv("STOKE_SELFTEST_TRACE")) suite.trace_to(stdout);
  selftest::Coverage coverage;
  {
    selftest::CoverageScope scope;
    selftest::run_kernel_checks(suite, /*quick=*/true);
    selftest::run_ops_checks(suite, /*quick=*/true);
    coverage = scope.snapshot();
  }
  if (suite.failures() > 0) suite.print(stdout, /*failures_only=*/true);
  CHECK(suite.failures() == 0);
  // The quick set has about 1350 rows; far fewer means checks stopped early or were dropped.
  CHECK(suite.rows().size() >= 1200);
  INFO("never called: " << coverage.never_called());
  CHECK(coverage.never_called().empty());
  // The integer kernels are separate launches: the arithmetic and sums must have seen them.
  for (const char* method : {"binary", "binary_scalar", "binary_", "binary_scalar_"})
    for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8}) {
      INFO(method << " on " << dt);
      CHECK(coverage.saw(method, dt));
    }
  for (DType dt :
       {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8, DType::boolean}) {
    INFO("sum/copy_strided on " << dt);
    CHECK(coverage.saw("sum", dt));
    CHECK(coverage.saw("copy_strided", dt));
    CHECK(coverage.saw("fill", dt));
  }
  for (const char* method : {"compare", "compare_scalar", "where", "index_select", "gather"})
    for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8}) {
      INFO(method << " on " << dt);
      CHECK(coverage.saw(method, dt));
    }
}

TEST_CASE("selftest: the NCCL rows pass over cuda/emu's NCCL with a rank per emulated device",
          "[selftest][nccl_dist]") {
  selftest::Suite s;
  selftest::run_nccl_checks(s);
  s.print(stdout, /*failures_only=*/true);
  CHECK(s.failures() == 0);
  CHECK(s.rows().size() >= 50);  // 4 dtypes x 7 collectives x 2 ranks, and the DDP rows
}
