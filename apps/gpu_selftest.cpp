// stoke-gpu-selftest: every CUDA op, custom kernel launcher and vendor call (cuBLAS, cuDNN, NCCL)
// of the CUDA backend against the CPU reference (stoke::ops on CPU tensors) at several shapes and
// dtypes. Prints one row per case (op, shape, dtype, max abs error, max rel error, pass/fail) as
// soon as the case is done, then the whole table again, which methods of the backend's kernels
// (ops/cuda/backend.h) the run reached, and a summary; exits non-zero on any failure or any method
// not reached. Without a GPU (or in a build without the CUDA backend) it prints
// "stoke-gpu-selftest: no CUDA device (<reason>): skipped" and exits 0. The first command to run
// when a GPU appears.
//
// Each section (vendor, kernels, ops) runs in its own child process, a fresh exec of this program
// (apps/selftest/isolate.h), so a crash (host code touching device memory, a bad launch) or a
// hang in one section is a failed row "section ops: crashed (SIGSEGV) after row '<op shape
// dtype>'" and the other sections still run. Every section starts from the same seed in both
// modes, so --in-process reruns a crashed section's inputs under a debugger.
//
// The checks live in apps/selftest/: vendor_checks.cpp (cuBLAS/cuDNN), kernel_checks.cpp
// (raw launchers) and ops_checks*.cpp (the public API on cuda tensors; also run in cuda/emu by
// tests/cuda/test_selftest_ops.cpp). Adding an op is one function there that calls s.compare(...)
// for its cases, plus one line in its file's table.
//
// Usage: stoke-gpu-selftest [--quick] [--trace] [--failures-only] [--coverage]
//                           [--section-timeout SECONDS] [--in-process]
//   --quick              small shapes only (the set the emulator test runs)
//   --trace              put the seconds each row took in front of it
//   --failures-only      print only the failed rows (as they come and in the final table)
//   --coverage           print the calls and dtypes each kernel method received
//   --section-timeout S  kill a section that runs longer than S seconds (default 600): a failed row
//   --in-process         run every section in this process, as one program (for a debugger)
#include <cstdio>
#include <string>

// STOKE_HAS_CUDA comes with the real stoke_cuda library and STOKE_HAS_CUDA_OPS with its ops glue
// (their CMake targets set them); apps/CMakeLists.txt adds selftest/ to such builds only.
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

#include <cmath>
#include <cstdlib>
#include <exception>
#include <vector>

#include "apps/selftest/coverage.h"
#include "apps/selftest/isolate.h"
#include "apps/selftest/ops_checks.h"
#include "apps/selftest/suite.h"
#include "apps/selftest/vendor_checks.h"
#include "cuda/runtime/caching_allocator.h"
#include "cuda/runtime/device.h"
#include "stoke/stoke.h"

