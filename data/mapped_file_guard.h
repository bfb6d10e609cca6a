// A file read through mmap that shrinks while mapped (another process truncates or rewrites a
// packed shard under a running job) makes the next read of a page past its new end raise SIGBUS,
// which kills the process without a word. Registered mappings get a SIGBUS handler that, when the
// faulting address lies in one of them, writes which file changed and exits with status 1; faults
// anywhere else go to the handler that was installed before (or the default action).
//
// A signal handler cannot throw, so the job ends: its data changed under it, and nothing read
// from the mapping after the change could be trusted anyway.
#pragma once

#include <cstddef>
#include <string>

namespace stoke::data {

// Guards [begin, begin + bytes) of a mapping of `path` while the object lives. Cheap: a slot in a
// fixed table (4096 mappings at once; past that a mapping is simply unguarded).
class MappedFileGuard {
 public:
  MappedFileGuard() = default;
  MappedFileGuard(const void* begin, size_t bytes, const std::string& path);
  ~MappedFileGuard();
  MappedFileGuard(MappedFileGuard&& other) noexcept;
  MappedFileGuard& operator=(MappedFileGuard&& other) noexcept;
  MappedFileGuard(const MappedFileGuard&) = delete;
  MappedFileGuard& operator=(const MappedFileGuard&) = delete;

  bool active() const { return slot_ >= 0; }

 private:
  void release();
  int slot_ = -1;
};

}  // namespace stoke::data
