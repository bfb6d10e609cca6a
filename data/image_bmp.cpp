// BMP through stb_image (Debian's libstb-dev, 2.27), compiled here with only its BMP decoder, and
// only after this file has checked the header stb trusts: stb 2.27 negates the height without a
// check (INT_MIN overflows) and reads past the end as zeros (a truncated file decodes silently).
// No maintained BMP library is packaged in Debian; the format is simple enough to bound here.
#include <climits>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "core/error.h"
#include "data/image_codecs.h"

// stb is third-party C written for many compilers; its warnings under -Wall -Wextra are not ours
// to fix. STB_IMAGE_STATIC: tests may compile their own copy without duplicate symbols.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wall"
#pragma GCC diagnostic ignored "-Wextra"
#pragma GCC diagnostic ignored "-Wconversion"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wunused-but-set-variable"
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#ifndef __clang__  // GCC only (the fuzz build is clang)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#define STBI_NO_STDIO
#define STBI_ONLY_BMP
#define STBI_FAILURE_USERMSG
#define STB_IMAGE_STATIC
#define STB_IMAGE_IMPLEMENTATION
#include <stb/stb_image.h>
#pragma GCC diagnostic pop

namespace stoke::data::detail {
namespace {

uint32_t u16(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8;
}
uint32_t u32(const uint8_t* p) {
  return u16(p) | u16(p + 2) << 16;
}

struct StbFree {
  void operator()(stbi_uc* p) const { stbi_image_free(p); }
};

}  // namespace

void decode_bmp(const uint8_t* data, size_t size, const std::string& path,
                const DecodeOptions& options, Example& out) {
  auto bad = [&](const auto&... what) {
    STOKE_FAIL("decode_image", "'", path, "': cannot decode BMP (", size, " bytes): ", what...);
  };
  if (size < 26) bad("truncated header");
  const uint32_t offset = u32(data + 10), hsz = u32(data + 14);
  if (hsz != 12 && hsz != 40 && hsz != 56 && hsz != 108 && hsz != 124)
    bad("unsupported header size ", hsz, " (expected 12, 40, 56, 108 or 124)");
  if (size < 14 + size_t(hsz)) bad("truncated header (", hsz, "-byte DIB header)");
  int64_t width, height;
  uint32_t planes, bpp, compression = 0;
  if (hsz == 12) {
    width = u16(data + 18);
    height = u16(data + 20);
    planes = u16(data + 22);
    bpp = u16(data + 24);
  } else {
    width = static_cast<int32_t>(u32(data + 18));
    height = static_cast<int32_t>(u32(data + 22));  // negative: rows stored top-down
    planes = u16(data + 26);
    bpp = u16(data + 28);
    compression = u32(data + 30);
  }
  if (width <= 0 || height == 0)
    bad("image is ", width, "x", height, " (width x height): no pixels");
  if (planes != 1) bad(planes, " planes (expected 1)");
  if (bpp != 1 && bpp != 4 && bpp != 8 && bpp != 16 && bpp != 24 && bpp != 32)
    bad(bpp, " bits per pixel (expected 1, 4, 8, 16, 24 or 32)");
  if (compression == 1 || compression == 2) bad("RLE compression is not supported");
  if (compression != 0 && !(compression == 3 && (bpp == 16 || bpp == 32)))
    bad("compression ", compression,
        " is not supported (expected none, or bitfields at 16/32 bits)");
  const int64_t rows = height < 0 ? -height : height;  // height is an int32: no overflow here
  check_image_size(width, rows, path, options);
  // Bitfield masks follow a 40-byte header; the pixel array must start after the headers and
  // lie wholly inside the file (rows padded to 4 bytes).
  const size_t headers = 14 + size_t(hsz) + (hsz == 40 && compression == 3 ? 12 : 0);
  const size_t stride = (size_t(width) * bpp + 31) / 32 * 4;
  if (offset < headers || offset > size)
    bad("pixel data offset ", offset, " outside [", headers, ", ", size, "]");
  if (stride * size_t(rows) > size - offset)
    bad("truncated pixel data (", size - offset, " bytes from offset ", offset, ", ",
        stride * size_t(rows), " needed for ", width, "x", rows, " at ", bpp, " bits)");
  // Past the checks the size fits stb's int (at most 8192 x 8192 x 4 bytes under the default
  // limits; a file bigger than INT_MAX is refused).
  if (size > static_cast<size_t>(INT_MAX)) bad("file larger than ", INT_MAX, " bytes");
  int w = 0, h = 0, c = 0;
  std::unique_ptr<stbi_uc, StbFree> pixels(
      stbi_load_from_memory(data, static_cast<int>(size), &w, &h, &c, 0));
  if (!pixels) bad(stbi_failure_reason() ? stbi_failure_reason() : "unknown reason");
  const size_t n = size_t(w) * size_t(h) * size_t(c);
  out.pixels.resize(n);
  std::memcpy(out.pixels.data(), pixels.get(), n);
  out.height = h;
  out.width = w;
  out.channels = c;
}

}  // namespace stoke::data::detail
