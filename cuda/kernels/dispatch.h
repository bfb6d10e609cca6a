// The kernels' dtype dispatch, made from core/dtype.h's dtype list (STOKE_DTYPES) with the device
// storage types: fn(T{}) with T = float, double, __half, __nv_bfloat16, int32_t, int64_t, uint8_t
// or bool. One header for every kernel family, so that a dtype's device type and the errors for
// dtypes a kernel does not take are written once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "core/dtype.h"
#include "core/error.h"
#include "cuda/compat.h"

namespace stoke::cuda {

template <class T>
struct IsDeviceFloat : std::bool_constant<std::is_same_v<T, float> || std::is_same_v<T, __half> ||
                                          std::is_same_v<T, __nv_bfloat16>> {};
template <class T>
struct IsDeviceInt : std::bool_constant<std::is_integral_v<T> && !std::is_same_v<T, bool>> {};
template <class T>
struct IsAnyDeviceType : std::true_type {};

// Calls fn(T{}) with the device storage type T of `dtype` when Accept<T> holds; any other dtype
// fails naming `op`: "expected dtype <expected>, got <dtype>".
template <template <class> class Accept, class Fn>
void dispatch_device_if(DType dtype, const char* op, const char* expected, Fn&& fn) {
  switch (dtype) {
#define STOKE_DEVICE_DISPATCH(e, name, T, D) \
  case DType::e:                             \
    if constexpr (Accept<D>::value)          \
      return fn(D{});                        \
    else                                     \
      break;
    STOKE_DTYPES(STOKE_DEVICE_DISPATCH)
#undef STOKE_DEVICE_DISPATCH
  }
  STOKE_FAIL(op, "expected dtype ", expected, ", got ", dtype);
}

// Every dtype.
template <class Fn>
void dispatch_all(DType dtype, const char* op, Fn&& fn) {
  dispatch_device_if<IsAnyDeviceType>(dtype, op, "of the dtype list", std::forward<Fn>(fn));
}

// f32, f16 and bf16: the kernels that compute in f32 (no f64 on the device).
template <class Fn>
void dispatch_floating(DType dtype, const char* op, Fn&& fn) {
  dispatch_device_if<IsDeviceFloat>(dtype, op, "f32, f16 or bf16", std::forward<Fn>(fn));
}

// i32, i64 and u8.
template <class Fn>
void dispatch_int(DType dtype, const char* op, Fn&& fn) {
  dispatch_device_if<IsDeviceInt>(dtype, op, "i32, i64 or u8", std::forward<Fn>(fn));
}

// fn(E{}) with an unsigned integer type of `elem_size` bytes: the kernels that only move elements
// (gather, scatter, where) copy them as bits.
template <class Fn>
void dispatch_size(size_t elem_size, const char* op, Fn&& fn) {
  switch (elem_size) {
    case 1:
      return fn(uint8_t{});
    case 2:
      return fn(uint16_t{});
    case 4:
      return fn(uint32_t{});
    case 8:
      return fn(uint64_t{});
    default:
      STOKE_FAIL(op, "expected elements of 1, 2, 4 or 8 bytes, got ", elem_size);
  }
}

}  // namespace stoke::cuda
