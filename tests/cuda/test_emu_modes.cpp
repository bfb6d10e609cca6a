// cuda/emu's two execution modes (emu::ExecutionMode): fiber mode gives the OS-thread mode's bits
// on kernels with barriers, shuffles and votes, at one and several workers; a kernel without
// them switches no stack; each CUDA thread keeps its own threadIdx across switches; blocks on
// different workers never share static or dynamic shared memory; a barrier that can never
// complete fails the launch instead of hanging; a thread's exception fails the launch in both
// modes and the next launch runs. Kernels run on plain host memory (an emu device pointer is a
// host pointer).
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/compat.h"

namespace emu = stoke::emu;

namespace {

// Sets the execution mode and fiber workers for a scope.
class ModeScope {
 public:
  ModeScope(emu::ExecutionMode mode, unsigned workers)
      : mode_(emu::set_execution_mode(mode)), workers_(emu::set_fiber_workers(workers)) {}
  ~ModeScope() {
    emu::set_execution_mode(mode_);
    emu::set_fiber_workers(workers_);
  }
  ModeScope(const ModeScope&) = delete;
  ModeScope& operator=(const ModeScope&) = delete;

 private:
  emu::ExecutionMode mode_;
  unsigned workers_;
};

constexpr unsigned kBlock = 256;

// Order-sensitive float work: a tree reduction through static shared memory (each level reads
// what other threads wrote before the barrier), a shuffle reduction per warp and a ballot, so a
// barrier or exchange that released too early or too late changes the bits.
__global__ void mixed_reduce(const float* in, float* tree, float* warp_sums, unsigned* ballots,
                             int* counts) {
  __shared__ float partial[kBlock];
  const unsigned t = threadIdx.x;
  const unsigned i = blockIdx.x * blockDim.x + t;
  float v = in[i];
  partial[t] = v * 1.0001f;
  __syncthreads();
  for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (t < stride) partial[t] = partial[t] * 0.999f + partial[t + stride];
    __syncthreads();
  }
  if (t == 0) tree[blockIdx.x] = partial[0];
  for (int offset = 16; offset > 0; offset /= 2) v = v * 1.5f + __shfl_down_sync(~0u, v, offset);
  if (t % 32 == 0) warp_sums[i / 32] = v;
  ballots[i] = __ballot_sync(~0u, in[i] > 0.0f);
  const int c = __syncthreads_count(in[i] > 0.5f);
  if (t == 0) counts[blockIdx.x] = c;
}

// A dynamic-shared-memory version of the tree, for blocks of any size up to 1024.
__global__ void dynamic_tree(const float* in, float* out) {
  STOKE_DYNAMIC_SHARED(float, buf);
  const unsigned t = threadIdx.x;
  buf[t] = in[blockIdx.x * blockDim.x + t];
  __syncthreads();
  for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (t < stride) buf[t] = buf[t] * 0.5f + buf[t + stride];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = buf[0];
}

struct MixedResult {
  std::vector<float> tree, warp_sums;
  std::vector<unsigned> ballots;
  std::vector<int> counts;
  std::vector<float> dynamic;
};

MixedResult run_mixed(const std::vector<float>& in, unsigned blocks, unsigned dyn_block) {
  MixedResult r{std::vector<float>(blocks), std::vector<float>(in.size() / 32),
                std::vector<unsigned>(in.size()), std::vector<int>(blocks),
                std::vector<float>(in.size() / dyn_block)};
  STOKE_LAUNCH(mixed_reduce, blocks, kBlock, 0, nullptr)
  (in.data(), r.tree.data(), r.warp_sums.data(), r.ballots.data(), r.counts.data());
  REQUIRE(cudaGetLastError() == cudaSuccess);
  const auto dyn_blocks = static_cast<unsigned>(in.size() / dyn_block);
  STOKE_LAUNCH(dynamic_tree, dyn_blocks, dyn_block, dyn_block * sizeof(float), nullptr)
  (in.data(), r.dynamic.data());
  REQUIRE(cudaGetLastError() == cudaSuccess);
  return r;
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

__global__ void scale(const float* in, float* out, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] = 3.0f * in[i];
}

__global__ void one_barrier(int* out) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  out[i] = 1;
  __syncthreads();
  out[i] += 1;
}

