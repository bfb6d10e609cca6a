// cuda/emu's runtime API and failure reporting: allocation and copies, streams and events, the
// device-memory limit, launch-configuration errors, and kernels that throw.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cuda/compat.h"

namespace {

__global__ void add_one(float* data, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) data[i] += 1.0f;
}

// Thread 5 of block 1 throws while the others wait at a barrier.
__global__ void throws_at_barrier(int* reached) {
  if (blockIdx.x == 1 && threadIdx.x == 5) throw std::runtime_error("planted failure");
  __syncthreads();
  atomicAdd(reached, 1);
}

__global__ void uses_dynamic_shared(float* out) {
  STOKE_DYNAMIC_SHARED(float, buf);
  buf[threadIdx.x] = static_cast<float>(threadIdx.x);
  __syncthreads();
  out[threadIdx.x] = buf[blockDim.x - 1 - threadIdx.x];
}

__global__ void launches_a_kernel(int* status) {
  if (threadIdx.x != 0) return;
  float x = 0.0f;
  STOKE_LAUNCH(add_one, 1, 1, 0, nullptr)(&x, 1);
  *status = static_cast<int>(cudaGetLastError());
}

std::string check_message(cudaError_t e) {
  try {
    STOKE_CUDA_CHECK(e);
  } catch (const stoke::Error& err) {
    return err.what();
  }
  return "";
}

}  // namespace

TEST_CASE("cuda emu: cudaMalloc, cudaMemcpy, cudaMemset and a kernel round trip", "[cuda][emu]") {
  const int n = 1000;
  const auto before = stoke::emu::stats();
  float* d = nullptr;
  STOKE_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&d), n * sizeof(float)));
  REQUIRE(d != nullptr);
  CHECK(reinterpret_cast<std::uintptr_t>(d) % 256 == 0);
  CHECK(stoke::emu::stats().device_bytes_live == before.device_bytes_live + n * sizeof(float));
  CHECK(stoke::emu::stats().device_allocations == before.device_allocations + 1);
  std::vector<float> host(n);
  for (int i = 0; i < n; ++i) host[i] = 0.25f * i;
  STOKE_CUDA_CHECK(cudaMemcpy(d, host.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  STOKE_LAUNCH(add_one, (n + 127) / 128, 128, 0, nullptr)(d, n);
  STOKE_CUDA_CHECK(cudaGetLastError());
  CHECK(stoke::emu::stats().launches == before.launches + 1);
  std::vector<float> back(n, 0.0f);
  STOKE_CUDA_CHECK(cudaMemcpy(back.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) REQUIRE(back[i] == 0.25f * i + 1.0f);
  STOKE_CUDA_CHECK(cudaMemset(d + 10, 0, 5 * sizeof(float)));
  STOKE_CUDA_CHECK(cudaMemcpy(back.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
  CHECK(back[9] == 0.25f * 9 + 1.0f);
  CHECK(back[10] == 0.0f);
  CHECK(back[14] == 0.0f);
  CHECK(back[15] == 0.25f * 15 + 1.0f);
  STOKE_CUDA_CHECK(cudaFree(d));
  CHECK(stoke::emu::stats().device_bytes_live == before.device_bytes_live);
}

TEST_CASE("cuda emu: copies and frees that a GPU would refuse are errors", "[cuda][emu]") {
  float* d = nullptr;
  STOKE_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&d), 16 * sizeof(float)));
  std::vector<float> host(32);
  // Past the end of the device block, a host pointer as device, an unknown free.
  CHECK(cudaMemcpy(d + 8, host.data(), 9 * sizeof(float), cudaMemcpyHostToDevice) ==
        cudaErrorInvalidValue);
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);
  CHECK(cudaGetLastError() == cudaSuccess);  // reading the last error resets it
  CHECK(cudaMemcpy(host.data(), host.data() + 16, 4, cudaMemcpyDeviceToHost) ==
        cudaErrorInvalidValue);
  CHECK(cudaMemset(host.data(), 0, 4) == cudaErrorInvalidValue);
  CHECK(cudaFree(host.data()) == cudaErrorInvalidValue);
  CHECK(cudaPeekAtLastError() == cudaErrorInvalidValue);
  CHECK(cudaPeekAtLastError() == cudaErrorInvalidValue);  // peeking does not reset
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);
  STOKE_CUDA_CHECK(cudaMemcpy(d + 8, host.data(), 8 * sizeof(float), cudaMemcpyHostToDevice));
  STOKE_CUDA_CHECK(cudaMemcpy(d, d + 8, 8 * sizeof(float), cudaMemcpyDeviceToDevice));
  STOKE_CUDA_CHECK(cudaFree(d));
  CHECK(cudaFree(d) == cudaErrorInvalidValue);  // double free
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);
}

