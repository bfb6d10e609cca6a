// CUDA dropout with counter-based Philox4x32-10. Element i of the tensor uses output i % 4 of the
// Philox block (offset + i / 4) under key seed, exactly as ops::dropout_with_mask on the CPU
// (ops/cpu/dropout.cpp, core/random.h): the mask is a function of (seed, offset, i) only, never of
// the launch shape, and equals the CPU mask bit for bit for the same generator state.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "cuda/compat.h"

namespace stoke::cuda {

// Knobs of the dropout launchers; the defaults are what the glue uses.
struct DropoutLaunch {
  int block_threads = 256;  // threads per block (any multiple of 32 up to 1024)
  int64_t max_blocks = 0;   // cap on the grid (grid-stride beyond it); 0 = the default cap
};

// out = x * keep / (1 - p) and mask = keep (u8, 1 = kept) for n contiguous elements (f32, f16,
// bf16), 0 < p < 1, with (seed, offset) from Generator::reserve((n + 3) / 4). out may alias x.
void dropout_forward(DType dtype, const void* x, void* out, uint8_t* mask, int64_t n, double p,
                     uint64_t seed, uint64_t offset, cudaStream_t stream,
                     const DropoutLaunch& launch = {});

// dx = grad * mask / (1 - p) (ops::dropout_backward); dx may alias grad.
void dropout_backward(DType dtype, const void* grad, const uint8_t* mask, void* dx, int64_t n,
                      double p, cudaStream_t stream);

}  // namespace stoke::cuda
