// cuda/emu's NCCL (cuda/emu/nccl.cpp): the reduction of a collective, every rank's input in rank
// order into one output, as one thread of the last rank to arrive runs it.
#pragma once

#include <cstddef>
#include <vector>

#include "cuda/emu/nccl.h"

namespace stoke::emu::nccl {

// out[i] = in[0][i] op in[1][i] op ... for i < n: f16/bf16 accumulated in f32 and rounded once,
// integers wrapping, ncclAvg the sum divided by the rank count. `t` must be a valid type.
void reduce(ncclDataType_t t, const std::vector<const unsigned char*>& in, unsigned char* out,
            std::size_t n, ncclRedOp_t op);

}  // namespace stoke::emu::nccl
