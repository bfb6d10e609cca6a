// Which methods of the cuda DeviceKernels (ops/cuda/backend.h) the selftest reaches, measured at
// run time: CoverageScope puts a decorator in front of the registered cuda kernels (the registry
// of ops/device_kernels.h), which counts each call, notes the dtype of its first tensor, and
// forwards it unchanged; the destructor puts the original back.
//
// The decorator overrides every virtual method of DeviceKernels (kMethods lists them). A method
// it does not override would reach DeviceKernels' "not implemented" default instead of the
// backend, so tests/cuda/test_selftest_ops.cpp checks that every `override` in
// ops/cuda/backend.h is in kMethods: a new kernel method fails that test until it is added here
// and checked in ops_checks*.cpp.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ops/device_kernels.h"

namespace stoke::selftest {

// Every virtual method of ops::DeviceKernels but type() and use_device(), in header order.
#define STOKE_SELFTEST_KERNEL_METHODS(X) \
  X(fill)                                \
  X(copy_strided)                        \
  X(binary)                              \
  X(binary_scalar)                       \
  X(unary)                               \
  X(leaky_relu)                          \
  X(clamp)                               \
  X(relu_backward)                       \
  X(binary_)                             \
  X(binary_scalar_)                      \
  X(sum)                                 \
  X(mean)                                \
  X(max_with_indices)                    \
  X(min_with_indices)                    \
  X(softmax)                             \
  X(softmax_backward)                    \
  X(cross_entropy_forward)               \
  X(cross_entropy_backward)              \
  X(matmul)                              \
  X(linear)                              \
  X(linear_backward)                     \
  X(conv2d)                              \
  X(conv2d_backward)                     \
  X(max_pool2d_with_indices)             \
  X(max_pool2d_backward)                 \
  X(avg_pool2d)                          \
  X(avg_pool2d_backward)                 \
  X(adaptive_avg_pool2d)                 \
  X(adaptive_avg_pool2d_backward)        \
  X(batch_norm_forward)                  \
  X(batch_norm_backward)                 \
  X(dropout_with_mask)                   \
  X(dropout_backward)                    \
  X(unary_backward)                      \
  X(compare)                             \
  X(compare_scalar)                      \
  X(where)                               \
  X(where_backward)                      \
  X(pow)                                 \
  X(pow_backward)                        \
  X(div_backward_other)                  \
  X(minmax_backward)                     \
  X(sqrt_)                               \
  X(clamp_)                              \
  X(lerp_)                               \
  X(check_index_range)                   \
  X(index_select)                        \
  X(index_select_backward)               \
  X(gather)                              \
  X(gather_backward)                     \
  X(normalize_u8_nhwc)

enum class Method : int {
#define STOKE_SELFTEST_ENUM(name) name,
  STOKE_SELFTEST_KERNEL_METHODS(STOKE_SELFTEST_ENUM)
#undef STOKE_SELFTEST_ENUM
};

inline constexpr std::string_view kMethods[] = {
#define STOKE_SELFTEST_NAME(name) #name,
    STOKE_SELFTEST_KERNEL_METHODS(STOKE_SELFTEST_NAME)
#undef STOKE_SELFTEST_NAME
};
inline constexpr size_t kMethodCount = std::size(kMethods);

// Calls per method and the dtypes seen (bit i for DType i), since the scope was opened.
struct Coverage {
  std::array<int64_t, kMethodCount> calls{};
  std::array<uint32_t, kMethodCount> dtypes{};

  int64_t calls_of(std::string_view method) const;
  bool saw(std::string_view method, DType dtype) const;
  // The methods never called, comma-separated ("" when none).
  std::string never_called() const;
  // "binary: 40 calls (f32 f16 bf16 i32 i64 u8)", one line per method.
  std::vector<std::string> lines() const;
};

class CoverageScope {
 public:
  // Wraps the kernels registered for Device::cuda(0); throws if there are none or no device.
  CoverageScope();
  ~CoverageScope();
  CoverageScope(const CoverageScope&) = delete;
  CoverageScope& operator=(const CoverageScope&) = delete;

  Coverage snapshot() const;

  struct State {
    std::array<std::atomic<int64_t>, kMethodCount> calls{};
    std::array<std::atomic<uint32_t>, kMethodCount> dtypes{};
  };

 private:
  ops::DeviceKernels* inner_;
  State state_;
  struct Decorator;
  Decorator* decorator_;
};

}  // namespace stoke::selftest