namespace {

using namespace stoke;
using selftest::Suite;

struct Section {
  const char* name;
  void (*run)(Suite& s, bool quick);
};
const Section kSections[] = {
    {"vendor",
     [](Suite& s, bool) {
       selftest::run_vendor_checks(s);
#if defined(STOKE_HAS_NCCL)
       selftest::run_nccl_checks(s);
#endif
     }},
    {"kernels", selftest::run_kernel_checks},
    {"ops", selftest::run_ops_checks},
};

struct Flags {
  bool quick = false, trace = false, failures_only = false, show_coverage = false;
  bool in_process = false;
  double section_timeout = 600;
};

int usage(const char* argv0, int code) {
  std::fprintf(code == 0 ? stdout : stderr,
               "usage: %s [--quick] [--trace] [--failures-only] [--coverage]\n"
               "       [--section-timeout SECONDS] [--in-process]\n",
               argv0);
  return code;
}

// Runs one section with a fresh seed and counts its kernel calls; the same in a child and in
// --in-process, so that both see the same inputs.
selftest::Coverage run_one(const Section& section, Suite& suite, bool quick) {
  manual_seed(1234);
  selftest::CoverageScope scope;
  section.run(suite, quick);
  return scope.snapshot();
}

// The child's side of --run-section: every row goes to the parent's pipe as it is added. Nothing
// is printed: the parent prints.
int run_child(const selftest::isolate::ChildFlags& child, bool quick) {
  selftest::isolate::Reporter reporter(child.report_fd);
  Suite suite;
  suite.on_add([&](const selftest::Row& row) { reporter.row(row); });
  const std::string op = "section " + child.section;
  try {
    const Section* section = nullptr;
    for (const Section& s : kSections)
      if (child.section == s.name) section = &s;
    if (!section) STOKE_FAIL("stoke-gpu-selftest", "no section named '", child.section, "'");
    cuda::register_cuda_allocator();
    reporter.coverage(run_one(*section, suite, quick));
  } catch (const std::exception& e) {
    suite.fail(op, e.what());
  }
  reporter.done(cuda::caching_allocator().summary(0));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      flags.quick = true;
    } else if (a == "--trace") {
      flags.trace = true;
    } else if (a == "--failures-only") {
      flags.failures_only = true;
    } else if (a == "--coverage") {
      flags.show_coverage = true;
    } else if (a == "--in-process") {
      flags.in_process = true;
    } else if (a == "--section-timeout") {
      char* end = nullptr;
      const char* v = i + 1 < argc ? argv[++i] : "";
      flags.section_timeout = std::strtod(v, &end);
      if (*v == '\0' || *end != '\0' || !std::isfinite(flags.section_timeout) ||
          flags.section_timeout <= 0 || flags.section_timeout > 86400) {
        std::fprintf(stderr, "%s: --section-timeout takes seconds in (0, 86400], got '%s'\n",
                     argv[0], v);
        return 2;
      }
    } else if (selftest::isolate::is_child_flag(argv[i])) {
      // read by child_flags below
    } else {
      return usage(argv[0], a == "--help" ? 0 : 2);
    }
  }
  const selftest::isolate::ChildFlags child = selftest::isolate::child_flags(argc, argv);
  if (!child.section.empty()) return run_child(child, flags.quick);

  // The parent asks only for the device count and properties (the driver, no context, no
  // memory); its children are exec'd, never forked, so they start CUDA afresh.
  if (!cuda::is_available()) {
    std::printf("stoke-gpu-selftest: no CUDA device (%s): skipped\n",
                cuda::device_unavailable_reason().c_str());
    return 0;
  }
  try {
    std::printf("stoke-gpu-selftest on %s%s%s\n", cuda::device_properties(0).summary().c_str(),
                flags.quick ? " (quick)" : "",
                flags.in_process ? " (in process)" : " (a process per section)");
    Suite suite;
    suite.stream_to(stdout, flags.trace, flags.failures_only);
    selftest::Coverage coverage;
    std::vector<std::string> allocator_lines, unfinished;
    if (flags.in_process) cuda::register_cuda_allocator();
    for (const Section& section : kSections) {
      if (flags.in_process) {
        selftest::isolate::merge(coverage, run_one(section, suite, flags.quick));
        continue;
      }
      std::vector<std::string> args;
      if (flags.quick) args.push_back("--quick");
      const selftest::isolate::SectionResult r = selftest::isolate::run_section(
          "/proc/self/exe", args, section.name, flags.section_timeout, suite);
      selftest::isolate::merge(coverage, r.coverage);
      if (!r.finished) unfinished.push_back(section.name);
      if (!r.info.empty())
        allocator_lines.push_back("allocator after section " + std::string(section.name) + ": " +
                                  r.info);
    }
    if (flags.in_process)
      allocator_lines.push_back("allocator: " + cuda::caching_allocator().summary(0));
    // Over the union of the sections' calls: a method that one section reaches counts. A section
    // that did not finish sent none, which the note says.
    const std::string never = coverage.never_called();
    std::string note = "never called: " + never;
    if (!unfinished.empty()) {
      note += " (sections that did not finish:";
      for (const std::string& name : unfinished) note += " " + name;
      note += ")";
    }
    suite.expect("coverage: every cuda kernel method called",
                 std::to_string(selftest::kMethodCount) + " methods", "-", never.empty(), note);
    std::printf("\n");
    suite.print(stdout, flags.failures_only);
    if (flags.show_coverage)
      for (const std::string& line : coverage.lines()) std::printf("  %s\n", line.c_str());
    for (const std::string& line : allocator_lines) std::printf("%s\n", line.c_str());
    const int failures = suite.failures();
    std::printf("stoke-gpu-selftest: %zu checks, %d failed\n", suite.rows().size(), failures);
    return failures == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::printf("stoke-gpu-selftest: FAILED: %s\n", e.what());
    return 1;
  }
}

#endif  // STOKE_SELFTEST_CUDA
