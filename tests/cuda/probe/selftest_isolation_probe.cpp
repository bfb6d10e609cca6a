// selftest_isolation_probe: stoke-gpu-selftest's process isolation (apps/selftest/isolate.h)
// with sections that need no GPU, for tests/cuda/test_selftest_isolation.cpp. Each section runs in
// a child (a fresh exec of this program with --run-section=NAME), as the selftest's do:
//   good   two passing rows; reports 2 calls of binary (f32)
//   segv   one passing row, then raises SIGSEGV (the conv2d call it would report is lost)
//   abort  raises SIGABRT before its first row
//   exit   one passing row, then exits with status 3 without finishing
//   hang   one passing row, then waits forever
//   garbage  writes a line that is no record, then finishes
//   after  one passing row whose note holds a tab, a newline and a backslash; reports binary (f16)
//          and matmul
//
// Usage: selftest_isolation_probe [--section-timeout SECONDS] SECTION...
// Prints the rows as they arrive (Suite::stream_to), then "--- rows" and every row in the wire
// format, then "--- coverage" and the merged coverage of each method called; exits 1 when a row
// failed, else 0.
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "apps/selftest/isolate.h"

using namespace stoke;
using namespace stoke::selftest;

namespace {

void count(Coverage& c, Method m, DType dtype, int64_t calls) {
  c.calls[static_cast<size_t>(m)] += calls;
  c.dtypes[static_cast<size_t>(m)] |= 1u << static_cast<unsigned>(dtype);
}

// Dies by `sig` itself, not by a handler a sanitizer installed (ASan would exit with status 1),
// and without a core file.
[[noreturn]] void die_by(int sig) {
  const rlimit none{0, 0};
  setrlimit(RLIMIT_CORE, &none);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
  std::_Exit(99);  // not reached
}

int run_child(const isolate::ChildFlags& child) {
  isolate::Reporter reporter(child.report_fd);
  Suite suite;
  suite.on_add([&](const Row& row) { reporter.row(row); });
  Coverage coverage;
  const std::string& name = child.section;
  if (name == "good") {
    suite.expect("good one", "4x5", "f32", true, "");
    suite.expect("good two", "7", "i64", true, "");
    count(coverage, Method::binary, DType::f32, 2);
  } else if (name == "segv") {
    suite.expect("segv before crash", "2x3", "f32", true, "");
    count(coverage, Method::conv2d, DType::f32, 1);
    die_by(SIGSEGV);
  } else if (name == "abort") {
    die_by(SIGABRT);
  } else if (name == "exit") {
    suite.expect("exit before exiting", "1", "u8", true, "");
    std::fflush(nullptr);
    std::_Exit(3);
  } else if (name == "hang") {
    suite.expect("hang before waiting", "3", "f16", true, "");
    for (;;) pause();
  } else if (name == "garbage") {
    const char line[] = "nonsense\tline\n";
    if (write(child.report_fd, line, sizeof line - 1) < 0) return 1;
  } else if (name == "after") {
    suite.add(
        Row{"after ok", "5x5", "bf16", 0.25, 0.5, true, "a\ttab, a\nnewline, a \\ backslash"});
    count(coverage, Method::binary, DType::f16, 1);
    count(coverage, Method::matmul, DType::f32, 1);
  } else {
    suite.fail("section " + name, "no such section");
  }
  reporter.coverage(coverage);
  reporter.done("info of " + name);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const isolate::ChildFlags child = isolate::child_flags(argc, argv);
  if (!child.section.empty()) return run_child(child);

  double timeout_s = 600;
  std::vector<std::string> sections;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--section-timeout" && i + 1 < argc) {
      timeout_s = std::atof(argv[++i]);
    } else {
      sections.push_back(a);
    }
  }
  Suite suite;
  suite.stream_to(stdout);
  Coverage coverage;
  for (const std::string& section : sections) {
    const isolate::SectionResult r =
        isolate::run_section("/proc/self/exe", {}, section, timeout_s, suite);
    isolate::merge(coverage, r.coverage);
    std::printf("section %s: finished %d, %d rows, info '%s'\n", section.c_str(), r.finished,
                r.rows, r.info.c_str());
  }
  std::printf("--- rows\n");
  for (const Row& row : suite.rows()) std::printf("%s\n", isolate::encode_row(row).c_str());
  std::printf("--- coverage\n");
  for (const std::string& line : coverage.lines())
    if (line.find(": 0 calls") == std::string::npos) std::printf("%s\n", line.c_str());
  return suite.failures() == 0 ? 0 : 1;
}
