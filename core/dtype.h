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

// The dtype list, written once: X(enumerator, printed name, host storage type, device storage
// type). The enum, dtype_size, dtype_name, is_floating, dtype_of and the dispatchers below are made
// from it, and cuda/kernels/dispatch.h makes the kernels' dispatchers from its last column (f16 and
// bf16 are __half and __nv_bfloat16 there; the column is only expanded where those types exist).
// bool is stored as one byte holding 0 or 1.
#define STOKE_DTYPES(X)                    \
  X(f32, "f32", float, float)              \
  X(f64, "f64", double, double)            \
  X(f16, "f16", Half, __half)              \
  X(bf16, "bf16", BFloat16, __nv_bfloat16) \
  X(i32, "i32", int32_t, int32_t)          \
  X(i64, "i64", int64_t, int64_t)          \
  X(u8, "u8", uint8_t, uint8_t)            \
  X(boolean, "bool", bool, bool)

enum class DType : uint8_t {
#define STOKE_DTYPE_ENUM(e, name, T, D) e,
  STOKE_DTYPES(STOKE_DTYPE_ENUM)
#undef STOKE_DTYPE_ENUM
};

static_assert(sizeof(bool) == 1, "bool tensors store one byte per element");

// The host storage type of each dtype: DTypeInfo<DType::f16>::type is Half.
template <DType>
struct DTypeInfo;
// The dtype of a host storage type: dtype_of<float>() is DType::f32.
template <class T>
struct DTypeOf;
#define STOKE_DTYPE_TRAITS(e, name, T, D)    \
  template <>                                \
  struct DTypeInfo<DType::e> {               \
    using type = T;                          \
  };                                         \
  template <>                                \
  struct DTypeOf<T> {                        \
    static constexpr DType value = DType::e; \
  };
STOKE_DTYPES(STOKE_DTYPE_TRAITS)
#undef STOKE_DTYPE_TRAITS

template <class T>
constexpr DType dtype_of() {
  return DTypeOf<T>::value;
}

// The floating storage types: the IEEE ones and the two 16-bit ones of core/half.h.
template <class T>
struct IsFloatingStorage
    : std::bool_constant<std::is_floating_point_v<T> || std::is_same_v<T, Half> ||
                         std::is_same_v<T, BFloat16>> {};
// f32 and f64: the dtypes that CPU compute kernels are written for (f64 serves gradcheck).
template <class T>
struct IsComputeFloat : std::bool_constant<std::is_floating_point_v<T>> {};
// Everything that supports arithmetic in its own C++ type (not bool, not the 16-bit floats).
template <class T>
struct IsNumeric : std::bool_constant<std::is_arithmetic_v<T> && !std::is_same_v<T, bool>> {};

constexpr size_t dtype_size(DType t) {
  switch (t) {
#define STOKE_DTYPE_SIZE(e, name, T, D) \
  case DType::e:                        \
    return sizeof(T);
    STOKE_DTYPES(STOKE_DTYPE_SIZE)
#undef STOKE_DTYPE_SIZE
  }
  return 0;
}

constexpr const char* dtype_name(DType t) {
  switch (t) {
#define STOKE_DTYPE_NAME(e, name, T, D) \
  case DType::e:                        \
    return name;
    STOKE_DTYPES(STOKE_DTYPE_NAME)
#undef STOKE_DTYPE_NAME
  }
  return "?";
}

constexpr bool is_floating(DType t) {
  switch (t) {
#define STOKE_DTYPE_FLOATING(e, name, T, D) \
  case DType::e:                            \
    return IsFloatingStorage<T>::value;
    STOKE_DTYPES(STOKE_DTYPE_FLOATING)
#undef STOKE_DTYPE_FLOATING
  }
  return false;
}

inline std::ostream& operator<<(std::ostream& os, DType t) {
  return os << dtype_name(t);
}

template <class T>
struct TypeTag {
  using type = T;
};

// Calls f(TypeTag<T>{}) with the host storage type T of `t` when Accept<T> holds; any other dtype
// fails naming `op` and what it accepts: "expected a tensor of dtype <expected>, got <t><note>".
template <template <class> class Accept, class F>
decltype(auto) dispatch_if(DType t, const char* op, const char* expected, const char* note, F&& f) {
  switch (t) {
#define STOKE_DTYPE_DISPATCH(e, name, T, D) \
  case DType::e:                            \
    if constexpr (Accept<T>::value)         \
      return f(TypeTag<T>{});               \
    else                                    \
      break;
    STOKE_DTYPES(STOKE_DTYPE_DISPATCH)
#undef STOKE_DTYPE_DISPATCH
  }
  STOKE_FAIL(op, "expected a tensor of dtype ", expected, ", got ", dtype_name(t), note);
}

template <class T>
struct AnyDType : std::true_type {};

// Calls f(TypeTag<T>{}) with the C++ type of `t`:
//   dispatch_all(t, "op", [&](auto tag) { using T = typename decltype(tag)::type; ... });
template <class F>
decltype(auto) dispatch_all(DType t, const char* op, F&& f) {
  return dispatch_if<AnyDType>(t, op, "of the dtype list", "", std::forward<F>(f));
}

// f32 and f64 only: the dtypes that CPU compute kernels are written for.
template <class F>
decltype(auto) dispatch_float(DType t, const char* op, F&& f) {
  return dispatch_if<IsComputeFloat>(t, op, "f32 or f64",
                                     " (f16/bf16 are storage types on the CPU: cast to f32 first)",
                                     std::forward<F>(f));
}

// Numeric types that support arithmetic (everything but bool) in their native C++ type.
template <class F>
decltype(auto) dispatch_numeric(DType t, const char* op, F&& f) {
  return dispatch_if<IsNumeric>(t, op, "f32, f64, i32, i64 or u8", "", std::forward<F>(f));
}

// The floating storage types (f32, f64, f16, bf16): for kernels that load 16-bit values and
// compute in f32 themselves (the optimizers).
template <class F>
decltype(auto) dispatch_storage(DType t, const char* op, F&& f) {
  return dispatch_if<IsFloatingStorage>(t, op, "f32, f64, f16 or bf16", "", std::forward<F>(f));
}

}  // namespace stoke
