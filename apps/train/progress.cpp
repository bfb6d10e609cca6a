#include "progress.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

namespace stoke::train {

ProgressBar::ProgressBar(std::string label, int64_t total, bool enabled)
    : label_(std::move(label)),
      total_(total),
      enabled_(enabled),
      tty_(isatty(fileno(stderr)) != 0),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

bool ProgressBar::due(int64_t done) const {
  if (!enabled_ || !tty_) return false;
  return done >= total_ ||
         std::chrono::steady_clock::now() - last_draw_ >= std::chrono::milliseconds(200);
}

void ProgressBar::update(int64_t done, double images_per_s, const std::string& extra) {
  if (!due(done)) return;
  const auto now = std::chrono::steady_clock::now();
  last_draw_ = now;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double eta =
      done > 0 ? elapsed * static_cast<double>(total_ - done) / static_cast<double>(done) : 0;
  constexpr int kWidth = 24;
  const int filled = total_ > 0 ? static_cast<int>(kWidth * done / total_) : kWidth;
  std::string bar(filled, '#');
  bar.resize(kWidth, '-');
  std::fprintf(stderr, "\r%s [%s] %lld/%lld %s %.0f img/s ETA %.0fs\033[K", label_.c_str(),
               bar.c_str(), static_cast<long long>(done), static_cast<long long>(total_),
               extra.c_str(), images_per_s, eta);
  std::fflush(stderr);
}

void ProgressBar::finish() {
  if (enabled_ && tty_) std::fprintf(stderr, "\r\033[K");
}

RssMib read_rss_mib() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0, resident = 0;
  statm >> pages >> resident;
  const double current =
      static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1 << 20);
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  const double peak = static_cast<double>(u.ru_maxrss) / 1024.0;  // KiB on Linux
  return rss_reading(current, peak);
}

}  // namespace stoke::train
