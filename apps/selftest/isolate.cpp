#include "apps/selftest/isolate.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "core/error.h"

extern char** environ;

namespace stoke::selftest::isolate {

namespace {

using Clock = std::chrono::steady_clock;

std::vector<std::string_view> split_tabs(std::string_view line) {
  std::vector<std::string_view> fields;
  size_t start = 0;
  for (size_t tab; (tab = line.find('\t', start)) != std::string_view::npos; start = tab + 1)
    fields.push_back(line.substr(start, tab - start));
  fields.push_back(line.substr(start));
  return fields;
}

// %.17g: a double survives the trip exactly (inf and nan included: strtod reads them back).
std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

bool parse_number(std::string_view field, double& out) {
  const std::string s(field);
  char* end = nullptr;
  out = std::strtod(s.c_str(), &end);
  return !s.empty() && end == s.c_str() + s.size();
}

bool parse_int(std::string_view field, int64_t& out) {
  const std::string s(field);
  char* end = nullptr;
  errno = 0;
  out = std::strtoll(s.c_str(), &end, 10);
  return !s.empty() && end == s.c_str() + s.size() && errno == 0;
}

std::optional<size_t> method_index(std::string_view name) {
  for (size_t i = 0; i < kMethodCount; ++i)
    if (kMethods[i] == name) return i;
  return std::nullopt;
}

// Reads one section's records as they arrive and keeps what the outcome row needs.
struct Session {
  const std::string& section;
  Suite& suite;
  SectionResult result;
  std::optional<Row> last;
  bool done = false;

  void line(std::string_view text) {
    if (std::optional<Row> row = decode_row(text)) {
      ++result.rows;
      last = *row;
      suite.add(std::move(*row));
      return;
    }
    const std::vector<std::string_view> f = split_tabs(text);
    if (f[0] == "done" && f.size() == 2) {
      done = true;
      result.info = unescape(f[1]);
      return;
    }
    int64_t calls = 0, bits = 0;
    if (f[0] == "cov" && f.size() == 4 && parse_int(f[2], calls) && parse_int(f[3], bits)) {
      if (const std::optional<size_t> i = method_index(unescape(f[1]))) {
        result.coverage.calls[*i] += calls;
        result.coverage.dtypes[*i] |= static_cast<uint32_t>(bits);
        return;
      }
    }
    // Only a mismatched or broken child writes anything else: say so rather than drop it.
    suite.fail("section " + section, "unreadable report line '" + escape(text) + "'");
  }

  // A child that said "done" and then failed died in its teardown (a static destructor, the CUDA
  // runtime's exit); its rows stand.
  std::string where() const {
    if (done) return "at exit, after its last row";
    return last ? "after row '" + row_label(*last) + "'" : std::string("before its first row");
  }
};

// Waits for `pid` until `deadline`; false when it is still running then.
bool wait_until(pid_t pid, Clock::time_point deadline, int& status) {
  for (;;) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return true;
    if (r < 0 && errno != EINTR) {
      status = 0;  // not our child any more (reaped elsewhere): nothing to report on
      return true;
    }
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace

std::string escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else {
      out += c;
    }
  }
  return out;
}

std::string unescape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out += s[i];
      continue;
    }
    const char c = s[++i];
    out += c == 't' ? '\t' : c == 'n' ? '\n' : c == 'r' ? '\r' : c;
  }
  return out;
}

std::string encode_row(const Row& row) {
  return detail::str_cat("row\t", escape(row.op), "\t", escape(row.shape), "\t", escape(row.dtype),
                         "\t", number(row.max_abs), "\t", number(row.max_rel), "\t",
                         row.pass ? "1" : "0", "\t", escape(row.note));
}

std::optional<Row> decode_row(std::string_view line) {
  const std::vector<std::string_view> f = split_tabs(line);
  if (f.size() != 8 || f[0] != "row" || (f[6] != "0" && f[6] != "1")) return std::nullopt;
  Row row;
  if (!parse_number(f[4], row.max_abs) || !parse_number(f[5], row.max_rel)) return std::nullopt;
  row.op = unescape(f[1]);
  row.shape = unescape(f[2]);
  row.dtype = unescape(f[3]);
  row.pass = f[6] == "1";
  row.note = unescape(f[7]);
  return row;
}

std::string row_label(const Row& row) {
  return row.op + " " + row.shape + " " + row.dtype;
}

