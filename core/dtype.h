// Element types. No silent promotion in ops::: ops that mix dtypes fail and name both; the
// differentiable binary ops (stoke::add, ...) promote floating dtypes to the wider one, as torch
// (autograd/autocast.h). f16/bf16 are storage types on the CPU: its backend computes them in f32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <type_traits>

#include "core/error.h"
#include "core/half.h"

namespace stoke {

enum class DType : uint8_t { f32, f64, f16, bf16, i32, i64, u8, boolean };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f64:
    case DType::i64:
      return 8;
    case DType::f32:
    case DType::i32:
      return 4;
    case DType::f16:
    case DType::bf16:
      return 2;
    case DType::u8:
    case DType::boolean:
      return 1;
  }
  return 0;
}

constexpr const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "f32";
    case DType::f64:
      return "f64";
    case DType::f16:
      return "f16";
    case DType::bf16:
      return "bf16";
    case DType::i32:
      return "i32";
    case DType::i64:
      return "i64";
    case DType::u8:
      return "u8";
    case DType::boolean:
      return "bool";
  }
  return "?";
}

constexpr bool is_floating(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16;
}

inline std::ostream& operator<<(std::ostream& os, DType t) {
  return os << dtype_name(t);
}

// The C++ type stored for each dtype (bool is stored as one byte holding 0 or 1).
template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::f32;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::f64;
}
template <>
constexpr DType dtype_of<Half>() {
  return DType::f16;
}
template <>
constexpr DType dtype_of<BFloat16>() {
  return DType::bf16;
}
template <>
constexpr DType dtype_of<int32_t>() {
  return DType::i32;
}
template <>
constexpr DType dtype_of<int64_t>() {
  return DType::i64;
}
template <>
constexpr DType dtype_of<uint8_t>() {
  return DType::u8;
}
template <>
constexpr DType dtype_of<bool>() {
  return DType::boolean;
}

template <class T>
struct TypeTag {
  using type = T;
};

// Calls f(TypeTag<T>{}) with the C++ type of `t`:
//   dispatch_all(t, "op", [&](auto tag) { using T = typename decltype(tag)::type; ... });
template <class F>
decltype(auto) dispatch_all(DType t, const char* /*op*/, F&& f) {
  switch (t) {
    case DType::f32:
      return f(TypeTag<float>{});
    case DType::f64:
      return f(TypeTag<double>{});
    case DType::f16:
      return f(TypeTag<Half>{});
    case DType::bf16:
      return f(TypeTag<BFloat16>{});
    case DType::i32:
      return f(TypeTag<int32_t>{});
    case DType::i64:
      return f(TypeTag<int64_t>{});
    case DType::u8:
      return f(TypeTag<uint8_t>{});
    case DType::boolean:
      return f(TypeTag<bool>{});
  }
  STOKE_FAIL("dispatch", "unknown dtype ", static_cast<int>(t));
}

// f32 and f64 only: the dtypes that CPU compute kernels are written for (f64 serves gradcheck).
template <class F>
decltype(auto) dispatch_float(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::f32:
      return f(TypeTag<float>{});
    case DType::f64:
      return f(TypeTag<double>{});
    default:
      break;
  }
  STOKE_FAIL(op, "expected a tensor of dtype f32 or f64, got ", dtype_name(t),
             " (f16/bf16 are storage types on the CPU: cast to f32 first)");
}

// Numeric types that support arithmetic (everything but bool) in their native C++ type.
template <class F>
decltype(auto) dispatch_numeric(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::f32:
      return f(TypeTag<float>{});
    case DType::f64:
      return f(TypeTag<double>{});
    case DType::i32:
      return f(TypeTag<int32_t>{});
    case DType::i64:
      return f(TypeTag<int64_t>{});
    case DType::u8:
      return f(TypeTag<uint8_t>{});
    default:
      break;
  }
  STOKE_FAIL(op, "expected a tensor of dtype f32, f64, i32, i64 or u8, got ", dtype_name(t));
}

}  // namespace stoke
