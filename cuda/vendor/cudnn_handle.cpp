#include "cuda/vendor/cudnn_handle.h"

#include <unordered_map>

#include "cuda/runtime/device.h"
#include "cuda/vendor/check.h"

namespace stoke::cuda {

cudnnHandle_t cudnn_handle(int device, cudaStream_t stream) {
  // Leaked on purpose: destroying handles after the driver shut down at exit can crash.
  thread_local auto* handles = new std::unordered_map<int, cudnnHandle_t>();
  cudnnHandle_t& h = (*handles)[device];
  if (!h) {
    DeviceGuard guard(device);
    STOKE_CUDNN_CHECK(cudnnCreate(&h));
  }
  STOKE_CUDNN_CHECK(cudnnSetStream(h, stream));
  return h;
}

cudnnDataType_t cudnn_data_type(DType dtype, const char* op) {
  switch (dtype) {
    case DType::f32:
      return CUDNN_DATA_FLOAT;
    case DType::f16:
      return CUDNN_DATA_HALF;
    case DType::bf16:
      return CUDNN_DATA_BFLOAT16;
    default:
      STOKE_FAIL(op, "expected dtype f32, f16 or bf16, got ", dtype);
  }
}

}  // namespace stoke::cuda