// Records threadIdx/blockIdx and the lane before and after each kind of switch point.
__global__ void identity_across_switches(unsigned* seen) {
  const unsigned i = (blockIdx.x * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
  unsigned* s = seen + 8 * i;
  s[0] = threadIdx.x + 1000 * threadIdx.y;
  __syncthreads();
  s[1] = threadIdx.x + 1000 * threadIdx.y;
  s[2] = static_cast<unsigned>(__shfl_xor_sync(~0u, static_cast<int>(threadIdx.x), 1));
  s[3] = threadIdx.x + 1000 * threadIdx.y;
  __syncwarp();
  s[4] = blockIdx.x;
  s[5] = __activemask();
  __syncthreads();
  s[6] = threadIdx.x + 1000 * threadIdx.y;
  s[7] = blockIdx.x;
}

// Every block fills the statics with its index, waits, and checks that no other block wrote them
// in between: blocks of a launch that run at once would.
__global__ void static_shared_owner(int* clashes) {
  __shared__ unsigned owner[kBlock];
  owner[threadIdx.x] = blockIdx.x;
  __syncthreads();
  for (int k = 0; k < 50; ++k) {
    __syncthreads();
    if (owner[(threadIdx.x + 7 * k) % kBlock] != blockIdx.x) atomicAdd(clashes, 1);
  }
}

// The same with dynamic shared memory, which is per block in both modes.
__global__ void dynamic_shared_owner(int* clashes) {
  STOKE_DYNAMIC_SHARED(unsigned, owner);
  owner[threadIdx.x] = blockIdx.x;
  for (int k = 0; k < 50; ++k) {
    __syncthreads();
    if (owner[(threadIdx.x + 7 * k) % blockDim.x] != blockIdx.x) atomicAdd(clashes, 1);
  }
}

// Threads below `split` wait at __syncthreads(), the others at a full-mask __syncwarp(): neither
// can complete (the barrier waits for the warp's other lanes, the warp waits for the lanes at the
// barrier). Undefined on a GPU; the OS-thread mode would hang.
__global__ void divergent_barrier(int* out, unsigned split) {
  if (threadIdx.x < split) {
    __syncthreads();
  } else {
    __syncwarp();
  }
  out[blockIdx.x * blockDim.x + threadIdx.x] = 1;
}

// Thread 5 of block 1 throws after a barrier, while the others wait at the next one.
__global__ void throws_after_barrier(int* out) {
  __syncthreads();
  if (blockIdx.x == 1 && threadIdx.x == 5) __trap();
  __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = 1;
}

}  // namespace

TEST_CASE("cuda emu modes: fibers give the OS-thread mode's bits at 1, 2 and 3 workers",
          "[cuda][emu][emu_modes]") {
  const unsigned blocks = 12;
  std::vector<float> in(blocks * kBlock);
  for (size_t i = 0; i < in.size(); ++i) {
    in[i] = static_cast<float>((i * 7919) % 1013) / 1013.0f - 0.25f;
  }
  const unsigned dyn_block = GENERATE(64u, 1024u);
  MixedResult want;
  {
    const ModeScope os(emu::ExecutionMode::kOsThreads, 1);
    want = run_mixed(in, blocks, dyn_block);
  }
  for (const unsigned workers : {1u, 2u, 3u}) {
    const ModeScope fibers(emu::ExecutionMode::kFibers, workers);
    for (int repeat = 0; repeat < 2; ++repeat) {  // the second run reuses the parked stacks
      INFO("workers " << workers << ", run " << repeat);
      const MixedResult got = run_mixed(in, blocks, dyn_block);
      CHECK(same_bits(got.tree, want.tree));
      CHECK(same_bits(got.warp_sums, want.warp_sums));
      CHECK(same_bits(got.ballots, want.ballots));
      CHECK(same_bits(got.counts, want.counts));
      CHECK(same_bits(got.dynamic, want.dynamic));
    }
  }
}

TEST_CASE("cuda emu modes: a kernel without barriers or warp operations switches no stack",
          "[cuda][emu][emu_modes]") {
  const ModeScope fibers(emu::ExecutionMode::kFibers, 2);
  const int n = 10000;
  std::vector<float> in(n, 2.0f), out(n, 0.0f);
  const std::uint64_t before = emu::stats().stack_switches;
  STOKE_LAUNCH(scale, (n + 255) / 256, 256, 0, nullptr)(in.data(), out.data(), n);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  CHECK(emu::stats().stack_switches == before);
  CHECK(out[n - 1] == 6.0f);
  // With one barrier, each thread but the last of a block leaves its stack once to wait and
  // once more when its stack runs out of threads: at most two switches per thread.
  const unsigned blocks = 4, threads = 128;
  std::vector<int> flags(blocks * threads, 0);
  STOKE_LAUNCH(one_barrier, blocks, threads, 0, nullptr)(flags.data());
  REQUIRE(cudaGetLastError() == cudaSuccess);
  const std::uint64_t switches = emu::stats().stack_switches - before;
  CHECK(switches > 0);
  CHECK(switches <= 2u * blocks * threads);
  for (const int f : flags) REQUIRE(f == 2);
}

