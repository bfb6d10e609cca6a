// stoke-gpu-selftest's checks below the ops:: API: the vendor calls (cuBLAS, cuDNN; real backend
// only, vendor_checks.cpp) and the raw launchers of stoke's own kernels with every version and
// tile they offer, plus the launchers the ops:: glue does not use (kernel_checks.cpp; builds
// against the real backend and cuda/emu). Each compares with the CPU ops on the same inputs.
#pragma once

#include "apps/selftest/suite.h"

namespace stoke::selftest {

// cuBLAS GEMM (NN/NT/TN, strided batch, tensor forms matmul and linear; f32, TF32, f16, bf16),
// cuDNN convolution (three directions, stride/padding/dilation/groups, tensor form), cuDNN batch
// norm (training with running statistics, inference, backward) and cuDNN pooling. Defined only
// in builds with the real CUDA backend (STOKE_HAS_CUDA).
void run_vendor_checks(Suite& s);

// dist::NcclCommunicator with one rank per GPU (threads of this process): every collective and
// dtype against the CPU sum of the ranks' inputs, stoke's ring over NCCL, and two DDP steps
// against the whole batch on the CPU. Defined with the real NCCL (STOKE_HAS_NCCL) and in cuda/emu.
void run_nccl_checks(Suite& s);

// SGEMM (every version and tile, transposes, a misaligned operand), the implicit-GEMM
// convolution (every tile), reductions and softmax, and cat/embedding/cast launchers.
void run_kernel_checks(Suite& s, bool quick);

}  // namespace stoke::selftest
