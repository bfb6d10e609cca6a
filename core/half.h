// IEEE binary16 (Half) and bfloat16 (BFloat16) as storage types. Conversions from float round to
// nearest even and are exact for inf, nan and subnormals; arithmetic happens in float.
#pragma once

#include <bit>
#include <cstdint>

namespace stoke {

namespace detail {

// float -> binary16, round to nearest even (F. Giesen's float_to_half_fast3_rtne).
constexpr uint16_t float_to_half_bits(float value) {
  uint32_t x = std::bit_cast<uint32_t>(value);
  const uint32_t sign = x & 0x80000000u;
  x ^= sign;
  uint32_t out;
  if (x >= (127u + 16u) << 23) {  // too large for a half, or inf/nan
    out = x > (255u << 23) ? 0x7e00u : 0x7c00u;
  } else if (x < (113u << 23)) {  // half subnormal or zero: let the FPU round the mantissa
    constexpr uint32_t denorm_magic = ((127u - 15u) + (23u - 10u) + 1u) << 23;
    const float f = std::bit_cast<float>(x) + std::bit_cast<float>(denorm_magic);
    out = std::bit_cast<uint32_t>(f) - denorm_magic;
  } else {
    const uint32_t mantissa_odd = (x >> 13) & 1u;
    x += ((15u - 127u) << 23) + 0xfffu;  // rebias exponent; round half up ...
    x += mantissa_odd;                   // ... and ties to even
    out = x >> 13;
  }
  return static_cast<uint16_t>(out | (sign >> 16));
}

constexpr float half_bits_to_float(uint16_t h) {
  constexpr uint32_t shifted_exp = 0x7c00u << 13;
  uint32_t out = (h & 0x7fffu) << 13;
  const uint32_t exp = shifted_exp & out;
  out += (127u - 15u) << 23;
  if (exp == shifted_exp) {
    out += (128u - 16u) << 23;  // inf/nan keep an all-ones exponent
  } else if (exp == 0) {        // zero or subnormal: renormalize through the FPU
    out += 1u << 23;
    out = std::bit_cast<uint32_t>(std::bit_cast<float>(out) - std::bit_cast<float>(113u << 23));
  }
  out |= static_cast<uint32_t>(h & 0x8000u) << 16;
  return std::bit_cast<float>(out);
}

constexpr uint16_t float_to_bf16_bits(float value) {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  if ((x & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet nan
  const uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

constexpr float bf16_bits_to_float(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

}  // namespace detail

struct Half {
  uint16_t bits = 0;
  Half() = default;
  constexpr Half(float f) : bits(detail::float_to_half_bits(f)) {}
  static constexpr Half from_bits(uint16_t b) {
    Half h;
    h.bits = b;
    return h;
  }
  constexpr operator float() const { return detail::half_bits_to_float(bits); }
};

struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  constexpr BFloat16(float f) : bits(detail::float_to_bf16_bits(f)) {}
  static constexpr BFloat16 from_bits(uint16_t b) {
    BFloat16 h;
    h.bits = b;
    return h;
  }
  constexpr operator float() const { return detail::bf16_bits_to_float(bits); }
};

}  // namespace stoke