std::string signal_name(int sig) {
  switch (sig) {
    case SIGSEGV:
      return "SIGSEGV";
    case SIGBUS:
      return "SIGBUS";
    case SIGABRT:
      return "SIGABRT";
    case SIGFPE:
      return "SIGFPE";
    case SIGILL:
      return "SIGILL";
    case SIGKILL:
      return "SIGKILL";
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    case SIGTRAP:
      return "SIGTRAP";
    case SIGPIPE:
      return "SIGPIPE";
    default:
      return "signal " + std::to_string(sig);
  }
}

void merge(Coverage& into, const Coverage& from) {
  for (size_t i = 0; i < kMethodCount; ++i) {
    into.calls[i] += from.calls[i];
    into.dtypes[i] |= from.dtypes[i];
  }
}

void Reporter::write_line(const std::string& line) {
  const std::string text = line + "\n";
  size_t off = 0;
  while (off < text.size()) {
    const ssize_t n = ::write(fd_, text.data() + off, text.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the parent is gone; the checks go on, unreported
    off += static_cast<size_t>(n);
  }
}

void Reporter::row(const Row& row) {
  write_line(encode_row(row));
}

void Reporter::coverage(const Coverage& c) {
  for (size_t i = 0; i < kMethodCount; ++i)
    if (c.calls[i] != 0 || c.dtypes[i] != 0)
      write_line(detail::str_cat("cov\t", kMethods[i], "\t", c.calls[i], "\t", c.dtypes[i]));
}

void Reporter::done(const std::string& info) {
  write_line("done\t" + escape(info));
}

ChildFlags child_flags(int argc, char** argv) {
  ChildFlags f;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a.starts_with("--run-section=")) f.section = a.substr(14);
    if (a.starts_with("--report-fd=")) f.report_fd = std::atoi(argv[i] + 12);
  }
  // Programs the child starts (a tool a library runs) must not hold the pipe open after it exits.
  if (f.report_fd >= 0) (void)fcntl(f.report_fd, F_SETFD, FD_CLOEXEC);
  return f;
}

bool is_child_flag(const char* arg) {
  const std::string_view a = arg;
  return a.starts_with("--run-section=") || a.starts_with("--report-fd=");
}

SectionResult run_section(const std::string& exe, const std::vector<std::string>& args,
                          const std::string& section, double timeout_s, Suite& suite) {
  const std::string op = "section " + section;
  const auto start = Clock::now();
  const auto deadline =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  Session session{section, suite, {}, std::nullopt};

  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    suite.fail(op, detail::str_cat("could not start (pipe: ", std::strerror(errno), ")"));
    return session.result;
  }
  // The write end goes to the child through exec; the read end stays close-on-exec. One child
  // runs at a time, so no other child inherits it.
  (void)fcntl(fds[1], F_SETFD, 0);
  std::vector<std::string> words = {exe};
  words.insert(words.end(), args.begin(), args.end());
  words.push_back("--run-section=" + section);
  words.push_back("--report-fd=" + std::to_string(fds[1]));
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  std::fflush(nullptr);  // what we printed so far comes before anything the child prints
  // posix_spawn execs at once: nothing of this process's state (a CUDA context) is used in the
  // child.
  const int rc = posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv.data(), environ);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    suite.fail(op, detail::str_cat("could not start ", exe, ": ", std::strerror(rc)));
    return session.result;
  }

  // Rows as they arrive, until the child closes the pipe (it exited) or the time is up.
  bool timed_out = false;
  std::string pending;
  char chunk[4096];
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int ready = poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1000)));
    if (ready <= 0) continue;  // timeout slice or EINTR: look at the clock again
    const ssize_t n = ::read(fds[0], chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(chunk, static_cast<size_t>(n));
    for (size_t nl; (nl = pending.find('\n')) != std::string::npos; pending.erase(0, nl + 1))
      session.line(std::string_view(pending).substr(0, nl));
  }
  ::close(fds[0]);
  // A partial last line is what a crash in the middle of a write leaves: it is no row.

  int status = 0;
  if (!timed_out && !wait_until(pid, deadline, status)) timed_out = true;
  if (timed_out) {
    ::kill(pid, SIGKILL);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    suite.fail(op, detail::str_cat("timed out after ", timeout_s, " s (killed) ", session.where()));
    return session.result;
  }
  const bool exited_ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (session.done && exited_ok) {
    session.result.finished = true;
    return session.result;
  }
  const std::string when = session.where();
  if (WIFSIGNALED(status)) {
    suite.fail(op, "crashed (" + signal_name(WTERMSIG(status)) + ") " + when);
  } else if (!exited_ok) {
    suite.fail(op, detail::str_cat("exited with status ", WEXITSTATUS(status), " ", when));
  } else {
    suite.fail(op, "exited without finishing, " + when);
  }
  return session.result;
}

}  // namespace stoke::selftest::isolate
