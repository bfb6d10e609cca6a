// Whether ops record the autograd graph on this thread. NoGradGuard turns recording off for a
// scope (evaluation, optimizer steps); the flag is thread-local, as in PyTorch.
#pragma once

namespace stoke {

class GradMode {
 public:
  static bool is_enabled();
  static void set_enabled(bool enabled);
};

class NoGradGuard {
 public:
  NoGradGuard() : previous_(GradMode::is_enabled()) { GradMode::set_enabled(false); }
  ~NoGradGuard() { GradMode::set_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace stoke
