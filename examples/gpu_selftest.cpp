// stoke-gpu-selftest: every CUDA op, custom kernel launcher and vendor call (cuBLAS, cuDNN) of the
// CUDA backend against the CPU reference (stoke::ops on CPU tensors) at several shapes and dtypes.
// Prints one row per case (op, shape, dtype, max abs error, max rel error, pass/fail), which
// methods of the backend's kernels (ops/cuda/backend.h) the run reached, and a summary; exits
// non-zero on any failure or any method not reached. Without a GPU (or in a build without the
// CUDA backend) it prints "stoke-gpu-selftest: no CUDA device (<reason>): skipped" and exits 0.
// The first command to run when a GPU appears.
//
// The checks live in examples/selftest/: vendor_checks.cpp (cuBLAS/cuDNN), kernel_checks.cpp
// (raw launchers) and ops_checks*.cpp (the public API on cuda tensors; also run in cuda/emu by
// tests/cuda/test_selftest_ops.cpp). Adding an op is one function there that calls s.compare(...)
// for its cases, plus one line in its file's table.
//
// Usage: stoke-gpu-selftest [--quick] [--trace] [--failures-only] [--coverage]
//   --quick          small shapes only (the set the emulator test runs)
//   --trace          print each row as it completes, with the seconds it took
//   --failures-only  print only the failed rows of the table
//   --coverage       print the calls and dtypes each kernel method received
#include <cstdio>
#include <cstring>
#include <string>

// STOKE_HAS_CUDA comes with the real stoke_cuda library and STOKE_HAS_CUDA_OPS with its ops glue
// (their CMake targets set them); examples/CMakeLists.txt adds selftest/ to such builds only.
#if defined(STOKE_HAS_CUDA) && defined(STOKE_HAS_CUDA_OPS)
#define STOKE_SELFTEST_CUDA 1
#endif

#ifndef STOKE_SELFTEST_CUDA

int main() {
  std::printf(
      "stoke-gpu-selftest: no CUDA device (stoke was built without the CUDA backend): "
      "skipped\n");
  return 0;
}

#else

#include <exception>

#include "cuda/runtime/caching_allocator.h"
#include "cuda/runtime/device.h"
#include "examples/selftest/coverage.h"
#include "examples/selftest/ops_checks.h"
#include "examples/selftest/suite.h"
#include "examples/selftest/vendor_checks.h"
#include "stoke/stoke.h"

int main(int argc, char** argv) {
  using namespace stoke;
  bool quick = false, trace = false, failures_only = false, show_coverage = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--trace") == 0) {
      trace = true;
    } else if (std::strcmp(argv[i], "--failures-only") == 0) {
      failures_only = true;
    } else if (std::strcmp(argv[i], "--coverage") == 0) {
      show_coverage = true;
    } else {
      std::fprintf(stderr, "usage: %s [--quick] [--trace] [--failures-only] [--coverage]\n",
                   argv[0]);
      return std::strcmp(argv[i], "--help") == 0 ? 0 : 2;
    }
  }
  if (!cuda::is_available()) {
    std::printf("stoke-gpu-selftest: no CUDA device (%s): skipped\n",
                cuda::device_unavailable_reason().c_str());
    return 0;
  }
  try {
    cuda::register_cuda_allocator();
    manual_seed(1234);
    std::printf("stoke-gpu-selftest on %s%s\n", cuda::device_properties(0).summary().c_str(),
                quick ? " (quick)" : "");
    selftest::Suite suite;
    if (trace) suite.trace_to(stdout);
    selftest::Coverage coverage;
    {
      // Counts the calls into the backend's kernels while the checks run.
      selftest::CoverageScope scope;
      selftest::run_vendor_checks(suite);
      selftest::run_kernel_checks(suite, quick);
      selftest::run_ops_checks(suite, quick);
      coverage = scope.snapshot();
    }
    const std::string never = coverage.never_called();
    suite.expect("coverage: every cuda kernel method called",
                 std::to_string(selftest::kMethodCount) + " methods", "-", never.empty(),
                 "never called: " + never);
    suite.print(stdout, failures_only);
    if (show_coverage)
      for (const std::string& line : coverage.lines()) std::printf("  %s\n", line.c_str());
    const int failures = suite.failures();
    std::printf("stoke-gpu-selftest: %zu checks, %d failed; %s\n", suite.rows().size(), failures,
                cuda::caching_allocator().summary(0).c_str());
    return failures == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::printf("stoke-gpu-selftest: FAILED: %s\n", e.what());
    return 1;
  }
}

#endif  // STOKE_SELFTEST_CUDA
