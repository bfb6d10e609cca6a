// Which methods of the cuda backend (ops/cuda/backend.h) the selftest reaches, measured at run
// time: CoverageScope puts a decorator in front of the registered cuda backend (the registry of
// ops/backend.h), which counts each call, notes the dtype of the op's input tensor, and forwards
// it unchanged; the destructor puts the original back.
//
// The decorator and kMethods are expanded from the one method list (ops/backend_methods.h), so a
// new kernel method is counted without an edit here; tests/cuda/test_selftest_ops.cpp then fails
// until ops_checks*.cpp reaches it.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ops/backend.h"

namespace stoke::selftest {

enum class Method : int {
#define STOKE_SELFTEST_ENUM(ret, name, params, args, family) name,
  STOKE_BACKEND_METHODS(STOKE_SELFTEST_ENUM)
#undef STOKE_SELFTEST_ENUM
};

inline constexpr std::string_view kMethods[] = {
#define STOKE_SELFTEST_NAME(ret, name, params, args, family) #name,
    STOKE_BACKEND_METHODS(STOKE_SELFTEST_NAME)
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
  ops::Backend* inner_;
  State state_;
  struct Decorator;
  Decorator* decorator_;
};

}  // namespace stoke::selftest
