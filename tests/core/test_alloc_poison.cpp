// The CPU allocator's poison mode (core/allocator.h): fresh blocks read as NaN (floats) or all
// ones (integers), a cached block handed out again is poisoned again, and a write past a block's
// end or before its start aborts at the free, naming the block.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <csignal>
#include <cstdint>

#include "stoke/stoke.h"

using namespace stoke;

namespace {

// Turns poison mode on for a scope (the suite may already run with STOKE_ALLOC_POISON=1).
struct PoisonScope {
  bool was = alloc_poison();
  PoisonScope() { set_alloc_poison(true); }
  ~PoisonScope() { set_alloc_poison(was); }
};

// Runs f in a forked child and returns its wait status: an abort is its whole point.
template <class F>
int in_child(F f) {
  const pid_t pid = fork();
  if (pid == 0) {
    f();
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

}  // namespace

TEST_CASE("alloc poison: every fresh block is NaN in every float dtype and ones in the integers",
          "[core][allocator]") {
  PoisonScope on;
  // Small (malloc'd) and large (once cached) blocks, twice: the second round reuses memory the
  // first one wrote zeros into.
  for (int round = 0; round < 2; ++round)
    for (const int64_t n : {int64_t{7}, int64_t{1} << 18}) {
      INFO("round " << round << ", " << n << " elements");
      for (const DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
        const Tensor t = empty({n}, {.dtype = dt});
        const auto v = t.to(DType::f64).to_vector<double>();
        CHECK(std::all_of(v.begin(), v.end(), [](double x) { return std::isnan(x); }));
        fill_(t, 0.0);  // the next round's block held zeros
      }
      const auto i = empty({n}, {.dtype = DType::i64}).to_vector<int64_t>();
      CHECK(std::all_of(i.begin(), i.end(), [](int64_t x) { return x == -1; }));
      const auto u = empty({n}, {.dtype = DType::u8}).to_vector<int>();
      CHECK(std::all_of(u.begin(), u.end(), [](int x) { return x == 255; }));
    }
}

TEST_CASE("alloc poison: a write past the end or before the start aborts at the free",
          "[core][allocator]") {
  PoisonScope on;
  for (const size_t n : {size_t{100}, size_t{1} << 20}) {
    INFO(n << " bytes");
    const int past = in_child([n] {
      DeviceAllocator& a = cpu_allocator();
      auto* p = static_cast<unsigned char*>(a.allocate(n));
      p[n] = 1;  // one byte past the end, inside what the allocator rounded the size up to
      a.deallocate(p, n);
    });
    CHECK(WIFSIGNALED(past));
    CHECK(WTERMSIG(past) == SIGABRT);
    const int before = in_child([n] {
      DeviceAllocator& a = cpu_allocator();
      auto* p = static_cast<unsigned char*>(a.allocate(n));
      p[-1] = 1;
      a.deallocate(p, n);
    });
    CHECK(WIFSIGNALED(before));
    CHECK(WTERMSIG(before) == SIGABRT);
    // In bounds is fine.
    const int fine = in_child([n] {
      DeviceAllocator& a = cpu_allocator();
      auto* p = static_cast<unsigned char*>(a.allocate(n));
      p[0] = p[n - 1] = 1;
      a.deallocate(p, n);
    });
    CHECK(WIFEXITED(fine));
  }
}

TEST_CASE("alloc poison: blocks from before the switch are freed as they were allocated",
          "[core][allocator]") {
  const bool was = alloc_poison();
  set_alloc_poison(false);
  Tensor plain = empty({1 << 18});
  set_alloc_poison(true);
  Tensor poisoned = empty({1 << 18});
  plain = Tensor();  // no guards to check: freed (and cached) as an ordinary block
  set_alloc_poison(false);
  poisoned = Tensor();  // guarded: checked and released though the mode is off now
  set_alloc_poison(was);
  SUCCEED();
}
