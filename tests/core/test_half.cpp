#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

#include "core/half.h"

using stoke::BFloat16;
using stoke::Half;

TEST_CASE("f16: known bit patterns", "[core][half]") {
  CHECK(Half(1.0f).bits == 0x3c00);
  CHECK(Half(-2.0f).bits == 0xc000);
  CHECK(Half(65504.0f).bits == 0x7bff);  // largest finite
  CHECK(Half(65520.0f).bits == 0x7c00);  // rounds up to inf
  CHECK(Half(65519.0f).bits == 0x7bff);  // rounds down to max
  CHECK(Half(std::numeric_limits<float>::infinity()).bits == 0x7c00);
  CHECK(Half(-std::numeric_limits<float>::infinity()).bits == 0xfc00);
  CHECK((Half(std::nanf("")).bits & 0x7c00) == 0x7c00);
  CHECK((Half(std::nanf("")).bits & 0x03ff) != 0);
  CHECK(Half(0x1p-24f).bits == 0x0001);    // smallest subnormal
  CHECK(Half(0x1p-25f).bits == 0x0000);    // tie -> even (0)
  CHECK(Half(0x1.8p-25f).bits == 0x0001);  // above the tie -> up
  CHECK(Half(0x3p-25f).bits == 0x0002);    // 1.5 ulp tie -> even (2)
  CHECK(Half(0x1p-14f).bits == 0x0400);    // smallest normal
  CHECK(Half(-0.0f).bits == 0x8000);
  // Round to nearest even between 1 and 1 + 2^-10.
  CHECK(Half(1.0f + 0x1p-11f).bits == 0x3c00);             // tie -> even
  CHECK(Half(1.0f + 3 * 0x1p-11f).bits == 0x3c02);         // tie -> even (up)
  CHECK(Half(1.0f + 0x1p-11f + 0x1p-20f).bits == 0x3c01);  // above tie
}

TEST_CASE("f16: decoding and round trips", "[core][half]") {
  CHECK(float(Half::from_bits(0x0001)) == 0x1p-24f);
  CHECK(float(Half::from_bits(0x03ff)) == 0x3ffp-24f);
  CHECK(float(Half::from_bits(0x7bff)) == 65504.0f);
  CHECK(std::isinf(float(Half::from_bits(0x7c00))));
  CHECK(std::isnan(float(Half::from_bits(0x7e00))));
  CHECK(std::signbit(float(Half::from_bits(0x8000))));
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const Half h = Half::from_bits(static_cast<uint16_t>(b));
    const float f = h;
    if (std::isnan(f)) continue;
    REQUIRE(Half(f).bits == b);  // every finite half and inf round-trips exactly
  }
}

TEST_CASE("bf16: known bit patterns and rounding", "[core][half]") {
  CHECK(BFloat16(1.0f).bits == 0x3f80);
  CHECK(BFloat16(-1.0f).bits == 0xbf80);
  CHECK(BFloat16(std::numeric_limits<float>::infinity()).bits == 0x7f80);
  CHECK((BFloat16(std::nanf("")).bits & 0x7f80) == 0x7f80);
  CHECK((BFloat16(std::nanf("")).bits & 0x007f) != 0);
  CHECK(BFloat16(1.0f + 0x1p-8f).bits == 0x3f80);             // tie -> even
  CHECK(BFloat16(1.0f + 3 * 0x1p-8f).bits == 0x3f82);         // tie -> even (up)
  CHECK(BFloat16(1.0f + 0x1p-8f + 0x1p-20f).bits == 0x3f81);  // above tie
  CHECK(BFloat16(0x1p-133f).bits == 0x0001);                  // float subnormal kept
  CHECK(BFloat16(3.4028235e38f).bits == 0x7f80);              // max float rounds to inf
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float f = BFloat16::from_bits(static_cast<uint16_t>(b));
    if (std::isnan(f)) continue;
    REQUIRE(BFloat16(f).bits == b);
  }
}
