// Runs a command for the end-to-end tests of stoke's programs: its exit status or signal, its
// output (stdout and stderr together), and a deadline after which it is killed, so that a program
// that hangs (a FIFO opened for writing blocks until a reader comes) fails the test instead of
// hanging the suite. (Not its peak RSS: a child forked from a test binary counts the pages it
// shared with its parent before exec. tests/nn/idx_limit_check.py measures from a small process.)
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <string>

namespace stoke::test {

struct ProcessResult {
  int exit_code = -1;  // the exit status, or -1 when a signal ended it
  int signal = 0;      // the signal that ended it (SIGALRM: the deadline), or 0
  std::string output;  // stdout and stderr, interleaved
  bool timed_out() const { return signal == SIGALRM; }
};

// `command` through /bin/sh -c. The command gets SIGALRM after `deadline_s` seconds (its default
// action ends it): start it with "exec prog ..." so that the alarm reaches the program itself.
inline ProcessResult run_process(const std::string& command, unsigned deadline_s = 60) {
  ProcessResult r;
  int fds[2];
  if (::pipe(fds) != 0) return r;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    ::close(fds[0]);
    ::close(fds[1]);
    ::alarm(deadline_s);  // kept across exec
    ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(fds[1]);
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    r.output.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  return r;
}

}  // namespace stoke::test
