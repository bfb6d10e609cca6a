// Planted bug for tests/cuda/planted/run.sh: a shared-memory kernel without the __syncthreads()
// between writing the tile and reading a neighbour's element. Built against cuda/emu with
// -fsanitize=thread, the race must be reported at the read's line (its PLANTED comment).
#include <cstdio>
#include <vector>

#include "cuda/compat.h"

namespace {

constexpr int kThreads = 64;

__global__ void planted_missing_syncthreads(const float* in, float* out) {
  __shared__ float tile[kThreads];
  const unsigned t = threadIdx.x;
  tile[t] = in[blockIdx.x * kThreads + t];
  // The __syncthreads() that belongs here is missing.
  out[blockIdx.x * kThreads + t] = tile[(t + 1) % kThreads];  // PLANTED: races with the write
}

}  // namespace

int main() {
  const int blocks = 4;
  std::vector<float> in(blocks * kThreads, 1.0f), out(blocks * kThreads, 0.0f);
  for (int repeat = 0; repeat < 8; ++repeat) {
    STOKE_LAUNCH(planted_missing_syncthreads, blocks, kThreads, 0, nullptr)(in.data(), out.data());
    STOKE_CUDA_CHECK(cudaGetLastError());
  }
  std::printf("missing_syncthreads ran (out[0] = %g)\n", static_cast<double>(out[0]));
  return 0;
}
