// Philox4x32-10 (Salmon et al., "Parallel Random Numbers: As Easy as 1, 2, 3", SC 2011), written
// once for all three users: the CPU generator (core/random.cpp), the CPU dropout kernel
// (ops/cpu/dropout.cpp, which evaluates 16 blocks side by side so that the compiler vectorizes
// them) and the CUDA dropout kernel (cuda/kernels/dropout.cu). CPU/GPU bit-equality of random
// fills and dropout masks rests on this one definition. __host__ __device__ under nvcc; a plain
// inline function for the host compiler (and cuda/emu).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define STOKE_PHILOX_INLINE __host__ __device__ __forceinline__
#else
#define STOKE_PHILOX_INLINE inline
#endif

namespace stoke {

// Ten rounds on the 128-bit counter (c0, c1, c2, c3) with the 64-bit key; the result replaces the
// counter. The 32x32->64 products compile to vpmuludq on x86 and mul.lo/mul.hi under nvcc.
STOKE_PHILOX_INLINE void philox4x32_10(uint32_t& c0, uint32_t& c1, uint32_t& c2, uint32_t& c3,
                                       uint64_t key) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;  // round multipliers
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;  // Weyl key increments
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
#if defined(__CUDACC__)
#pragma unroll
#else
#pragma GCC unroll 10
#endif
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kM0) * c0;
    const uint64_t p1 = static_cast<uint64_t>(kM1) * c2;
    c0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    c2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    c1 = static_cast<uint32_t>(p1);
    c3 = static_cast<uint32_t>(p0);
    k0 += kW0;
    k1 += kW1;
  }
}

}  // namespace stoke
