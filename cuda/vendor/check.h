// Status checks for the vendor libraries (real builds only; cuda/vendor is never built in emu).
// Each turns a failed status into a stoke::Error naming file:line, the call's text and the
// status, as STOKE_CUDA_CHECK does for the runtime:
//   "stoke::cublas: cuda/vendor/cublas_gemm.cpp:80: cublasGemmEx(...) failed: CUBLAS_STATUS_..."
#pragma once

#include <cublas_v2.h>
#include <cudnn.h>

#include "core/error.h"
#include "cuda/compat.h"

namespace stoke::cuda::detail {

[[noreturn]] inline void throw_cublas(cublasStatus_t status, const char* call, const char* file,
                                      int line) {
  ::stoke::detail::throw_error(
      "cublas", ::stoke::detail::str_cat(file, ":", line, ": ", call,
                                         " failed: ", cublasGetStatusName(status), " (",
                                         cublasGetStatusString(status), ")"));
}

[[noreturn]] inline void throw_cudnn(cudnnStatus_t status, const char* call, const char* file,
                                     int line) {
  ::stoke::detail::throw_error(
      "cudnn", ::stoke::detail::str_cat(file, ":", line, ": ", call,
                                        " failed: ", cudnnGetErrorString(status), " (status ",
                                        static_cast<int>(status), ")"));
}

}  // namespace stoke::cuda::detail

// STOKE_CUBLAS_CHECK(cublasCreate(&handle)): throws stoke::Error unless CUBLAS_STATUS_SUCCESS.
#define STOKE_CUBLAS_CHECK(expr)                                                     \
  do {                                                                               \
    const cublasStatus_t stoke_status_ = (expr);                                     \
    if (stoke_status_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                         \
      ::stoke::cuda::detail::throw_cublas(stoke_status_, #expr, __FILE__, __LINE__); \
  } while (0)

// STOKE_CUDNN_CHECK(cudnnCreate(&handle)): throws stoke::Error unless CUDNN_STATUS_SUCCESS.
#define STOKE_CUDNN_CHECK(expr)                                                     \
  do {                                                                              \
    const cudnnStatus_t stoke_status_ = (expr);                                     \
    if (stoke_status_ != CUDNN_STATUS_SUCCESS) [[unlikely]]                         \
      ::stoke::cuda::detail::throw_cudnn(stoke_status_, #expr, __FILE__, __LINE__); \
  } while (0)
