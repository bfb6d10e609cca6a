// cuda/emu: stack switching for the fiber execution mode (cuda/emu/launch_fibers.cpp). A Fiber is
// one context of execution on the calling OS thread: the thread's own stack, or an allocated
// stack that runs entry(arg). Switching saves the callee-saved registers and the stack pointer and
// loads the other context's (x86-64: hand-written, a few nanoseconds; elsewhere ucontext, whose
// swapcontext also makes a signal-mask system call: 1.6 us per switch measured here). The
// switches tell AddressSanitizer and ThreadSanitizer which stack is running
// (__sanitizer_start/finish_switch_fiber, __tsan_switch_to_fiber), so their reports stay right.
// Not an interface of the emulator.
#pragma once

#include <cstddef>

#if defined(__SANITIZE_ADDRESS__)
#define STOKE_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define STOKE_EMU_ASAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define STOKE_EMU_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define STOKE_EMU_TSAN 1
#endif
#endif

#if !defined(__x86_64__) && !defined(STOKE_EMU_FIBER_UCONTEXT)
#define STOKE_EMU_FIBER_UCONTEXT 1
#endif
#if defined(STOKE_EMU_FIBER_UCONTEXT)
#include <ucontext.h>
#endif

namespace stoke::emu::detail {

class Fiber {
 public:
  using Entry = void (*)(void* arg);

  /// The calling OS thread's own stack: a context to switch away from and back to.
  Fiber();
  /// A new stack of `stack_bytes` (with an inaccessible guard page below it, so an overflow
  /// faults) that runs entry(arg) the first time it is switched to. entry never returns: it ends
  /// by switching away for good. Throws std::bad_alloc when the stack cannot be mapped.
  Fiber(Entry entry, void* arg, std::size_t stack_bytes);
  ~Fiber();
  Fiber(const Fiber&) = delete;
  Fiber& operator=(const Fiber&) = delete;

  /// Saves the running context (on the calling thread) into `from` and continues `to`; returns
  /// when some context of this thread switches back to `from`. Both live on the calling thread.
  static void switch_to(Fiber& from, Fiber& to);

 private:
  static void start(Fiber* self);

  Entry entry_ = nullptr;
  void* arg_ = nullptr;
  unsigned char* mapping_ = nullptr;  // guard page + stack; nullptr for a thread's own stack
  std::size_t mapping_bytes_ = 0;
  // The stack's lowest usable address and size, as the sanitizers want them.
  const void* stack_bottom_ = nullptr;
  std::size_t stack_bytes_ = 0;
#if defined(STOKE_EMU_FIBER_UCONTEXT)
  ucontext_t context_{};
#else
  void* sp_ = nullptr;  // the saved stack pointer while not running
#endif
#if defined(STOKE_EMU_ASAN)
  void* asan_fake_stack_ = nullptr;
#endif
#if defined(STOKE_EMU_TSAN)
  void* tsan_fiber_ = nullptr;
#endif
};

}  // namespace stoke::emu::detail
