// A benchmark's peer (the PyTorch twin) as one long-lived child process that answers a line with a
// line: the bench asks for one case, measures its own side next to it, and so both sides of a row
// run seconds apart instead of an op's whole case list apart.
#pragma once

#include <sys/types.h>

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace stoke::bench {

class PeerProcess {
 public:
  // Starts argv[0] (a path, not looked up in PATH) with its stdin and stdout on pipes; stderr is
  // this process's. Throws std::runtime_error naming the program when it cannot start.
  explicit PeerProcess(const std::vector<std::string>& argv);
  // Closes the peer's stdin (its cue to exit) and waits for it.
  ~PeerProcess();
  PeerProcess(const PeerProcess&) = delete;
  PeerProcess& operator=(const PeerProcess&) = delete;

  // Sends `request` (one line, without the newline) and returns the peer's next line (without the
  // newline), or nullopt when the peer has exited or closed its stdout; alive() is false then.
  std::optional<std::string> ask(const std::string& request);
  // The peer's next line without sending anything (a greeting it prints once it is ready).
  std::optional<std::string> read_line();
  bool alive() const { return pid_ > 0 && to_ != nullptr && from_ != nullptr; }

 private:
  void close_and_wait();

  pid_t pid_ = -1;
  FILE* to_ = nullptr;    // the peer's stdin
  FILE* from_ = nullptr;  // the peer's stdout
};

}  // namespace stoke::bench
