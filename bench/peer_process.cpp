#include "bench/peer_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace stoke::bench {

PeerProcess::PeerProcess(const std::vector<std::string>& argv) {
  if (argv.empty()) throw std::runtime_error("PeerProcess: no program to run");
  // A peer that dies mid-request must not kill the bench with SIGPIPE: the write fails instead,
  // and ask() reports the peer gone.
  ::signal(SIGPIPE, SIG_IGN);
  int in[2], out[2];  // in: bench -> peer's stdin; out: peer's stdout -> bench
  if (::pipe2(in, O_CLOEXEC) != 0) throw std::runtime_error("PeerProcess: pipe failed");
  if (::pipe2(out, O_CLOEXEC) != 0) {
    ::close(in[0]);
    ::close(in[1]);
    throw std::runtime_error("PeerProcess: pipe failed");
  }
  std::vector<char*> args;
  for (const std::string& s : argv) args.push_back(const_cast<char*>(s.c_str()));
  args.push_back(nullptr);
  pid_ = ::fork();
  if (pid_ == 0) {
    // The child: only async-signal-safe calls until exec. dup2 clears O_CLOEXEC on the copies.
    ::dup2(in[0], STDIN_FILENO);
    ::dup2(out[1], STDOUT_FILENO);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(in[0]);
  ::close(out[1]);
  if (pid_ < 0) {
    ::close(in[1]);
    ::close(out[0]);
    throw std::runtime_error("PeerProcess: fork failed for " + argv[0]);
  }
  to_ = ::fdopen(in[1], "w");
  from_ = ::fdopen(out[0], "r");
  if (!to_ || !from_) {
    if (to_)
      std::fclose(to_);
    else
      ::close(in[1]);
    if (from_)
      std::fclose(from_);
    else
      ::close(out[0]);
    to_ = from_ = nullptr;
    close_and_wait();
    throw std::runtime_error("PeerProcess: fdopen failed for " + argv[0]);
  }
}

PeerProcess::~PeerProcess() {
  close_and_wait();
}

std::optional<std::string> PeerProcess::ask(const std::string& request) {
  if (!alive()) return std::nullopt;
  if (std::fputs((request + "\n").c_str(), to_) < 0 || std::fflush(to_) != 0) {
    close_and_wait();
    return std::nullopt;
  }
  return read_line();
}

std::optional<std::string> PeerProcess::read_line() {
  if (!alive()) return std::nullopt;
  std::string line;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, from_)) {
    line += buf;
    if (!line.empty() && line.back() == '\n') {
      line.pop_back();
      return line;
    }
  }
  close_and_wait();  // EOF (the peer exited) before a whole line
  return std::nullopt;
}

void PeerProcess::close_and_wait() {
  if (to_) std::fclose(to_);
  if (from_) std::fclose(from_);
  to_ = from_ = nullptr;
  if (pid_ > 0) {
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
  pid_ = -1;
}

}  // namespace stoke::bench
