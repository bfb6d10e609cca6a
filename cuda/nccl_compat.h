// cuda/nccl_compat.h: the one NCCL include of stoke's code. With STOKE_CUDA_EMU it is cuda/emu's
// NCCL subset (ranks are threads on the emulated devices, cuda/emu/nccl.h says what it does),
// otherwise the real <nccl.h>; code written against it builds both ways. NCCL calls are checked
// with STOKE_NCCL_CHECK.
#pragma once

#include <string>

#include "core/error.h"

#if defined(STOKE_CUDA_EMU)
#include "cuda/emu/nccl.h"
#else
#include <nccl.h>
#endif

namespace stoke::cuda::detail {

/// Throws the stoke::Error for a failed NCCL call: "stoke::nccl: FILE:LINE: EXPR failed: MESSAGE
/// (NAME): LAST ERROR", where LAST ERROR is ncclGetLastError's detail (which rank, which buffer).
[[noreturn]] inline void nccl_check_failed(ncclResult_t result, const char* expr, const char* file,
                                           int line) {
  std::string message =
      ::stoke::detail::str_cat(file, ":", line, ": ", expr, " failed: ", ncclGetErrorString(result),
                               " (", static_cast<int>(result), ")");
  // NCCL keeps the detail of the last error; null asks for the calling thread's (the process's in
  // real NCCL), which is the failed call's in the common one-thread-per-rank use.
  const char* last = ncclGetLastError(nullptr);
  if (last != nullptr && *last != '\0') message.append(": ").append(last);
  ::stoke::detail::throw_error("nccl", message);
}

}  // namespace stoke::cuda::detail

/// Evaluates an ncclResult_t expression and throws stoke::Error (with file:line, the call's text,
/// ncclGetErrorString and ncclGetLastError) unless it is ncclSuccess. ncclInProgress (only from
/// non-blocking communicators, which stoke does not create) counts as a failure.
#define STOKE_NCCL_CHECK(expr)                                                                 \
  do {                                                                                         \
    const ncclResult_t stoke_nccl_result_ = (expr);                                            \
    if (stoke_nccl_result_ != ncclSuccess) [[unlikely]]                                        \
      ::stoke::cuda::detail::nccl_check_failed(stoke_nccl_result_, #expr, __FILE__, __LINE__); \
  } while (0)
