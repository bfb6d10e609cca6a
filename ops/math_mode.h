// Math modes of the GPU backends, set once by a main (like torch.backends.cuda.matmul.allow_tf32).
#pragma once

namespace stoke {

// Whether f32 matmul/linear (cuBLAS) and conv2d (cuDNN) on CUDA may use TF32 tensor cores: inputs
// rounded to a 10-bit mantissa, f32 accumulation, about 1e-3 relative error for up to ~8x the f32
// throughput on sm_80+. Off by default, so f32 results on the GPU match the CPU's to f32 rounding.
// The environment variable STOKE_ALLOW_TF32=1 turns it on at start-up. CPU kernels and stoke's own
// CUDA kernels (the emulated build's) ignore it; f16/bf16 always use tensor cores.
void set_allow_tf32(bool on);
bool allow_tf32();

}  // namespace stoke