TEST_CASE("cuda emu: the device memory limit makes cudaMalloc fail", "[cuda][emu]") {
  const std::size_t live = stoke::emu::stats().device_bytes_live;
  const std::size_t old = stoke::emu::set_device_memory_limit(live + 1000);
  void* a = nullptr;
  void* b = nullptr;
  CHECK(cudaMalloc(&a, 600) == cudaSuccess);
  std::size_t free = 0, total = 0;
  CHECK(cudaMemGetInfo(&free, &total) == cudaSuccess);
  CHECK(total == live + 1000);
  CHECK(free == 400);
  CHECK(cudaMalloc(&b, 600) == cudaErrorMemoryAllocation);
  CHECK(b == nullptr);
  CHECK(cudaGetLastError() == cudaErrorMemoryAllocation);
  CHECK(cudaMalloc(&b, 400) == cudaSuccess);
  CHECK(cudaFree(a) == cudaSuccess);
  CHECK(cudaFree(b) == cudaSuccess);
  CHECK(stoke::emu::set_device_memory_limit(old) == live + 1000);
  const std::string message = check_message(cudaErrorMemoryAllocation);
  CHECK_THAT(message, Catch::Contains("stoke::cuda: ") &&
                          Catch::Contains("test_emu_runtime.cpp:") &&
                          Catch::Contains("out of memory (cudaErrorMemoryAllocation)"));
}

TEST_CASE("cuda emu: pinned host memory", "[cuda][emu]") {
  const auto before = stoke::emu::stats().host_bytes_live;
  void* p = nullptr;
  void* q = nullptr;
  STOKE_CUDA_CHECK(cudaMallocHost(&p, 100));
  STOKE_CUDA_CHECK(cudaHostAlloc(&q, 50, cudaHostAllocDefault));
  CHECK(stoke::emu::stats().host_bytes_live == before + 150);
  std::memset(p, 1, 100);
  STOKE_CUDA_CHECK(cudaFreeHost(p));
  STOKE_CUDA_CHECK(cudaFreeHost(q));
  CHECK(cudaFreeHost(p) == cudaErrorInvalidValue);
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);
  CHECK(stoke::emu::stats().host_bytes_live == before);
}

TEST_CASE("cuda emu: streams and events run work in order", "[cuda][emu]") {
  cudaStream_t s = nullptr;
  STOKE_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  unsigned flags = 0;
  STOKE_CUDA_CHECK(cudaStreamGetFlags(s, &flags));
  CHECK(flags == cudaStreamNonBlocking);
  cudaEvent_t start = nullptr, stop = nullptr, untimed = nullptr;
  STOKE_CUDA_CHECK(cudaEventCreate(&start));
  STOKE_CUDA_CHECK(cudaEventCreate(&stop));
  STOKE_CUDA_CHECK(cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming));
  float ms = -1.0f;
  CHECK(cudaEventElapsedTime(&ms, start, stop) == cudaErrorInvalidResourceHandle);  // unrecorded
  CHECK(cudaGetLastError() == cudaErrorInvalidResourceHandle);

  const int n = 300;
  float* d = nullptr;
  STOKE_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&d), n * sizeof(float), s));
  std::vector<float> host(n, 2.0f), back(n, 0.0f);
  STOKE_CUDA_CHECK(cudaEventRecord(start, s));
  STOKE_CUDA_CHECK(cudaMemcpyAsync(d, host.data(), n * sizeof(float), cudaMemcpyHostToDevice, s));
  STOKE_LAUNCH(add_one, 3, 128, 0, s)(d, n);
  STOKE_CUDA_CHECK(cudaGetLastError());
  STOKE_CUDA_CHECK(cudaMemsetAsync(d, 0, sizeof(float), s));
  STOKE_CUDA_CHECK(cudaMemcpyAsync(back.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost, s));
  STOKE_CUDA_CHECK(cudaEventRecord(stop, s));
  STOKE_CUDA_CHECK(cudaEventRecord(untimed, s));
  STOKE_CUDA_CHECK(cudaStreamWaitEvent(nullptr, stop, 0));
  STOKE_CUDA_CHECK(cudaEventSynchronize(stop));
  CHECK(cudaEventQuery(stop) == cudaSuccess);
  CHECK(cudaStreamQuery(s) == cudaSuccess);
  STOKE_CUDA_CHECK(cudaStreamSynchronize(s));
  CHECK(back[0] == 0.0f);
  CHECK(back[1] == 3.0f);
  CHECK(back[n - 1] == 3.0f);
  STOKE_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  CHECK(ms >= 0.0f);
  CHECK(cudaEventElapsedTime(&ms, start, untimed) == cudaErrorInvalidResourceHandle);
  CHECK(cudaGetLastError() == cudaErrorInvalidResourceHandle);

  int calls = 0;
  STOKE_CUDA_CHECK(cudaLaunchHostFunc(
      s, [](void* p) { ++*static_cast<int*>(p); }, &calls));
  CHECK(calls == 1);
  STOKE_CUDA_CHECK(cudaFreeAsync(d, s));
  STOKE_CUDA_CHECK(cudaEventDestroy(start));
  STOKE_CUDA_CHECK(cudaEventDestroy(stop));
  STOKE_CUDA_CHECK(cudaEventDestroy(untimed));
  STOKE_CUDA_CHECK(cudaStreamDestroy(s));
  // A destroyed stream is no longer a stream.
  CHECK(cudaStreamSynchronize(s) == cudaErrorInvalidResourceHandle);
  STOKE_LAUNCH(add_one, 1, 1, 0, s)(&ms, 1);
  CHECK(cudaGetLastError() == cudaErrorInvalidResourceHandle);
}

