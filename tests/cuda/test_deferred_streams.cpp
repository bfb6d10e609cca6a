// cuda/emu's deferred-streams mode (cuda/emu/streams.cpp): work waits on its stream until
// something waits for it, so the ordering bugs a GPU shows as stale or torn data show up here too.
// First the emulator's own semantics (what is waited for and what is not), then stoke's runtime
// under it: read-backs after kernels on the current non-blocking stream.
#include <catch2/catch.hpp>

#include <vector>

#include "core/tensor.h"
#include "cuda/compat.h"
#include "cuda/runtime/stream.h"
#include "ops/creation.h"
#include "ops/elementwise.h"

namespace {

__global__ void fill_value(float* data, int n, float value) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) data[i] = value;
}

// Deferred streams for the scope of a test, whatever STOKE_EMU_STREAMS says.
struct Deferred {
  bool was = stoke::emu::set_deferred_streams(true);
  ~Deferred() { stoke::emu::set_deferred_streams(was); }
};

struct DeviceFloats {
  explicit DeviceFloats(int n) : n(n) {
    REQUIRE(cudaMalloc(reinterpret_cast<void**>(&p), n * sizeof(float)) == cudaSuccess);
    REQUIRE(cudaMemset(p, 0, n * sizeof(float)) == cudaSuccess);
  }
  ~DeviceFloats() { cudaFree(p); }
  std::vector<float> read(cudaStream_t s) const {
    std::vector<float> h(static_cast<size_t>(n));
    REQUIRE(cudaMemcpyAsync(h.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost, s) ==
            cudaSuccess);
    return h;
  }
  float* p = nullptr;
  int n;
};

}  // namespace

TEST_CASE("deferred streams: a synchronous cudaMemcpy does not wait for a non-blocking stream",
          "[cuda][emu][deferred]") {
  const Deferred deferred;
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  DeviceFloats d(100);
  STOKE_LAUNCH(fill_value, 1, 128, 0, s)(d.p, 100, 7.0f);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  CHECK(cudaStreamQuery(s) == cudaErrorNotReady);  // queued, not run
  std::vector<float> h(100, -1.0f);
  // The legacy stream's copy overtakes the kernel: what a GPU may show, shown every time here.
  REQUIRE(cudaMemcpy(h.data(), d.p, 100 * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(h[42] == 0.0f);
  // Ordered on the kernel's stream (to pageable memory: synchronous), the copy sees its result.
  CHECK(d.read(s)[42] == 7.0f);
  CHECK(cudaStreamQuery(s) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

TEST_CASE("deferred streams: the legacy stream waits for blocking streams, events order others",
          "[cuda][emu][deferred]") {
  const Deferred deferred;
  cudaStream_t blocking = nullptr, a = nullptr, b = nullptr;
  REQUIRE(cudaStreamCreate(&blocking) == cudaSuccess);
  REQUIRE(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking) == cudaSuccess);
  DeviceFloats x(64), y(64);
  // A blocking stream's kernel is waited for by a synchronous copy.
  STOKE_LAUNCH(fill_value, 1, 64, 0, blocking)(x.p, 64, 3.0f);
  std::vector<float> h(64);
  REQUIRE(cudaMemcpy(h.data(), x.p, 64 * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(h[0] == 3.0f);
  // Stream b copies what stream a computes: without an event the copy runs first ...
  STOKE_LAUNCH(fill_value, 1, 64, 0, a)(x.p, 64, 5.0f);
  REQUIRE(cudaMemcpyAsync(y.p, x.p, 64 * sizeof(float), cudaMemcpyDeviceToDevice, b) ==
          cudaSuccess);
  CHECK(y.read(b)[0] == 3.0f);
  // ... and with one it waits for the kernel.
  cudaEvent_t done = nullptr;
  REQUIRE(cudaEventCreate(&done) == cudaSuccess);
  STOKE_LAUNCH(fill_value, 1, 64, 0, a)(x.p, 64, 9.0f);
  REQUIRE(cudaEventRecord(done, a) == cudaSuccess);
  CHECK(cudaEventQuery(done) == cudaErrorNotReady);
  REQUIRE(cudaStreamWaitEvent(b, done, 0) == cudaSuccess);
  REQUIRE(cudaMemcpyAsync(y.p, x.p, 64 * sizeof(float), cudaMemcpyDeviceToDevice, b) ==
          cudaSuccess);
  CHECK(y.read(b)[63] == 9.0f);
  CHECK(cudaEventQuery(done) == cudaSuccess);
  REQUIRE(cudaEventDestroy(done) == cudaSuccess);
  for (cudaStream_t s : {blocking, a, b}) REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

TEST_CASE("deferred streams: pinned memory is read when the copy runs, pageable when issued",
          "[cuda][emu][deferred]") {
  const Deferred deferred;
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  DeviceFloats d(16);
  float* pinned = nullptr;
  REQUIRE(cudaMallocHost(reinterpret_cast<void**>(&pinned), 16 * sizeof(float)) == cudaSuccess);
  std::vector<float> pageable(16, 1.0f);
  for (int i = 0; i < 16; ++i) pinned[i] = 1.0f;
  REQUIRE(cudaMemcpyAsync(d.p, pinned, 16 * sizeof(float), cudaMemcpyHostToDevice, s) ==
          cudaSuccess);
  pinned[0] = 2.0f;  // refilled before the stream ran the copy: the device gets the new value
  CHECK(d.read(s)[0] == 2.0f);
  REQUIRE(cudaMemcpyAsync(d.p, pageable.data(), 16 * sizeof(float), cudaMemcpyHostToDevice, s) ==
          cudaSuccess);
  pageable[0] = 3.0f;  // staged when issued: the device keeps the old value
  CHECK(d.read(s)[0] == 1.0f);
  REQUIRE(cudaFreeHost(pinned) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

TEST_CASE("deferred streams: tensor read-backs wait for the current stream's kernels",
          "[cuda][emu][deferred]") {
  const Deferred deferred;
  // The current stream is created non-blocking: a read-back through cudaMemcpy on the legacy
  // stream would return the buffer before the add ran.
  stoke::cuda::Stream stream;
  const stoke::cuda::StreamGuard current(stream);
  const stoke::Device dev = stoke::Device::cuda(0);
  const stoke::Tensor x = stoke::full({1000}, 2.0, {.device = dev});
  const stoke::Tensor y = stoke::ops::add(x, 1.0);
  CHECK(cudaStreamQuery(stream.handle()) == cudaErrorNotReady);
  const std::vector<float> got = y.to(stoke::Device::cpu()).to_vector<float>();
  CHECK(got == std::vector<float>(1000, 3.0f));
  CHECK(y.narrow(0, 999, 1).item() == 3.0);
  CHECK(y.to(stoke::Device::cpu(), /*non_blocking=*/true).to_vector<float>()[999] == 3.0f);
}
