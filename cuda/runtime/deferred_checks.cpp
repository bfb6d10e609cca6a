#include "cuda/runtime/deferred_checks.h"

#include <cstdio>
#include <utility>
#include <vector>

#include "core/error.h"

namespace stoke::cuda {
namespace {

constexpr size_t kMaxPending = 256;

// Per thread: ops run on the calling thread, and their errors belong to it (a loader thread's
// synchronizations must not raise the training thread's errors).
thread_local std::vector<DeferredCheck> t_pending;
// A describe() that reads a tensor back synchronizes again: it must not recurse into the check.
thread_local bool t_checking = false;

int64_t read_flag(const DeferredCheck& c) {
  int64_t v64 = 0;
  int32_t v32 = 0;
  void* dst = c.flag_is_i64 ? static_cast<void*>(&v64) : static_cast<void*>(&v32);
  STOKE_CUDA_CHECK(
      cudaMemcpyAsync(dst, c.flag, c.flag_is_i64 ? 8 : 4, cudaMemcpyDeviceToHost, c.stream));
  STOKE_CUDA_CHECK(cudaStreamSynchronize(c.stream));
  return c.flag_is_i64 ? v64 : v32;
}

}  // namespace

void defer_check(DeferredCheck check) {
  STOKE_CHECK(check.flag != nullptr && check.describe, "cuda::defer_check",
              "expected a device flag and a description, got ",
              check.flag ? "no description" : "no flag");
  t_pending.push_back(std::move(check));
  if (t_pending.size() > kMaxPending) check_deferred_errors();
}

void check_deferred_errors() {
  if (t_checking || t_pending.empty()) return;
  t_checking = true;
  std::vector<DeferredCheck> pending = std::exchange(t_pending, {});
  std::string first;
  try {
    for (const DeferredCheck& c : pending) {
      const int64_t v = read_flag(c);
      if (v != c.passed && first.empty()) first = c.describe(v);
    }
  } catch (...) {
    t_checking = false;
    throw;
  }
  t_checking = false;
  if (!first.empty()) throw Error(first + " (found at the next synchronization)");
}

int64_t pending_deferred_checks() {
  return static_cast<int64_t>(t_pending.size());
}

}  // namespace stoke::cuda
