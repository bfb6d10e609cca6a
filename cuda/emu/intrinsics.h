// cuda/emu: CUDA's device intrinsics for the host compiler — atomics (real atomics, relaxed like
// CUDA's, so ThreadSanitizer still reports data that only an atomic counter "protects"), fences,
// the fast-math float intrinsics (computed at full precision: emu checks correctness, the fast
// versions' error bounds are the GPU's business), bit manipulation, and global min/max as CUDA
// declares them. Included by cuda/emu/emu.h; do not include directly.
#pragma once

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>

#include "core/error.h"

namespace stoke::emu::detail {
template <class T>
std::atomic_ref<T> atomic_at(T* address) {
  return std::atomic_ref<T>(*address);
}
// Read-modify-write through compare-exchange for operations std::atomic_ref does not have.
template <class T, class F>
T atomic_update(T* address, F f) {
  auto ref = atomic_at(address);
  T old = ref.load(std::memory_order_relaxed);
  while (!ref.compare_exchange_weak(old, f(old), std::memory_order_relaxed)) {
  }
  return old;
}
// 16-bit floats: compare-exchange on the bit pattern, arithmetic in f32 like the GPU's atomics.
template <class H>
H atomic_add_16(H* address, H value) {
  static_assert(sizeof(H) == sizeof(std::uint16_t));
  auto* bits = reinterpret_cast<std::uint16_t*>(address);
  const std::uint16_t old = atomic_update(bits, [value](std::uint16_t b) {
    const H h = std::bit_cast<H>(b);
    return std::bit_cast<std::uint16_t>(H(static_cast<float>(h) + static_cast<float>(value)));
  });
  return std::bit_cast<H>(old);
}
inline std::atomic<unsigned> fence_word{0};
}  // namespace stoke::emu::detail

// ---- atomics (each returns the old value, as in CUDA) -----------------------------------------

#define STOKE_EMU_FETCH_OP(name, op, T)                                                 \
  inline T name(T* address, T value) {                                                  \
    return stoke::emu::detail::atomic_at(address).op(value, std::memory_order_relaxed); \
  }
STOKE_EMU_FETCH_OP(atomicAdd, fetch_add, int)
STOKE_EMU_FETCH_OP(atomicAdd, fetch_add, unsigned)
STOKE_EMU_FETCH_OP(atomicAdd, fetch_add, unsigned long long)
STOKE_EMU_FETCH_OP(atomicAdd, fetch_add, float)
STOKE_EMU_FETCH_OP(atomicAdd, fetch_add, double)
STOKE_EMU_FETCH_OP(atomicSub, fetch_sub, int)
STOKE_EMU_FETCH_OP(atomicSub, fetch_sub, unsigned)
STOKE_EMU_FETCH_OP(atomicAnd, fetch_and, int)
STOKE_EMU_FETCH_OP(atomicAnd, fetch_and, unsigned)
STOKE_EMU_FETCH_OP(atomicAnd, fetch_and, unsigned long long)
STOKE_EMU_FETCH_OP(atomicOr, fetch_or, int)
STOKE_EMU_FETCH_OP(atomicOr, fetch_or, unsigned)
STOKE_EMU_FETCH_OP(atomicOr, fetch_or, unsigned long long)
STOKE_EMU_FETCH_OP(atomicXor, fetch_xor, int)
STOKE_EMU_FETCH_OP(atomicXor, fetch_xor, unsigned)
STOKE_EMU_FETCH_OP(atomicXor, fetch_xor, unsigned long long)
STOKE_EMU_FETCH_OP(atomicExch, exchange, int)
STOKE_EMU_FETCH_OP(atomicExch, exchange, unsigned)
STOKE_EMU_FETCH_OP(atomicExch, exchange, unsigned long long)
STOKE_EMU_FETCH_OP(atomicExch, exchange, float)
#undef STOKE_EMU_FETCH_OP

/// atomicAdd on __half / __nv_bfloat16 (sm_70 / sm_80 on the GPU).
inline __half atomicAdd(__half* address, __half value) {
  return stoke::emu::detail::atomic_add_16(address, value);
}
inline __nv_bfloat16 atomicAdd(__nv_bfloat16* address, __nv_bfloat16 value) {
  return stoke::emu::detail::atomic_add_16(address, value);
}

#define STOKE_EMU_MINMAX_OP(name, pick, T)                                                 \
  inline T name(T* address, T value) {                                                     \
    return stoke::emu::detail::atomic_update(address,                                      \
                                             [value](T old) { return pick(old, value); }); \
  }
