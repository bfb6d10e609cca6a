// cuda/emu: stack switching for the fiber execution mode (see fiber.h). Hand-written because the
// library that would do it (Boost.Context) is not among stoke's dependencies, and ucontext's
// swapcontext makes a system call per switch (1.6 us here, where a sgemm block switches every
// thread at every barrier).
#include "cuda/emu/fiber.h"

#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <new>

#if defined(STOKE_EMU_ASAN)
#include <sanitizer/common_interface_defs.h>
#endif
#if defined(STOKE_EMU_TSAN)
#include <sanitizer/tsan_interface.h>
#endif

#if !defined(STOKE_EMU_FIBER_UCONTEXT)
// stoke_emu_fiber_switch(save, load): pushes the System V callee-saved registers, stores the stack
// pointer to *save, loads `load` as the stack pointer and pops the other context's registers; its
// `ret` continues that context. The floating-point control words are not switched: every context
// of a thread runs under the thread's. stoke_emu_fiber_trampoline is where a new stack's first
// `ret` lands: it calls r12(r13) with an aligned stack; CFI marks it the outermost frame.
asm(R"(
  .text
  .globl stoke_emu_fiber_switch
  .hidden stoke_emu_fiber_switch
  .type stoke_emu_fiber_switch, @function
  .p2align 4
stoke_emu_fiber_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size stoke_emu_fiber_switch, .-stoke_emu_fiber_switch

  .globl stoke_emu_fiber_trampoline
  .hidden stoke_emu_fiber_trampoline
  .type stoke_emu_fiber_trampoline, @function
  .p2align 4
stoke_emu_fiber_trampoline:
  .cfi_startproc
  .cfi_undefined rip
  movq %r13, %rdi
  callq *%r12
  ud2
  .cfi_endproc
  .size stoke_emu_fiber_trampoline, .-stoke_emu_fiber_trampoline
)");
extern "C" void stoke_emu_fiber_switch(void** save, void* load);
extern "C" void stoke_emu_fiber_trampoline();
#endif

namespace stoke::emu::detail {

Fiber::Fiber() {
#if defined(STOKE_EMU_ASAN)
  // AddressSanitizer wants the bounds of the stack it is switched back to.
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr) == 0) {
    void* bottom = nullptr;
    std::size_t size = 0;
    if (pthread_attr_getstack(&attr, &bottom, &size) == 0) {
      stack_bottom_ = bottom;
      stack_bytes_ = size;
    }
    pthread_attr_destroy(&attr);
  }
#endif
#if defined(STOKE_EMU_TSAN)
  tsan_fiber_ = __tsan_get_current_fiber();
#endif
}

Fiber::Fiber(Entry entry, void* arg, std::size_t stack_bytes) : entry_(entry), arg_(arg) {
  const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  stack_bytes = (stack_bytes + page - 1) / page * page;
  mapping_bytes_ = stack_bytes + page;
  // Address space only (MAP_NORESERVE): pages are committed as the stack grows into them.
  void* p = mmap(nullptr, mapping_bytes_, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  mapping_ = static_cast<unsigned char*>(p);
  if (mprotect(mapping_, page, PROT_NONE) != 0) {
    munmap(mapping_, mapping_bytes_);
    throw std::bad_alloc();
  }
  stack_bottom_ = mapping_ + page;
  stack_bytes_ = stack_bytes;
  unsigned char* top = mapping_ + mapping_bytes_;
#if defined(STOKE_EMU_FIBER_UCONTEXT)
  getcontext(&context_);
  context_.uc_stack.ss_sp = mapping_ + page;
  context_.uc_stack.ss_size = stack_bytes;
  context_.uc_link = nullptr;
  const auto bits = reinterpret_cast<std::uintptr_t>(this);
  // makecontext passes int arguments: the pointer in two halves.
  makecontext(&context_, reinterpret_cast<void (*)()>(+[](unsigned hi, unsigned lo) {
    start(reinterpret_cast<Fiber*>((std::uintptr_t{hi} << 32) | lo));
  }),
              2, static_cast<unsigned>(bits >> 32), static_cast<unsigned>(bits & 0xffffffffu));
  (void)top;
#else
  // The frame stoke_emu_fiber_switch pops: r15, r14, r13 (the argument), r12 (the function),
  // rbx, rbp (0: the end of the frame-pointer chain), then the return address. After that `ret`
  // the stack pointer is 16-byte aligned, as the trampoline's call needs.
  auto* frame = reinterpret_cast<std::uintptr_t*>(top - 16) - 7;
  frame[0] = 0;                                                // r15
  frame[1] = 0;                                                // r14
  frame[2] = reinterpret_cast<std::uintptr_t>(this);           // r13
  frame[3] = reinterpret_cast<std::uintptr_t>(&Fiber::start);  // r12
  frame[4] = 0;                                                // rbx
  frame[5] = 0;                                                // rbp
  frame[6] = reinterpret_cast<std::uintptr_t>(&stoke_emu_fiber_trampoline);
  sp_ = frame;
#endif
#if defined(STOKE_EMU_TSAN)
  tsan_fiber_ = __tsan_create_fiber(0);
#endif
}

Fiber::~Fiber() {
#if defined(STOKE_EMU_TSAN)
  if (mapping_ != nullptr) __tsan_destroy_fiber(tsan_fiber_);
#endif
  if (mapping_ != nullptr) munmap(mapping_, mapping_bytes_);
}

void Fiber::start(Fiber* self) {
#if defined(STOKE_EMU_ASAN)
  __sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);
#endif
  self->entry_(self->arg_);
  std::abort();  // an entry never returns (fiber.h)
}

void Fiber::switch_to(Fiber& from, Fiber& to) {
#if defined(STOKE_EMU_ASAN)
  __sanitizer_start_switch_fiber(&from.asan_fake_stack_, to.stack_bottom_, to.stack_bytes_);
#endif
#if defined(STOKE_EMU_TSAN)
  __tsan_switch_to_fiber(to.tsan_fiber_, 0);
#endif
#if defined(STOKE_EMU_FIBER_UCONTEXT)
  swapcontext(&from.context_, &to.context_);
#else
  stoke_emu_fiber_switch(&from.sp_, to.sp_);
#endif
#if defined(STOKE_EMU_ASAN)
  __sanitizer_finish_switch_fiber(from.asan_fake_stack_, nullptr, nullptr);
#endif
}

}  // namespace stoke::emu::detail
