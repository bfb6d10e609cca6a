#include "cuda/runtime/deferred_checks.h"

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/sync_debug.h"

namespace stoke::cuda {
namespace {

constexpr size_t kMaxPending = 256;

// Per thread: ops run on the calling thread, and their errors belong to it (a loader thread's
// synchronizations must not raise the training thread's errors).
thread_local std::vector<DeferredCheck> t_pending;
thread_local bool t_checking = false;  // inside a describe() (see check_deferred_errors)

}  // namespace

void defer_check(DeferredCheck check) {
  STOKE_CHECK(check.flag != nullptr && check.describe, "cuda::defer_check",
              "expected a device flag and a description, got ",
              check.flag ? "no description" : "no flag");
  t_pending.push_back(std::move(check));
  if (t_pending.size() > kMaxPending) {
    // Memory stays bounded in a loop that never synchronizes: one deliberate wait per 256
    // checks (a training loop that reads its metrics every few steps never gets here).
    const ExpectedSync expected("more than 256 deferred checks pending");
    note_device_sync("reading the deferred checks");
    check_deferred_errors();
  }
}

void check_deferred_errors() {
  if (t_checking || t_pending.empty()) return;
  std::vector<DeferredCheck> pending = std::exchange(t_pending, {});
  // Every flag's copy is queued first, then each stream is waited for once (not one round trip
  // per check); a pageable destination is written when its copy has run.
  std::vector<int64_t> v64(pending.size(), 0);
  std::vector<int32_t> v32(pending.size(), 0);
  std::vector<cudaStream_t> streams;
  for (size_t i = 0; i < pending.size(); ++i) {
    const DeferredCheck& c = pending[i];
    void* dst = c.flag_is_i64 ? static_cast<void*>(&v64[i]) : static_cast<void*>(&v32[i]);
    STOKE_CUDA_CHECK(
        cudaMemcpyAsync(dst, c.flag, c.flag_is_i64 ? 8 : 4, cudaMemcpyDeviceToHost, c.stream));
    if (std::find(streams.begin(), streams.end(), c.stream) == streams.end())
      streams.push_back(c.stream);
  }
  for (cudaStream_t s : streams) STOKE_CUDA_CHECK(cudaStreamSynchronize(s));
  // describe() may read tensors back, a synchronization point itself: it must not recurse here.
  t_checking = true;
  std::string first;
  try {
    for (size_t i = 0; i < pending.size() && first.empty(); ++i) {
      const int64_t v = pending[i].flag_is_i64 ? v64[i] : v32[i];
      if (v != pending[i].passed) first = pending[i].describe(v);
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

std::vector<DeferredCheck> take_deferred_checks_since(int64_t mark) {
  std::vector<DeferredCheck> taken;
  // A list read in between (it cannot be, inside a capture) leaves fewer than `mark`: none taken.
  const size_t from = static_cast<size_t>(std::max<int64_t>(mark, 0));
  if (from >= t_pending.size()) return taken;
  const auto first = t_pending.begin() + static_cast<std::ptrdiff_t>(from);
  taken.assign(std::make_move_iterator(first), std::make_move_iterator(t_pending.end()));
  t_pending.erase(first, t_pending.end());
  return taken;
}

}  // namespace stoke::cuda
