// cuda/compat.h: the one CUDA include of every kernel file (cuda/kernels/*.cu) and every backend
// host file. Under nvcc (and the real build's host files) it is the CUDA toolkit; with
// STOKE_CUDA_EMU it is cuda/emu, which provides the same names on CPU threads. Code written against
// it builds both ways: kernels are launched with STOKE_LAUNCH, dynamic shared memory is declared
// with STOKE_DYNAMIC_SHARED, runtime calls are checked with STOKE_CUDA_CHECK and launchers are
// marked with STOKE_NVTX_RANGE.
#pragma once

#include <string>

#include "core/error.h"
#include "core/sync_debug.h"

#if defined(STOKE_CUDA_EMU)
#include "cuda/emu/emu.h"
#else
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nvtx3/nvtx3.hpp>
#endif

// STOKE_UNROLL before a short fixed-trip loop: full unrolling with nvcc's pragma in device code,
// GCC's in the emu build, nothing in nvcc's host pass (where GCC would warn about "#pragma unroll"
// and nvcc's front end about "#pragma GCC unroll").
#if defined(__CUDA_ARCH__)
#define STOKE_UNROLL _Pragma("unroll")
#elif defined(__CUDACC__)
#define STOKE_UNROLL
#else
#define STOKE_UNROLL _Pragma("GCC unroll 16")
#endif

// STOKE_LAUNCH(kernel, grid, block, smem_bytes, stream)(args...): kernel<<<grid, block,
// smem_bytes, stream>>>(args...) under nvcc; in emu the whole grid runs before it returns. Each
// launch is counted (stoke::device_activity().launches, core/sync_debug.h). Errors
// surface through cudaGetLastError() either way. For a template kernel take a pointer first:
// `auto* k = &my_kernel<float, 4>; STOKE_LAUNCH(k, grid, block, 0, stream)(args...);`.
//
// STOKE_DYNAMIC_SHARED(T, name): declares `T* name`, the block's dynamic shared memory (16-byte
// aligned; its size is the launch's smem_bytes).
//
// STOKE_NVTX_RANGE("stoke::cuda::NAME"): an NVTX range for the rest of the scope (no-op in emu).
#if defined(STOKE_CUDA_EMU)
#define STOKE_LAUNCH(kernel, grid, block, smem_bytes, stream) \
  (::stoke::note_kernel_launch(),                             \
   ::stoke::emu::make_launch(kernel, grid, block, smem_bytes, stream))
#define STOKE_DYNAMIC_SHARED(T, name) \
  T* name = reinterpret_cast<T*>(::stoke::emu::dynamic_shared_memory())
#define STOKE_NVTX_RANGE(name) static_cast<void>(name)
#else
#if defined(__CUDACC__)
#define STOKE_LAUNCH(kernel, grid, block, smem_bytes, stream) \
  (::stoke::detail::counted_launch(kernel))<<<grid, block, smem_bytes, stream>>>
#define STOKE_DYNAMIC_SHARED(T, name)                                    \
  extern __shared__ __align__(16) unsigned char stoke_dynamic_shared_[]; \
  T* name = reinterpret_cast<T*>(stoke_dynamic_shared_)
#endif
#define STOKE_NVTX_CAT_INNER_(a, b) a##b
#define STOKE_NVTX_CAT_(a, b) STOKE_NVTX_CAT_INNER_(a, b)
#define STOKE_NVTX_RANGE(name)                                               \
  const ::nvtx3::scoped_range STOKE_NVTX_CAT_(stoke_nvtx_range_, __LINE__) { \
    name                                                                     \
  }
#endif

namespace stoke::detail {
// STOKE_LAUNCH's count of a launch (core/sync_debug.h), passing the kernel through.
template <class Kernel>
inline Kernel counted_launch(Kernel kernel) noexcept {
  ::stoke::note_kernel_launch();
  return kernel;
}
}  // namespace stoke::detail

namespace stoke::cuda::detail {

/// Throws the stoke::Error for a failed CUDA runtime call: "stoke::cuda: FILE:LINE: EXPR failed:
/// MESSAGE (NAME)", plus, in emu, what the failed launch reported (e.g. a kernel's exception).
[[noreturn]] inline void cuda_check_failed(cudaError_t error, const char* expr, const char* file,
                                           int line) {
  std::string message =
      ::stoke::detail::str_cat(file, ":", line, ": ", expr, " failed: ", cudaGetErrorString(error),
                               " (", cudaGetErrorName(error), ")");
#if defined(STOKE_CUDA_EMU)
  if (error == cudaErrorLaunchFailure || error == cudaErrorInvalidConfiguration ||
      error == cudaErrorInvalidValue || error == cudaErrorNotSupported) {
    const std::string detail = ::stoke::emu::last_failure_detail();
    if (!detail.empty()) message.append(": ").append(detail);
  }
#endif
  ::stoke::detail::throw_error("cuda", message);
}

}  // namespace stoke::cuda::detail

/// Evaluates a cudaError_t expression and throws stoke::Error (with file:line, the call's text and
/// cudaGetErrorString) unless it is cudaSuccess.
#define STOKE_CUDA_CHECK(expr)                                                                \
  do {                                                                                        \
    const cudaError_t stoke_cuda_error_ = (expr);                                             \
    if (stoke_cuda_error_ != cudaSuccess) [[unlikely]]                                        \
      ::stoke::cuda::detail::cuda_check_failed(stoke_cuda_error_, #expr, __FILE__, __LINE__); \
  } while (0)
