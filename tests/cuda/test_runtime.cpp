// The CUDA runtime (device discovery, caching allocator, pinned memory, streams, events, copies)
// run against cuda/emu, which emulates two devices with a settable memory limit.
#include <catch2/catch.hpp>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/tensor.h"
#include "cuda/emu/emu.h"
#include "cuda/runtime/caching_allocator.h"
#include "cuda/runtime/copy.h"
#include "cuda/runtime/device.h"
#include "cuda/runtime/pinned.h"
#include "cuda/runtime/stream.h"
#include "ops/creation.h"

using namespace stoke;
using namespace stoke::cuda;

namespace {

constexpr size_t kMiB = size_t{1} << 20;

// Restores emu's device memory limit when a test ends, whatever happens.
// The emulated devices get `bytes` more than the device memory live now: earlier tests of the same
// process (their tensors, the process-wide caching allocator's segments) keep some, and a fixed
// limit made this file's results depend on which tests ran before it.
size_t live_device_bytes() {
  size_t free_bytes = 0, total = 0;
  REQUIRE(cudaMemGetInfo(&free_bytes, &total) == cudaSuccess);
  return total - free_bytes;
}

struct MemoryLimit {
  size_t previous;
  explicit MemoryLimit(size_t bytes)
      : previous(emu::set_device_memory_limit(live_device_bytes() + bytes)) {}
  ~MemoryLimit() { emu::set_device_memory_limit(previous); }
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("runtime: emu reports two devices with properties", "[cuda][runtime]") {
  REQUIRE(device_count() == emu::kDeviceCount);
  REQUIRE(device_count() == 2);
  REQUIRE(is_available());
  REQUIRE(device_unavailable_reason().empty());
  REQUIRE(best_available_device() == Device::cuda(0));
  const DeviceProperties& p = device_properties(0);
  REQUIRE_FALSE(p.name.empty());
  REQUIRE(p.sm_count > 0);
  REQUIRE(p.total_memory > 0);
  REQUIRE(p.warp_size == 32);
  REQUIRE(&device_properties(0) == &p);  // cached
  REQUIRE_THAT(
      error_of([] { device_properties(3); }),
      Catch::Contains("cuda::device_properties: expected a device index in [0, 2), got 3"));
  REQUIRE_THAT(error_of([] { set_device(-1); }), Catch::Contains("got -1"));
  DeviceGuard guard(0);
  REQUIRE(current_device() == 0);
  {
    DeviceGuard on_second(1);
    REQUIRE(current_device() == 1);
  }
  REQUIRE(current_device() == 0);
}

TEST_CASE("runtime: a tensor on cuda:1 gets device 1's memory whichever device is current",
          "[cuda][runtime]") {
  register_cuda_allocator();
  set_device(0);
  const Tensor t = empty({1000}, {.device = Device::cuda(1)});
  CHECK(emu::device_of(t.data_ptr()) == 1);
  CHECK(current_device() == 0);  // allocating did not switch the current device
  const Tensor u = empty({1000}, {.device = Device::cuda(0)});
  CHECK(emu::device_of(u.data_ptr()) == 0);
  CHECK_THROWS_WITH(
      empty({4}, {.device = Device::cuda(2)}),
      Catch::Contains("cuda:2") && Catch::Contains("expected a device index in [0, 2)"));
}

TEST_CASE("runtime: allocation sizes round to 512 B and segments follow the pools",
          "[cuda][runtime]") {
  REQUIRE(round_allocation_size(1) == 512);
  REQUIRE(round_allocation_size(512) == 512);
  REQUIRE(round_allocation_size(513) == 1024);
  REQUIRE(segment_size_for(512) == 2 * kMiB);
  REQUIRE(segment_size_for(kMiB) == 2 * kMiB);         // the small pool's largest request
  REQUIRE(segment_size_for(kMiB + 512) == 20 * kMiB);  // large, below 10 MiB
  REQUIRE(segment_size_for(10 * kMiB) == 10 * kMiB);   // at least 10 MiB: rounded to 2 MiB
  REQUIRE(segment_size_for(11 * kMiB) == 12 * kMiB);
  REQUIRE(format_bytes(512) == "512 B");
  REQUIRE(format_bytes(3 * kMiB / 2) == "1.50 MiB");
}

TEST_CASE("runtime: caching allocator reuses, splits and merges blocks", "[cuda][runtime]") {
  CachingAllocator a;
  void* p = a.allocate(1000, 0, nullptr);
  REQUIRE(p != nullptr);
  REQUIRE(reinterpret_cast<uintptr_t>(p) % 256 == 0);  // cudaMalloc's guarantee, kept by splits
  auto s = a.device_stats(0);
  REQUIRE(s.allocated_bytes == 1024);
  REQUIRE(s.reserved_bytes == 2 * kMiB);
  REQUIRE(s.cuda_malloc_calls == 1);
  REQUIRE(s.live_blocks == 1);

  // A second small block is carved out of the same segment, right after the first.
  void* q = a.allocate(3000, 0, nullptr);
  REQUIRE(static_cast<char*>(q) == static_cast<char*>(p) + 1024);
  REQUIRE(a.device_stats(0).cuda_malloc_calls == 1);

  // Freed blocks are reused without cudaMalloc, and neighbours merge back into one segment.
  a.free(p);
  REQUIRE(a.allocate(700, 0, nullptr) == p);
  a.free(p);
  a.free(q);
  s = a.device_stats(0);
  REQUIRE(s.allocated_bytes == 0);
  REQUIRE(s.peak_allocated_bytes == 1024 + 3072);
  void* whole = a.allocate(kMiB, 0, nullptr);  // needs the merged segment's first MiB
  REQUIRE(whole == p);
  REQUIRE(a.device_stats(0).cuda_malloc_calls == 1);
  a.free(whole);

  // Large requests: a 20 MiB segment below 10 MiB, split for a second large request.
  void* l1 = a.allocate(3 * kMiB, 0, nullptr);
  void* l2 = a.allocate(5 * kMiB, 0, nullptr);
  REQUIRE(static_cast<char*>(l2) == static_cast<char*>(l1) + 3 * kMiB);
  s = a.device_stats(0);
  REQUIRE(s.reserved_bytes == 22 * kMiB);
  REQUIRE(s.cuda_malloc_calls == 2);
  a.free(l1);
  a.free(l2);

  // empty_cache returns both (wholly free) segments.
  a.empty_cache();
  s = a.device_stats(0);
  REQUIRE(s.reserved_bytes == 0);
  REQUIRE(s.cuda_free_calls == 2);
  REQUIRE(a.allocate(0, 0, nullptr) == nullptr);
  a.free(nullptr);
  int local = 0;
  REQUIRE_THAT(error_of([&] { a.free(&local); }),
               Catch::Contains("was not allocated by the caching allocator"));
}

TEST_CASE("runtime: blocks are cached per stream and cross-stream uses are respected",
          "[cuda][runtime]") {
  CachingAllocator a;
  Stream s1, s2;
  void* p = a.allocate(4096, 0, s1.handle());
  a.free(p);
  // A block freed on s1 is not handed to s2: that stream's work could still be running on it.
  void* q = a.allocate(4096, 0, s2.handle());
  REQUIRE(q != p);
  REQUIRE(a.device_stats(0).cuda_malloc_calls == 2);
  // Used on s2 as well: reusable only after an event recorded on s2 at free time completes
  // (once s2 has run its work: at once in emu's default mode, after the synchronize when
  // streams are deferred).
  void* r = a.allocate(4096, 0, s1.handle());
  REQUIRE(r == p);
  a.record_stream(r, s2.handle());
  a.free(r);
  s2.synchronize();
  REQUIRE(a.allocate(4096, 0, s1.handle()) == p);
  a.free(p);
  a.free(q);
  a.empty_cache();
  REQUIRE(a.device_stats(0).reserved_bytes == 0);
}

TEST_CASE("runtime: out of memory frees the cache, retries, then reports the stats",
          "[cuda][runtime]") {
  CachingAllocator a;
  MemoryLimit limit(30 * kMiB);
  // A 20 MiB segment cached for another stream blocks a 12 MiB one until the retry frees it.
  Stream other;
  a.free(a.allocate(3 * kMiB, 0, other.handle()));
  REQUIRE(a.device_stats(0).reserved_bytes == 20 * kMiB);
  void* big = a.allocate(12 * kMiB, 0, nullptr);
  auto s = a.device_stats(0);
  REQUIRE(s.alloc_retries == 1);
  REQUIRE(s.reserved_bytes == 12 * kMiB);
  REQUIRE(s.cuda_free_calls == 1);

  const std::string msg = error_of([&] { a.allocate(100 * kMiB, 0, nullptr); });
  REQUIRE_THAT(msg, Catch::Contains("stoke::cuda::caching_allocator: out of memory"));
  REQUIRE_THAT(msg, Catch::Contains("cannot allocate 100.00 MiB (104857600 bytes) on cuda:0"));
  REQUIRE_THAT(msg, Catch::Contains("after freeing the cache and retrying"));
  REQUIRE_THAT(msg, Catch::Contains("allocated 12.00 MiB (peak 12.00 MiB) in 1 blocks"));
  REQUIRE_THAT(msg, Catch::Contains("reserved 12.00 MiB (peak 20.00 MiB)"));
  REQUIRE_THAT(msg, Catch::Contains("cudaMalloc calls 2, cudaFree calls 1"));
  REQUIRE(a.device_stats(0).ooms == 1);
  // The failed cudaMalloc leaves no error behind for the next launcher's check.
  REQUIRE(cudaGetLastError() == cudaSuccess);
  a.free(big);
  a.empty_cache();
}

TEST_CASE("runtime: registered allocator backs cuda tensors", "[cuda][runtime]") {
  register_cuda_allocator();
  REQUIRE(&allocator_for(Device::cuda(0)) == &caching_allocator());
  const size_t before = caching_allocator().stats().allocated_bytes;
  {
    Tensor t = empty({10, 10}, {.device = Device::cuda(0)});
    REQUIRE(t.device() == Device::cuda(0));
    REQUIRE(caching_allocator().stats().allocated_bytes == before + 512);
  }
  REQUIRE(caching_allocator().stats().allocated_bytes == before);
  REQUIRE_THAT(caching_allocator().summary(0), Catch::Contains("reserved"));
}

TEST_CASE("runtime: streams and events", "[cuda][runtime]") {
  Stream s;
  REQUIRE(s.handle() != nullptr);
  REQUIRE(s.device() == 0);
  REQUIRE(current_stream() == nullptr);  // the legacy default stream until set
  {
    StreamGuard guard(s);
    REQUIRE(current_stream() == s.handle());
    REQUIRE(current_stream(0) == s.handle());
  }
  REQUIRE(current_stream() == nullptr);

  Event start, end;
  start.record(s.handle());
  std::vector<float> host(1024, 1.0f), back(1024, 0.0f);
  void* dev = caching_allocator().allocate(host.size() * sizeof(float), 0, s.handle());
  copy_bytes_async(dev, host.data(), host.size() * sizeof(float), CopyKind::host_to_device,
                   s.handle());
  copy_bytes_async(back.data(), dev, host.size() * sizeof(float), CopyKind::device_to_host,
                   s.handle());
  end.record(s.handle());
  s.wait(end);
  end.synchronize();
  REQUIRE(end.query());
  REQUIRE(s.query());
  s.synchronize();
  REQUIRE(start.elapsed_ms(end) >= 0.0f);
  REQUIRE(back == host);
  caching_allocator().free(dev);

  Stream moved = std::move(s);
  REQUIRE(moved.handle() != nullptr);
  REQUIRE(s.handle() == nullptr);
  Event untimed(EventOptions{.timing = false});
  untimed.record();
  untimed.synchronize();  // done at once in emu's default mode; waited for when deferred
  REQUIRE(untimed.query());
}

TEST_CASE("runtime: tensor copies between cpu and device", "[cuda][runtime]") {
  register_cuda_allocator();
  Tensor x = randn({7, 13});
  for (bool non_blocking : {false, true}) {
    Tensor d = to_device(x, Device::cuda(0), non_blocking);
    REQUIRE(d.device() == Device::cuda(0));
    REQUIRE(d.shape() == x.shape());
    // Device to device, then back to the host.
    Tensor d2 = empty(x.shape(), {.device = Device::cuda(0)});
    copy_tensor(d2, d, non_blocking);
    Tensor back = to_device(d2, Device::cpu(), non_blocking);
    if (non_blocking) STOKE_CUDA_CHECK(cudaDeviceSynchronize());
    REQUIRE(back.device().is_cpu());
    REQUIRE(back.to_vector<float>() == x.to_vector<float>());
  }
  // A strided host source is made contiguous first; f16 bytes travel unchanged.
  Tensor xt = x.t();
  REQUIRE(to_device(xt, Device::cuda(0)).shape() == Shape{13, 7});
  REQUIRE(to_device(to_device(xt, Device::cuda(0)), Device::cpu()).to_vector<float>() ==
          xt.contiguous().to_vector<float>());
  Tensor h = x.to(DType::f16);
  REQUIRE(to_device(to_device(h, Device::cuda(0)), Device::cpu()).to_vector<float>() ==
          h.to_vector<float>());
  // Same device and contiguous: the tensor itself.
  REQUIRE(to_device(x, Device::cpu()).is_same(x));

  Tensor d = to_device(x, Device::cuda(0));
  REQUIRE_THAT(error_of([&] {
                 copy_tensor(empty({7, 13}, {.dtype = DType::f16}), d);
               }),
               Catch::Contains("cuda::copy_tensor: dtypes differ: destination f16, source f32"));
  REQUIRE_THAT(error_of([&] {
                 copy_tensor(empty({13, 7}), d);
               }),
               Catch::Contains("shapes differ: destination [13, 7], source [7, 13]"));
  REQUIRE_THAT(error_of([&] { to_device(d.t(), Device::cpu()); }),
               Catch::Contains("cuda::to_device: expected a contiguous tensor on cuda:0"));
}

TEST_CASE("runtime: frees never throw, and a stream use that cannot be tracked keeps the block",
          "[cuda][runtime]") {
  // The stream a block was used on is destroyed before the block is freed: the event that would
  // tell when the use is over cannot be recorded. Frees run in Storage's destructor, so they report
  // and continue (a throw there is std::terminate), and the block is never handed out again.
  CachingAllocator a;
  void* p = a.allocate(4096, 0, nullptr);
  {
    Stream gone;
    a.record_stream(p, gone.handle());
  }
  REQUIRE_NOTHROW(a.deallocate(p, 4096));
  CHECK(cudaGetLastError() == cudaSuccess);  // the failed record does not leak into later checks
  void* q = a.allocate(4096, 0, nullptr);
  CHECK(q != p);
  a.free(q);
  REQUIRE_NOTHROW(a.deallocate(reinterpret_cast<void*>(0x1000), 8));  // not its pointer: reported

  // The untracked block and the cached ones go back to the device when the allocator does.
  size_t free_before = 0, free_during = 0, free_after = 0, total = 0;
  REQUIRE(cudaMemGetInfo(&free_before, &total) == cudaSuccess);
  {
    CachingAllocator local;
    void* u = local.allocate(4096, 0, nullptr);
    {
      Stream gone;
      local.record_stream(u, gone.handle());
    }
    local.deallocate(u, 4096);
    void* big = local.allocate(size_t{12} << 20, 0, nullptr);  // a segment of its own
    local.free(big);
    REQUIRE(cudaMemGetInfo(&free_during, &total) == cudaSuccess);
    CHECK(free_during < free_before);
  }
  REQUIRE(cudaMemGetInfo(&free_after, &total) == cudaSuccess);
  CHECK(free_after == free_before);

  PinnedAllocator pinned;
  void* h = pinned.allocate(100);
  {
    Stream gone;
    pinned.record_stream(h, gone.handle());
  }
  REQUIRE_NOTHROW(pinned.deallocate(h, 100));
  void* h2 = pinned.allocate(100);
  CHECK(h2 != h);
  pinned.free(h2);
}

TEST_CASE("runtime: pinned host allocator caches power-of-two blocks", "[cuda][runtime]") {
  PinnedAllocator a;
  void* p = a.allocate(5000);
  REQUIRE(p != nullptr);
  REQUIRE(a.is_pinned(p));
  auto s = a.pinned_stats();
  REQUIRE(s.allocated_bytes == 8192);
  REQUIRE(s.host_alloc_calls == 1);
  std::memset(p, 1, 5000);
  Stream stream;
  a.record_stream(p, stream.handle());
  a.free(p);
  REQUIRE_FALSE(a.is_pinned(p));  // no longer live
  // Same power of two: the cached block comes back once the stream's use has completed.
  stream.synchronize();
  void* q = a.allocate(6000);
  REQUIRE(q == p);
  REQUIRE(a.pinned_stats().host_alloc_calls == 1);
  void* r = a.allocate(9000);  // the next power of two: a new block
  REQUIRE(r != q);
  REQUIRE(a.pinned_stats().allocated_bytes == 8192 + 16384);
  a.free(q);
  a.free(r);
  a.empty_cache();
  s = a.pinned_stats();
  REQUIRE(s.reserved_bytes == 0);
  REQUIRE(s.host_free_calls == 2);
  REQUIRE(a.allocate(0) == nullptr);
  int local = 0;
  REQUIRE_THAT(error_of([&] { a.free(&local); }),
               Catch::Contains("was not allocated by the pinned allocator"));
}
