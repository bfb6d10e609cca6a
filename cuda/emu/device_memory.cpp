// cuda/emu: device memory that host code cannot touch. On a GPU a host read or write through a
// cudaMalloc'd pointer faults; in a plain emulator it silently works, so host code that forgets a
// copy passes every test and crashes on its first GPU run. Here every cudaMalloc block lives in one
// reserved address range (the arena) that is PROT_NONE except while a kernel runs or an emulated
// copy or memset reads or writes it (DeviceAccess). A host access at any other time raises
// SIGSEGV at the offending instruction; the handler names the cause and hands the signal on, so
// AddressSanitizer (or the default action) reports the stack with the line.
//
// Blocks are page-granular (first fit with coalescing); in AddressSanitizer builds the bytes past
// a block's size and freed blocks are poisoned, so a kernel's overrun or use after free is still
// reported at its line, as it was with exactly-sized heap blocks.
#include <sys/mman.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "cuda/emu/internal.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define STOKE_EMU_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define STOKE_EMU_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define STOKE_EMU_POISON(p, n) ((void)(p), (void)(n))
#define STOKE_EMU_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace stoke::emu {
namespace {

// Address space only (MAP_NORESERVE): memory is committed as blocks are written and returned to
// the system when they are freed. Larger than any device-memory limit a test sets.
constexpr std::size_t kArenaBytes = std::size_t{64} << 30;

struct Arena {
  std::mutex m;
  unsigned char* base = nullptr;
  std::size_t page = 4096;
  std::size_t used = 0;                     // [base, base + used) has ever held a block
  std::map<std::size_t, std::size_t> free;  // offset -> bytes, coalesced
  int open = 0;                             // DeviceAccess scopes alive
  bool guard = true;                        // PROT_NONE outside them
  struct sigaction previous {};

  Arena() {
    const char* env = std::getenv("STOKE_EMU_DEVICE_GUARD");
    guard = !(env && std::strcmp(env, "0") == 0);
  }
};

Arena& arena() {
  static Arena a;
  return a;
}

const char kMessage[] =
    "cuda/emu: host code read or wrote device memory (a cudaMalloc'd address) outside a kernel "
    "launch or cudaMemcpy/cudaMemset: on a GPU this access faults. Copy the data with "
    "cudaMemcpy / Tensor::to(cpu), or run the work as a kernel.\n";

void on_segv(int sig, siginfo_t* info, void* uctx) {
  Arena& a = arena();
  const auto* addr = static_cast<const unsigned char*>(info->si_addr);
  if (a.base != nullptr && addr >= a.base && addr < a.base + kArenaBytes) {
    const ssize_t ignored = write(STDERR_FILENO, kMessage, sizeof(kMessage) - 1);
    (void)ignored;
  }
  // Hand the fault on: the previous handler (AddressSanitizer's report with the stack) or the
  // default action. Re-executing the faulting instruction raises it again under that handler.
  if (a.previous.sa_flags & SA_SIGINFO) {
    if (a.previous.sa_sigaction != nullptr) {
      a.previous.sa_sigaction(sig, info, uctx);
      return;
    }
  } else if (a.previous.sa_handler != SIG_DFL && a.previous.sa_handler != SIG_IGN &&
             a.previous.sa_handler != nullptr) {
    a.previous.sa_handler(sig);
    return;
  }
  signal(sig, SIG_DFL);
}

void reserve(Arena& a) {
  a.page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  void* p =
      mmap(nullptr, kArenaBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return;  // cudaMalloc then fails with cudaErrorMemoryAllocation
  a.base = static_cast<unsigned char*>(p);
}

// Puts on_segv in front of whatever SIGSEGV handler is installed now. Checked at every allocation
// because test frameworks install and restore their own handler around each test.
void ensure_handler(Arena& a) {
  struct sigaction current {};
  sigaction(SIGSEGV, nullptr, &current);
  if ((current.sa_flags & SA_SIGINFO) && current.sa_sigaction == on_segv) return;
  struct sigaction act {};
  act.sa_sigaction = on_segv;
  act.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&act.sa_mask);
  sigaction(SIGSEGV, &act, &a.previous);
}

// Protection of what has ever been allocated, for the current state; called with the lock held.
void apply_protection(Arena& a, std::size_t from, std::size_t to) {
  if (to <= from) return;
  const int prot = (a.open > 0 || !a.guard) ? PROT_READ | PROT_WRITE : PROT_NONE;
  mprotect(a.base + from, to - from, prot);
}

std::size_t round_up(std::size_t n, std::size_t to) {
  return (n + to - 1) / to * to;
}

}  // namespace

namespace detail {

void* device_alloc(std::size_t bytes) {
  Arena& a = arena();
  std::lock_guard lock(a.m);
  if (a.base == nullptr) reserve(a);
  if (a.base == nullptr) return nullptr;
  ensure_handler(a);
  const std::size_t span = round_up(bytes, a.page);
  std::size_t offset = a.used;
  for (auto it = a.free.begin(); it != a.free.end(); ++it) {
    if (it->second < span) continue;
    offset = it->first;
    if (it->second > span) a.free.emplace(it->first + span, it->second - span);
    a.free.erase(it);
    break;
  }
  if (offset == a.used) {
    if (span > kArenaBytes - a.used) return nullptr;
    a.used += span;
    apply_protection(a, offset, a.used);
  }
  unsigned char* p = a.base + offset;
  STOKE_EMU_UNPOISON(p, bytes);
  STOKE_EMU_POISON(p + bytes, span - bytes);
  return p;
}

void device_free(void* ptr, std::size_t bytes) {
  Arena& a = arena();
  std::lock_guard lock(a.m);
  auto* p = static_cast<unsigned char*>(ptr);
  const std::size_t span = round_up(bytes, a.page);
  std::size_t offset = static_cast<std::size_t>(p - a.base);
  STOKE_EMU_POISON(p, span);
  madvise(p, span, MADV_DONTNEED);  // back to the system; the next block reads zeros
  std::size_t size = span;
  auto next = a.free.lower_bound(offset);
  if (next != a.free.end() && next->first == offset + size) {
    size += next->second;
    next = a.free.erase(next);
  }
  if (next != a.free.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      offset = prev->first;
      size += prev->second;
      a.free.erase(prev);
    }
  }
  a.free.emplace(offset, size);
}

}  // namespace detail

DeviceAccess::DeviceAccess() {
  Arena& a = arena();
  std::lock_guard lock(a.m);
  if (a.open++ == 0) apply_protection(a, 0, a.used);
}

DeviceAccess::~DeviceAccess() {
  Arena& a = arena();
  std::lock_guard lock(a.m);
  if (--a.open == 0) apply_protection(a, 0, a.used);
}

bool set_device_memory_guard(bool on) {
  Arena& a = arena();
  std::lock_guard lock(a.m);
  const bool was = a.guard;
  a.guard = on;
  apply_protection(a, 0, a.used);
  return was;
}

}  // namespace stoke::emu
