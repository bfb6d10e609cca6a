#include "data/mapped_file_guard.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>

namespace stoke::data {
namespace {

// One registered mapping. The handler reads the slots without locks (a signal handler may not
// take one); a slot is published by storing `end` last and retired by clearing `end` first, and
// its message stays allocated until it is reused by a later registration.
struct Slot {
  std::atomic<uintptr_t> begin{0};
  std::atomic<uintptr_t> end{0};  // 0: free
  char message[512] = {};
  std::atomic<size_t> length{0};
};

constexpr int kSlots = 4096;
Slot g_slots[kSlots];
std::mutex g_register_mutex;  // registration and release (never taken by the handler)
struct sigaction g_previous {};
bool g_installed = false;

void write_all(const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(STDERR_FILENO, p, n);
    if (w <= 0) return;
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void on_sigbus(int sig, siginfo_t* info, void* context) {
  const auto address = reinterpret_cast<uintptr_t>(info ? info->si_addr : nullptr);
  for (const Slot& s : g_slots) {
    const uintptr_t end = s.end.load(std::memory_order_acquire);
    if (end != 0 && address >= s.begin.load(std::memory_order_relaxed) && address < end) {
      write_all(s.message, s.length.load(std::memory_order_relaxed));
      ::_exit(1);
    }
  }
  // Not one of ours: what would have happened without this handler.
  if (g_previous.sa_flags & SA_SIGINFO) {
    if (g_previous.sa_sigaction) return g_previous.sa_sigaction(sig, info, context);
  } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    return g_previous.sa_handler(sig);
  }
  ::signal(SIGBUS, SIG_DFL);
  ::raise(SIGBUS);
}

void install_handler() {
  if (g_installed) return;
  struct sigaction sa {};
  sa.sa_sigaction = on_sigbus;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  if (::sigaction(SIGBUS, &sa, &g_previous) == 0) g_installed = true;
}

}  // namespace

MappedFileGuard::MappedFileGuard(const void* begin, size_t bytes, const std::string& path) {
  if (bytes == 0) return;
  std::lock_guard<std::mutex> lock(g_register_mutex);
  install_handler();
  for (int i = 0; i < kSlots; ++i) {
    Slot& s = g_slots[i];
    if (s.end.load(std::memory_order_relaxed) != 0) continue;
    const std::string text = "stoke: '" + path +
                             "' shrank while it was being read through its memory map (SIGBUS): "
                             "the file was truncated or replaced under this job; exiting\n";
    const size_t n = std::min(text.size(), sizeof s.message);
    std::memcpy(s.message, text.data(), n);
    s.length.store(n, std::memory_order_relaxed);
    const auto b = reinterpret_cast<uintptr_t>(begin);
    s.begin.store(b, std::memory_order_relaxed);
    s.end.store(b + bytes, std::memory_order_release);
    slot_ = i;
    return;
  }
}

void MappedFileGuard::release() {
  if (slot_ < 0) return;
  std::lock_guard<std::mutex> lock(g_register_mutex);
  g_slots[slot_].end.store(0, std::memory_order_release);
  slot_ = -1;
}

MappedFileGuard::~MappedFileGuard() {
  release();
}

MappedFileGuard::MappedFileGuard(MappedFileGuard&& other) noexcept : slot_(other.slot_) {
  other.slot_ = -1;
}

MappedFileGuard& MappedFileGuard::operator=(MappedFileGuard&& other) noexcept {
  if (this != &other) {
    release();
    slot_ = other.slot_;
    other.slot_ = -1;
  }
  return *this;
}

}  // namespace stoke::data