TEST_CASE("cuda emu: two devices with plausible properties", "[cuda][emu]") {
  int count = 0, device = -1;
  STOKE_CUDA_CHECK(cudaGetDeviceCount(&count));
  CHECK(count == 2);
  STOKE_CUDA_CHECK(cudaSetDevice(1));
  STOKE_CUDA_CHECK(cudaGetDevice(&device));
  CHECK(device == 1);
  // Memory records the device that was current when it was allocated.
  void* p1 = nullptr;
  STOKE_CUDA_CHECK(cudaMalloc(&p1, 64));
  CHECK(stoke::emu::device_of(p1) == 1);
  CHECK(stoke::emu::device_of(static_cast<char*>(p1) + 63) == 1);
  CHECK(stoke::emu::device_of(static_cast<char*>(p1) + 64) == -1);  // past the block
  STOKE_CUDA_CHECK(cudaFree(p1));
  CHECK(stoke::emu::device_of(p1) == -1);
  STOKE_CUDA_CHECK(cudaSetDevice(0));
  STOKE_CUDA_CHECK(cudaGetDevice(&device));
  CHECK(device == 0);
  CHECK(cudaSetDevice(2) == cudaErrorInvalidDevice);
  CHECK(cudaGetLastError() == cudaErrorInvalidDevice);
  CHECK(cudaSetDevice(-1) == cudaErrorInvalidDevice);
  CHECK(cudaGetLastError() == cudaErrorInvalidDevice);
  cudaDeviceProp p;
  STOKE_CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
  CHECK(std::string(p.name) == "stoke emu");
  CHECK(p.major == 8);
  CHECK(p.warpSize == 32);
  CHECK(p.maxThreadsPerBlock == 1024);
  CHECK(p.multiProcessorCount > 0);
  CHECK(p.sharedMemPerBlock == 48 * 1024);
  CHECK(p.totalGlobalMem == stoke::emu::kDefaultDeviceMemory);
  int sms = 0;
  STOKE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CHECK(sms == p.multiProcessorCount);
  STOKE_CUDA_CHECK(cudaDeviceSynchronize());
}

TEST_CASE("cuda emu: bad launch configurations are cudaGetLastError errors", "[cuda][emu]") {
  float x = 0.0f;
  const auto launches = stoke::emu::stats().launches;
  STOKE_LAUNCH(add_one, 1, 1025, 0, nullptr)(&x, 1);
  CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
  STOKE_LAUNCH(add_one, 0, 32, 0, nullptr)(&x, 1);
  CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
  STOKE_LAUNCH(add_one, 1, dim3(1, 1, 65), 0, nullptr)(&x, 1);
  CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
  STOKE_LAUNCH(add_one, dim3(1, 65536), 1, 0, nullptr)(&x, 1);
  CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
  CHECK(stoke::emu::stats().launches == launches);  // none ran
  CHECK(x == 0.0f);
  STOKE_LAUNCH(add_one, 1, 1025, 0, nullptr)(&x, 1);
  CHECK_THAT(check_message(cudaGetLastError()), Catch::Contains("cudaErrorInvalidConfiguration") &&
                                                    Catch::Contains("block (1025,1,1)"));
}

TEST_CASE("cuda emu: dynamic shared memory beyond 48 KiB needs the opt-in", "[cuda][emu]") {
  std::vector<float> out(64);
  const std::size_t big = 64 * 1024;
  STOKE_LAUNCH(uses_dynamic_shared, 1, 64, big, nullptr)(out.data());
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);
  STOKE_CUDA_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(&uses_dynamic_shared),
                                        cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(big)));
  STOKE_LAUNCH(uses_dynamic_shared, 1, 64, big, nullptr)(out.data());
  STOKE_CUDA_CHECK(cudaGetLastError());
  CHECK(out[0] == 63.0f);
  CHECK(out[63] == 0.0f);
}

