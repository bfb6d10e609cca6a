// Runs each section of stoke-gpu-selftest in a child process, so that a crash or a hang in one
// section becomes a failed row and the other sections still run. Device-independent: the
// selftest (apps/gpu_selftest.cpp) and a probe without any GPU code
// (tests/cuda/probe/selftest_isolation_probe.cpp) use it the same way.
//
// The parent does not fork a copy of itself: a process that has initialized CUDA must not use CUDA
// in a forked child, so the child is a fresh exec of the program (/proc/self/exe) with
// `--run-section=NAME --report-fd=N`. The child writes its rows to fd N as they are added, one
// line each, then its coverage and a "done" line; the parent adds the rows to its Suite as they
// arrive (so they stream), merges the coverage, and turns a child that did not say "done" and exit
// 0 (a signal, an exit, a timeout) into a failed row that names the last row it reported.
//
// Wire format, one line per record, fields separated by tabs, each field escaped (escape()):
//   row <op> <shape> <dtype> <max_abs> <max_rel> <0|1 pass> <note>
//   cov <method> <calls> <dtype bits>
//   done <info>
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "apps/selftest/coverage.h"
#include "apps/selftest/suite.h"

namespace stoke::selftest::isolate {

// Backslash, tab and newline as \\, \t and \n, so that a note with them stays one field of one
// line.
std::string escape(std::string_view s);
std::string unescape(std::string_view s);

// A row as one line of the wire format (no newline), and back; nullopt for anything else.
std::string encode_row(const Row& row);
std::optional<Row> decode_row(std::string_view line);

// "op shape dtype": how a crash row names the last row before the crash.
std::string row_label(const Row& row);
// "SIGSEGV" for SIGSEGV, "signal 42" for a signal without a name here.
std::string signal_name(int sig);

// Sums the calls and ORs the dtypes of `from` into `into`.
void merge(Coverage& into, const Coverage& from);

// The child's side: writes records to the parent's pipe. Each write is one whole line, so a crash
// between two rows leaves the parent every row before it.
class Reporter {
 public:
  explicit Reporter(int fd) : fd_(fd) {}
  void row(const Row& row);
  // One "cov" line per method that was called.
  void coverage(const Coverage& c);
  // The last record: the section ran to its end. `info` is shown by the parent (an allocator's
  // summary, say).
  void done(const std::string& info);

 private:
  void write_line(const std::string& line);
  int fd_;
};

// The hidden flags a child is started with; `section` is empty when argv has no --run-section.
struct ChildFlags {
  std::string section;
  int report_fd = -1;
};
// Finds --run-section=NAME and --report-fd=N in argv; the other arguments are left to the caller.
ChildFlags child_flags(int argc, char** argv);
// Whether argv[i] is one of those flags (so that the caller's parser skips it).
bool is_child_flag(const char* arg);

// What one section's child process did.
struct SectionResult {
  bool finished = false;  // said "done" and exited 0
  int rows = 0;           // rows it reported
  std::string info;       // what its "done" line said
  Coverage coverage;      // what it reported (sent at its end: none from a crashed child)
};

// Starts `exe` with `args` plus --run-section=NAME --report-fd=N, adds each row the child reports
// to `suite` as it arrives, and waits for it to exit, at most `timeout_s` seconds from the start
// (then it is killed with SIGKILL). Unless it finished, adds one failed row "section NAME" saying
// how it ended and after which row: "crashed (SIGSEGV) after row 'op shape dtype'", "exited with
// status 3 before its first row", "timed out after 600 s (killed) after row '...'", "could not
// start ...".
SectionResult run_section(const std::string& exe, const std::vector<std::string>& args,
                          const std::string& section, double timeout_s, Suite& suite);

}  // namespace stoke::selftest::isolate
