// Checks of input values that only the device can see (an index or a class target out of range),
// reported without a host read-back per call. A kernel writes the check's answer into a small
// device flag; the host registers the flag here with a function that describes a failure, and the
// answers are read at this thread's next synchronization point (a blocking copy such as .to(cpu)
// or item(), Stream::synchronize, check_deferred_errors()). A failure throws stoke::Error there,
// naming the op that saw the bad value, as PyTorch's device-side asserts do at the next sync; the
// kernels that consumed the bad values skip them (no out-of-bounds access), and their results are
// not to be used.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cuda/compat.h"

namespace stoke::cuda {

// One pending check: the flag (an i32 or i64 in device memory, written on `stream`), the value
// that means "passed", and what to say when it did not (called with the flag's value on this
// thread, after the device work is done; it may read tensors back). `keep` holds the flag's
// memory (and anything the message needs) until then.
struct DeferredCheck {
  const void* flag = nullptr;
  bool flag_is_i64 = true;
  int64_t passed = -1;
  cudaStream_t stream = nullptr;
  std::shared_ptr<const void> keep;
  std::function<std::string(int64_t)> describe;
};

// Adds a check to this thread's pending list. A list past 256 entries is checked at once (a loop
// that never synchronizes still sees its errors, and memory stays bounded).
void defer_check(DeferredCheck check);

// Reads every pending check of this thread (its copies queued on their streams, each stream waited
// for once), clears the list, and throws the first failure's message; the others are dropped (they
// are usually consequences of the first). Called by stoke's synchronization points.
void check_deferred_errors();

// Checks registered on this thread and not yet read.
int64_t pending_deferred_checks();

// Removes and returns the checks registered on this thread after the first `mark` (a value of
// pending_deferred_checks()). A CUDA graph takes those its capture registered: no kernel has
// written their flags yet (the capture ran nothing), so reading them at the next synchronization
// would report whatever the memory held; the graph registers them again after each replay, whose
// kernels write them (cuda/runtime/graph.h).
std::vector<DeferredCheck> take_deferred_checks_since(int64_t mark);

}  // namespace stoke::cuda