TEST_CASE("cuda emu: a kernel that throws fails the launch instead of hanging", "[cuda][emu]") {
  int reached = 0;
  STOKE_LAUNCH(throws_at_barrier, 3, 64, 0, nullptr)(&reached);
  const cudaError_t e = cudaGetLastError();
  CHECK(e == cudaErrorLaunchFailure);
  // Block 1's other 63 threads passed the barrier (it did not hang). Blocks 0 and 2 each ran whole
  // or not at all: with several fiber workers (the default) they run beside block 1, and whether
  // block 2 started before the failure was seen is a race, as on a GPU (it ran here under ASan).
  CHECK(reached % 64 == 63);
  CHECK(reached <= 3 * 64 - 1);
  CHECK_THAT(check_message(e), Catch::Contains("unspecified launch failure") &&
                                   Catch::Contains("block (1,0,0) thread (5,0,0)") &&
                                   Catch::Contains("planted failure"));
  // The pool is usable afterwards.
  float x = 1.0f;
  STOKE_LAUNCH(add_one, 1, 64, 0, nullptr)(&x, 1);
  STOKE_CUDA_CHECK(cudaGetLastError());
  CHECK(x == 2.0f);
}

TEST_CASE("cuda emu: launching from a kernel is refused", "[cuda][emu]") {
  int status = -1;
  STOKE_LAUNCH(launches_a_kernel, 1, 2, 0, nullptr)(&status);
  STOKE_CUDA_CHECK(cudaGetLastError());
  CHECK(status == static_cast<int>(cudaErrorNotSupported));
}

TEST_CASE("cuda emu: device intrinsics outside a kernel are errors", "[cuda][emu]") {
  CHECK_THROWS_WITH(__syncthreads(),
                    Catch::Contains("stoke::emu: __syncthreads() called outside a kernel"));
  CHECK_THROWS_WITH(__shfl_sync(0xffffffffu, 1, 0), Catch::Contains("outside a kernel"));
  CHECK_FALSE(stoke::emu::in_kernel());
}

namespace {
// Runs `body` in a forked child with stderr captured; returns (exited normally with 0, stderr).
std::pair<bool, std::string> run_in_child(void (*body)(void*), void* arg) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    dup2(fds[1], STDERR_FILENO);
    const int null = open("/dev/null", O_WRONLY);
    dup2(null, STDOUT_FILENO);  // the test framework's own crash report
    body(arg);
    _exit(0);
  }
  close(fds[1]);
  std::string err;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) err.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return {WIFEXITED(status) && WEXITSTATUS(status) == 0, err};
}

void host_reads(void* p) {
  volatile float v = *static_cast<volatile float*>(p);
  (void)v;
}
void host_writes(void* p) {
  *static_cast<volatile float*>(p) = 1.0f;
}
}  // namespace

TEST_CASE("cuda emu: host code touching cudaMalloc'd memory faults as on a GPU", "[cuda][emu]") {
  const bool guard_was = stoke::emu::set_device_memory_guard(true);  // whatever the environment
  float* d = nullptr;
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&d), 64 * sizeof(float)) == cudaSuccess);
  // What is allowed: copies, memsets, kernels, and an explicit DeviceAccess scope.
  std::vector<float> h(64, 2.0f);
  REQUIRE(cudaMemcpy(d, h.data(), 64 * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
  STOKE_LAUNCH(add_one, 1, 64, 0, nullptr)(d, 64);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  REQUIRE(cudaMemcpy(h.data(), d, 64 * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(h[63] == 3.0f);
  {
    const stoke::emu::DeviceAccess open;
    CHECK(d[0] == 3.0f);
  }
  // What is not: a plain host read or write, each in a child process that must die with the
  // emulator's message.
  for (auto body : {host_reads, host_writes}) {
    const auto [ok, err] = run_in_child(body, d + 5);
    CHECK_FALSE(ok);
    CHECK_THAT(err, Catch::Contains("host code read or wrote device memory"));
  }
  // Pinned host memory stays host memory.
  float* pinned = nullptr;
  REQUIRE(cudaMallocHost(reinterpret_cast<void**>(&pinned), 16) == cudaSuccess);
  pinned[0] = 4.0f;
  CHECK(pinned[0] == 4.0f);
  CHECK(cudaFreeHost(pinned) == cudaSuccess);
  // With the guard off (STOKE_EMU_DEVICE_GUARD=0) host access works, as in a plain emulator.
  CHECK(stoke::emu::set_device_memory_guard(false));
  CHECK(d[0] == 3.0f);
  stoke::emu::set_device_memory_guard(guard_was);
  CHECK(cudaFree(d) == cudaSuccess);
}
