// The cuDNN handle of the calling thread for a device, bound to a stream, and dtype mapping
// shared by the cuDNN glue (real builds only).
#pragma once

#include <cudnn.h>

#include "core/dtype.h"
#include "cuda/compat.h"

namespace stoke::cuda {

// The calling thread's handle for `device` (created on first use), set to run on `stream`.
// Handles are per thread because cudnnSetStream on a shared handle would race.
cudnnHandle_t cudnn_handle(int device, cudaStream_t stream);
// f32 -> CUDNN_DATA_FLOAT, f16 -> HALF, bf16 -> BFLOAT16; other dtypes throw naming `op`.
cudnnDataType_t cudnn_data_type(DType dtype, const char* op);

}  // namespace stoke::cuda
