// Terminal progress bar and process statistics for the training main.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>

namespace stoke::train {

using Clock = std::chrono::steady_clock;
inline double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// A one-line progress bar on stderr ("epoch 1/2 [#####-----] 234/469 loss 0.51 ...") redrawn at
// most every 0.2 s; on a non-terminal it prints nothing until finish().
class ProgressBar {
 public:
  ProgressBar(std::string label, int64_t total, bool enabled);
  // `done` items of `total`; `images_per_s` and `extra` ("loss 0.51 acc 81.2%") go on the line.
  void update(int64_t done, double images_per_s, const std::string& extra);
  // Whether update(done, ...) would draw now: what to compute the line's text for (a trainer
  // reads its metrics back from the device only then).
  bool due(int64_t done) const;
  void finish();

 private:
  std::string label_;
  int64_t total_;
  bool enabled_, tty_;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

// Resident set size now and at its peak, in MiB, as one reading.
struct RssMib {
  double current = 0, peak = 0;
};
// The two come from different counters (/proc/self/statm and getrusage's ru_maxrss, read one
// after the other, the second kept by the kernel at its own moments), so the peak as read can be
// below the current size ("rss 104 MiB (peak 103)"): the reading's peak is at least its current.
inline RssMib rss_reading(double current_mib, double peak_mib) {
  return {current_mib, std::max(peak_mib, current_mib)};
}
RssMib read_rss_mib();

}  // namespace stoke::train
