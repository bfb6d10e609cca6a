// Planted bug for tests/cuda/planted/run.sh: a kernel that reads one element past the end of a
// cudaMalloc'd buffer. emu's cudaMalloc poisons the bytes past each block
// (cuda/emu/device_memory.cpp), so under -fsanitize=address the overflow must be reported at the
// read's line (its PLANTED comment).
#include <cstdio>
#include <vector>

#include "cuda/compat.h"

namespace {

__global__ void planted_out_of_bounds(const float* in, float* out, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] = in[i + 1];  // PLANTED: in[n] is one past the end
}

}  // namespace

int main() {
  const int n = 100;
  float* in = nullptr;
  float* out = nullptr;
  STOKE_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&in), n * sizeof(float)));
  STOKE_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&out), n * sizeof(float)));
  std::vector<float> host(n, 1.0f);
  STOKE_CUDA_CHECK(cudaMemcpy(in, host.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  STOKE_LAUNCH(planted_out_of_bounds, (n + 31) / 32, 32, 0, nullptr)(in, out, n);
  STOKE_CUDA_CHECK(cudaGetLastError());
  STOKE_CUDA_CHECK(cudaMemcpy(host.data(), out, n * sizeof(float), cudaMemcpyDeviceToHost));
  STOKE_CUDA_CHECK(cudaFree(in));
  STOKE_CUDA_CHECK(cudaFree(out));
  std::printf("out_of_bounds ran (out[0] = %g)\n", static_cast<double>(host[0]));
  return 0;
}