STOKE_EMU_MINMAX_OP(atomicMax, std::max<int>, int)
STOKE_EMU_MINMAX_OP(atomicMax, std::max<unsigned>, unsigned)
STOKE_EMU_MINMAX_OP(atomicMax, std::max<long long>, long long)
STOKE_EMU_MINMAX_OP(atomicMax, std::max<unsigned long long>, unsigned long long)
STOKE_EMU_MINMAX_OP(atomicMin, std::min<int>, int)
STOKE_EMU_MINMAX_OP(atomicMin, std::min<unsigned>, unsigned)
STOKE_EMU_MINMAX_OP(atomicMin, std::min<long long>, long long)
STOKE_EMU_MINMAX_OP(atomicMin, std::min<unsigned long long>, unsigned long long)
#undef STOKE_EMU_MINMAX_OP

/// Stores `value` if *address == compare; returns the old value.
template <class T>
requires(std::is_same_v<T, int> || std::is_same_v<T, unsigned> ||
         std::is_same_v<T, unsigned long long> || std::is_same_v<T, unsigned short>) inline T
    atomicCAS(T* address, T compare, T value) {
  stoke::emu::detail::atomic_at(address).compare_exchange_strong(compare, value,
                                                                 std::memory_order_relaxed);
  return compare;
}
/// ((old >= limit) ? 0 : old + 1), as CUDA's atomicInc.
inline unsigned atomicInc(unsigned* address, unsigned limit) {
  return stoke::emu::detail::atomic_update(
      address, [limit](unsigned old) { return old >= limit ? 0u : old + 1; });
}
/// (((old == 0) || (old > limit)) ? limit : old - 1), as CUDA's atomicDec.
inline unsigned atomicDec(unsigned* address, unsigned limit) {
  return stoke::emu::detail::atomic_update(
      address, [limit](unsigned old) { return (old == 0 || old > limit) ? limit : old - 1; });
}

/// Memory fences: a sequentially consistent read-modify-write of one shared word, which orders
/// like a fence and which ThreadSanitizer understands (it does not model atomic_thread_fence).
inline void __threadfence() {
  stoke::emu::detail::fence_word.fetch_add(0, std::memory_order_seq_cst);
}
inline void __threadfence_block() {
  __threadfence();
}
inline void __threadfence_system() {
  __threadfence();
}

// ---- loads and stores with cache hints: plain accesses on the host ---------------------------

template <class T>
inline T __ldg(const T* p) {
  return *p;
}
template <class T>
inline T __ldcg(const T* p) {
  return *p;
}
template <class T>
inline T __ldcs(const T* p) {
  return *p;
}
template <class T>
inline T __ldlu(const T* p) {
  return *p;
}
template <class T>
inline void __stcg(T* p, T v) {
  *p = v;
}
template <class T>
inline void __stcs(T* p, T v) {
  *p = v;
}
template <class T>
inline void __stwb(T* p, T v) {
  *p = v;
}

// ---- float intrinsics ------------------------------------------------------------------------

inline float __expf(float x) {
  return std::exp(x);
}
inline float __exp10f(float x) {
  return std::pow(10.0f, x);
}
inline float __logf(float x) {
  return std::log(x);
}
inline float __log2f(float x) {
  return std::log2(x);
}
inline float __log10f(float x) {
  return std::log10(x);
}
inline float __sinf(float x) {
  return std::sin(x);
}
inline float __cosf(float x) {
  return std::cos(x);
}
inline float __tanf(float x) {
  return std::tan(x);
}
inline void __sincosf(float x, float* s, float* c) {
  *s = std::sin(x);
  *c = std::cos(x);
}
inline float __powf(float x, float y) {
  return std::pow(x, y);
}
inline float __fdividef(float x, float y) {
  return x / y;
}
inline float __frcp_rn(float x) {
  return 1.0f / x;
}
inline float __fsqrt_rn(float x) {
  return std::sqrt(x);
}
inline float rsqrtf(float x) {
  return 1.0f / std::sqrt(x);
}
inline double rsqrt(double x) {
  return 1.0 / std::sqrt(x);
}
inline float rcbrtf(float x) {
  return 1.0f / std::cbrt(x);
}
inline float __fadd_rn(float a, float b) {
  return a + b;
}
inline float __fsub_rn(float a, float b) {
  return a - b;
}
inline float __fmul_rn(float a, float b) {
  return a * b;
}
inline float __fmaf_rn(float a, float b, float c) {
  return std::fma(a, b, c);
}
inline double __dadd_rn(double a, double b) {
  return a + b;
}
inline double __dmul_rn(double a, double b) {
  return a * b;
}
inline double __fma_rn(double a, double b, double c) {
  return std::fma(a, b, c);
}
/// Clamps to [0, 1]; NaN gives 0.
inline float __saturatef(float x) {
  return x >= 1.0f ? 1.0f : (x > 0.0f ? x : 0.0f);
}

