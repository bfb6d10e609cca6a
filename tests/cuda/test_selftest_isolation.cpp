// stoke-gpu-selftest's process isolation (apps/selftest/isolate.h) without a GPU: the probe
// tests/cuda/probe/selftest_isolation_probe.cpp runs sections that pass, crash, exit early and
// hang, each in a child process as the selftest's sections run; a crash or a hang must become a
// failed row naming the signal (or the timeout) and the last row before it, the next section must
// still run, the coverage must be merged over the sections that finished, and the exit status must
// say that something failed. isolate.cpp is compiled into this file (test_cuda globs
// tests/cuda/*.cpp only); suite.cpp and coverage.cpp come with test_selftest_ops.cpp.
#include <sys/wait.h>
#include <catch2/catch.hpp>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "apps/selftest/isolate.cpp"

using namespace stoke;
using selftest::Row;
namespace isolate = selftest::isolate;

namespace {

struct Probe {
  int exit_code = -1;
  std::string output;                 // stdout and stderr
  std::vector<Row> rows;              // the parent's rows, decoded from "--- rows"
  std::vector<std::string> coverage;  // "--- coverage" lines
  double seconds = 0;
};

Probe run_probe(const std::string& args) {
  const auto start = std::chrono::steady_clock::now();
  const std::string cmd = std::string(STOKE_SELFTEST_PROBE_EXE) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  Probe r;
  std::array<char, 4096> buf{};
  while (fgets(buf.data(), buf.size(), p) != nullptr) r.output += buf.data();
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::istringstream lines(r.output);
  int part = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line == "--- rows" || line == "--- coverage") {
      ++part;
    } else if (part == 1) {
      const std::optional<Row> row = isolate::decode_row(line);
      INFO(line);
      REQUIRE(row);
      r.rows.push_back(*row);
    } else if (part == 2) {
      r.coverage.push_back(line);
    }
  }
  return r;
}

std::vector<std::string> ops_of(const Probe& p) {
  std::vector<std::string> ops;
  for (const Row& r : p.rows) ops.push_back(r.op);
  return ops;
}

}  // namespace

TEST_CASE("selftest: a row keeps tabs, newlines, backslashes and non-finite errors on the wire",
          "[selftest_isolation]") {
  const Row row{"op\twith tab", "2x3", "f16", INFINITY, NAN, false, "line one\nline \\t two\\"};
  const std::string line = isolate::encode_row(row);
  CHECK(line.find('\n') == std::string::npos);
  const std::optional<Row> back = isolate::decode_row(line);
  REQUIRE(back);
  CHECK(back->op == row.op);
  CHECK(back->shape == row.shape);
  CHECK(back->dtype == row.dtype);
  CHECK(std::isinf(back->max_abs));
  CHECK(std::isnan(back->max_rel));
  CHECK_FALSE(back->pass);
  CHECK(back->note == row.note);
  const Row exact{"gemm", "3", "f32", 1.0 / 3.0, 1e-300, true, ""};
  REQUIRE(isolate::decode_row(isolate::encode_row(exact)));
  CHECK(isolate::decode_row(isolate::encode_row(exact))->max_abs == 1.0 / 3.0);
  CHECK(isolate::decode_row(isolate::encode_row(exact))->pass);
  // A line cut short by a crash, or anything else, is no row.
  CHECK_FALSE(isolate::decode_row(line.substr(0, line.size() / 2)));
  CHECK_FALSE(isolate::decode_row("row\ta\tb\tc\t1\t2\tyes\tnote"));
  CHECK_FALSE(isolate::decode_row("done\tinfo"));
}

TEST_CASE("selftest: sections that pass in their own processes give their rows and exit 0",
          "[selftest_isolation]") {
  const Probe p = run_probe("good after");
  INFO(p.output);
  CHECK(p.exit_code == 0);
  CHECK(ops_of(p) == std::vector<std::string>{"good one", "good two", "after ok"});
  REQUIRE(p.rows.size() == 3);
  CHECK(p.rows[2].note == "a\ttab, a\nnewline, a \\ backslash");
  CHECK(p.rows[2].max_abs == 0.25);
  CHECK(p.rows[2].max_rel == 0.5);
  CHECK_THAT(p.output, Catch::Contains("section good: finished 1, 2 rows, info 'info of good'"));
  // The coverage of both children, merged: calls summed, dtypes joined.
  CHECK(p.coverage ==
        std::vector<std::string>{"binary: 3 calls (f32 f16)", "matmul: 1 calls (f32)"});
}

TEST_CASE(
    "selftest: a section that crashes is a failed row naming SIGSEGV and its last row, and "
    "the next section runs",
    "[selftest_isolation]") {
  const Probe p = run_probe("good segv after");
  INFO(p.output);
  CHECK(p.exit_code == 1);
  REQUIRE(ops_of(p) == std::vector<std::string>{"good one", "good two", "segv before crash",
                                                "section segv", "after ok"});
  for (size_t i : {0, 1, 2, 4}) CHECK(p.rows[i].pass);
  CHECK_FALSE(p.rows[3].pass);
  CHECK(p.rows[3].note == "crashed (SIGSEGV) after row 'segv before crash 2x3 f32'");
  CHECK_THAT(p.output, Catch::Contains("section segv: finished 0, 1 rows"));
  CHECK_THAT(p.output, Catch::Contains("section after: finished 1, 1 rows"));
  // Rows are printed as they arrive: the crash row is in the stream, before the next section's.
  const size_t crash = p.output.find("FAIL: crashed (SIGSEGV) after row 'segv before crash");
  const size_t after = p.output.find("after ok");
  CHECK(crash != std::string::npos);
  CHECK(after > crash);
  CHECK(p.output.find("--- rows") > after);
  // The crashed child never sent its coverage (conv2d); the others' is merged.
  CHECK(p.coverage ==
        std::vector<std::string>{"binary: 3 calls (f32 f16)", "matmul: 1 calls (f32)"});
}

TEST_CASE(
    "selftest: a section that dies before its first row, exits early or writes garbage is a "
    "failed row",
    "[selftest_isolation]") {
  const Probe p = run_probe("abort exit garbage good");
  INFO(p.output);
  CHECK(p.exit_code == 1);
  REQUIRE(ops_of(p) == std::vector<std::string>{"section abort", "exit before exiting",
                                                "section exit", "section garbage", "good one",
                                                "good two"});
  CHECK(p.rows[0].note == "crashed (SIGABRT) before its first row");
  CHECK(p.rows[2].note == "exited with status 3 after row 'exit before exiting 1 u8'");
  CHECK_FALSE(p.rows[3].pass);
  CHECK(p.rows[3].note == "unreadable report line 'nonsense\\tline'");
  CHECK_THAT(p.output, Catch::Contains("section garbage: finished 1, 0 rows"));
  CHECK(p.rows[4].pass);
  CHECK(p.rows[5].pass);
}

TEST_CASE("selftest: a section that hangs is killed at its timeout and the next section runs",
          "[selftest_isolation]") {
  const Probe p = run_probe("--section-timeout 1 good hang after");
  INFO(p.output);
  CHECK(p.exit_code == 1);
  REQUIRE(ops_of(p) == std::vector<std::string>{"good one", "good two", "hang before waiting",
                                                "section hang", "after ok"});
  CHECK_FALSE(p.rows[3].pass);
  CHECK(p.rows[3].note == "timed out after 1 s (killed) after row 'hang before waiting 3 f16'");
  CHECK(p.rows[4].pass);
  // One second for the hang, not forever (ctest's limit is 300 s); generous for a loaded machine.
  CHECK(p.seconds < 60);
}