TEST_CASE(
    "cuda emu modes: each CUDA thread keeps its threadIdx, blockIdx and lane across "
    "switches",
    "[cuda][emu][emu_modes]") {
  const emu::ExecutionMode mode =
      GENERATE(emu::ExecutionMode::kFibers, emu::ExecutionMode::kOsThreads);
  const ModeScope scope(mode, 3);
  const dim3 block(32, 3);  // 96 threads, three warps
  const unsigned blocks = 5, threads = block.x * block.y;
  std::vector<unsigned> seen(8 * blocks * threads, 0xdeadu);
  STOKE_LAUNCH(identity_across_switches, blocks, block, 0, nullptr)(seen.data());
  REQUIRE(cudaGetLastError() == cudaSuccess);
  for (unsigned b = 0; b < blocks; ++b) {
    for (unsigned t = 0; t < threads; ++t) {
      const unsigned* s = seen.data() + 8 * (b * threads + t);
      const unsigned want = t % 32 + 1000 * (t / 32);
      INFO("block " << b << " thread " << t);
      REQUIRE(s[0] == want);
      REQUIRE(s[1] == want);
      REQUIRE(s[2] == ((t % 32) ^ 1u));
      REQUIRE(s[3] == want);
      REQUIRE(s[4] == b);
      REQUIRE(s[5] == ~0u);
      REQUIRE(s[6] == want);
      REQUIRE(s[7] == b);
    }
  }
}

TEST_CASE(
    "cuda emu modes: blocks on several workers never share static or dynamic shared "
    "memory",
    "[cuda][emu][emu_modes]") {
  const unsigned workers = GENERATE(2u, 4u);
  const ModeScope fibers(emu::ExecutionMode::kFibers, workers);
  for (int launch = 0; launch < 3; ++launch) {  // the first launch learns that it uses statics
    INFO("workers " << workers << ", launch " << launch);
    int clashes = 0;
    STOKE_LAUNCH(static_shared_owner, 64, kBlock, 0, nullptr)(&clashes);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    CHECK(clashes == 0);
    clashes = 0;
    STOKE_LAUNCH(dynamic_shared_owner, 64, 128, 128 * sizeof(unsigned), nullptr)(&clashes);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    CHECK(clashes == 0);
  }
}

TEST_CASE("cuda emu modes: a barrier no thread can complete fails the launch (fibers)",
          "[cuda][emu][emu_modes]") {
  const ModeScope fibers(emu::ExecutionMode::kFibers, 2);
  const unsigned split = GENERATE(1u, 5u, 31u);
  std::vector<int> out(3 * 64, 0);
  STOKE_LAUNCH(divergent_barrier, 3, 64, 0, nullptr)(out.data(), split);
  CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
  const std::string detail = emu::last_failure_detail();
  INFO(detail);
  // Every block deadlocks the same way; which one is reported depends on the workers' timing.
  CHECK(detail.find("deadlock in block (") != std::string::npos);
  CHECK(detail.find(": " + std::to_string(split) + " thread(s) wait at __syncthreads() and " +
                    std::to_string(32 - split) + " at a warp shuffle") != std::string::npos);
  // The block's waiting threads were unwound and the emulator runs the next launch.
  std::vector<int> flags(2 * 64, 0);
  STOKE_LAUNCH(one_barrier, 2, 64, 0, nullptr)(flags.data());
  REQUIRE(cudaGetLastError() == cudaSuccess);
  for (const int f : flags) REQUIRE(f == 2);
}

TEST_CASE("cuda emu modes: a thread that throws between barriers fails the launch, naming it",
          "[cuda][emu][emu_modes]") {
  const emu::ExecutionMode mode =
      GENERATE(emu::ExecutionMode::kFibers, emu::ExecutionMode::kOsThreads);
  const ModeScope scope(mode, 2);
  std::vector<int> out(4 * 64, 0);
  STOKE_LAUNCH(throws_after_barrier, 4, 64, 0, nullptr)(out.data());
  CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
  CHECK(emu::last_failure_detail().find("kernel threw in block (1,0,0) thread (5,0,0): "
                                        "stoke::emu: __trap() called in a kernel") !=
        std::string::npos);
  // Block 0 ran to the end before the failure (it starts first on every worker count).
  for (int t = 0; t < 64; ++t) CHECK(out[t] == 1);
  std::vector<int> flags(2 * 64, 0);
  STOKE_LAUNCH(one_barrier, 2, 64, 0, nullptr)(flags.data());
  REQUIRE(cudaGetLastError() == cudaSuccess);
  for (const int f : flags) REQUIRE(f == 2);
}

TEST_CASE("cuda emu modes: set_execution_mode and set_fiber_workers", "[cuda][emu][emu_modes]") {
  const emu::ExecutionMode start = emu::execution_mode();
  CHECK(emu::set_execution_mode(emu::ExecutionMode::kOsThreads) == start);
  CHECK(emu::execution_mode() == emu::ExecutionMode::kOsThreads);
  CHECK(emu::set_execution_mode(start) == emu::ExecutionMode::kOsThreads);
  const unsigned workers = emu::set_fiber_workers(5);
  CHECK(emu::set_fiber_workers(workers) == 5u);
  CHECK_THROWS_WITH(emu::set_fiber_workers(0),
                    Catch::Contains("set_fiber_workers(0): expected 1 to 1024"));
  CHECK_THROWS_WITH(emu::set_fiber_workers(1025),
                    Catch::Contains("set_fiber_workers(1025): expected 1 to 1024"));
}