inline int __float2int_rn(float x) {
  return static_cast<int>(std::nearbyint(x));
}
inline int __float2int_rz(float x) {
  return static_cast<int>(x);
}
inline int __float2int_rd(float x) {
  return static_cast<int>(std::floor(x));
}
inline int __float2int_ru(float x) {
  return static_cast<int>(std::ceil(x));
}
inline unsigned __float2uint_rn(float x) {
  return static_cast<unsigned>(std::nearbyint(x));
}
inline float __int2float_rn(int x) {
  return static_cast<float>(x);
}
inline float __uint2float_rn(unsigned x) {
  return static_cast<float>(x);
}
inline int __float_as_int(float x) {
  return std::bit_cast<int>(x);
}
inline unsigned __float_as_uint(float x) {
  return std::bit_cast<unsigned>(x);
}
inline float __int_as_float(int x) {
  return std::bit_cast<float>(x);
}
inline float __uint_as_float(unsigned x) {
  return std::bit_cast<float>(x);
}
inline long long __double_as_longlong(double x) {
  return std::bit_cast<long long>(x);
}
inline double __longlong_as_double(long long x) {
  return std::bit_cast<double>(x);
}

// ---- integer intrinsics ----------------------------------------------------------------------

inline int __popc(unsigned x) {
  return std::popcount(x);
}
inline int __popcll(unsigned long long x) {
  return std::popcount(x);
}
inline int __clz(int x) {
  return std::countl_zero(static_cast<unsigned>(x));
}
inline int __clzll(long long x) {
  return std::countl_zero(static_cast<unsigned long long>(x));
}
/// 1-based position of the least significant set bit; 0 for 0.
inline int __ffs(int x) {
  return x == 0 ? 0 : std::countr_zero(static_cast<unsigned>(x)) + 1;
}
inline int __ffsll(long long x) {
  return x == 0 ? 0 : std::countr_zero(static_cast<unsigned long long>(x)) + 1;
}
inline unsigned __brev(unsigned x) {
  unsigned r = 0;
  for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
  return r;
}
inline unsigned __umulhi(unsigned a, unsigned b) {
  return static_cast<unsigned>((static_cast<unsigned long long>(a) * b) >> 32);
}
inline int __mulhi(int a, int b) {
  return static_cast<int>((static_cast<long long>(a) * b) >> 32);
}
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
  return static_cast<unsigned long long>((static_cast<unsigned __int128>(a) * b) >> 64);
}
inline int __mul24(int a, int b) {
  return a * b;
}
inline unsigned __umul24(unsigned a, unsigned b) {
  return a * b;
}

// ---- min / max: CUDA declares these overloads in the global namespace ------------------------

inline int min(int a, int b) {
  return a < b ? a : b;
}
inline unsigned min(unsigned a, unsigned b) {
  return a < b ? a : b;
}
inline long long min(long long a, long long b) {
  return a < b ? a : b;
}
inline unsigned long long min(unsigned long long a, unsigned long long b) {
  return a < b ? a : b;
}
inline float min(float a, float b) {
  return std::fmin(a, b);
}
inline double min(double a, double b) {
  return std::fmin(a, b);
}
inline int max(int a, int b) {
  return a > b ? a : b;
}
inline unsigned max(unsigned a, unsigned b) {
  return a > b ? a : b;
}
inline long long max(long long a, long long b) {
  return a > b ? a : b;
}
inline unsigned long long max(unsigned long long a, unsigned long long b) {
  return a > b ? a : b;
}
inline float max(float a, float b) {
  return std::fmax(a, b);
}
inline double max(double a, double b) {
  return std::fmax(a, b);
}

// ---- miscellaneous ---------------------------------------------------------------------------

/// A nanosecond clock (the GPU's is in cycles; only differences are meaningful in either).
inline long long clock64() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
inline void __nanosleep(unsigned ns) {
  std::this_thread::sleep_for(std::chrono::nanoseconds(ns));
}
/// Aborts the kernel: the launch fails with cudaErrorLaunchFailure.
[[noreturn]] inline void __trap() {
  STOKE_FAIL("emu", "__trap() called in a kernel");
}
