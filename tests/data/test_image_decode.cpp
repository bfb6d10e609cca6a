// decode_image on crafted and damaged files: the reproductions of issue 14 (a JPEG Huffman table
// of more than 256 symbols, a BMP of height INT_MIN: stb_image 2.27 wrote out of bounds / negated
// INT_MIN), truncations, format detection from the data, and the channel conversions against an
// independent reference (stb_image's rules, which the library keeps).
#include <algorithm>
#include <catch2/catch.hpp>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <jpeglib.h>

#include "data/image_decode.h"
#include "stoke/stoke.h"

// The test's own encoder (static: test_image_folder.cpp compiles another copy).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wall"
#pragma GCC diagnostic ignored "-Wextra"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#define STB_IMAGE_WRITE_STATIC
#define STBI_WRITE_NO_STDIO
#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb/stb_image_write.h>
#pragma GCC diagnostic pop

using namespace stoke;
using Catch::Contains;
using Bytes = std::vector<uint8_t>;

namespace {

void append(void* ctx, void* data, int size) {
  auto* v = static_cast<Bytes*>(ctx);
  v->insert(v->end(), static_cast<uint8_t*>(data), static_cast<uint8_t*>(data) + size);
}

Bytes pattern(int h, int w, int c) {
  Bytes b(static_cast<size_t>(h * w * c));
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(i * 29 + 7);
  return b;
}

Bytes png(const Bytes& px, int h, int w, int c) {
  Bytes out;
  REQUIRE(stbi_write_png_to_func(append, &out, w, h, c, px.data(), w * c) != 0);
  return out;
}

Bytes jpeg(const Bytes& px, int h, int w, int c) {
  Bytes out;
  REQUIRE(stbi_write_jpg_to_func(append, &out, w, h, c, px.data(), 95) != 0);
  return out;
}

// A JPEG from libjpeg itself in a colour space stb_image_write cannot write (grey: 1 component,
// CMYK: 4, with the Adobe marker libjpeg adds), at quality 100.
Bytes libjpeg_encode(const Bytes& px, int h, int w, J_COLOR_SPACE space, int comps) {
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* mem = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &mem, &size);
  c.image_width = JDIMENSION(w);
  c.image_height = JDIMENSION(h);
  c.input_components = comps;
  c.in_color_space = space;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, 100, TRUE);
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(px.data()) + size_t(c.next_scanline) * size_t(w * comps);
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  Bytes out(mem, mem + size);
  std::free(mem);
  return out;
}

data::Example decode(const Bytes& file, data::DecodeOptions options = {}) {
  data::Example ex;
  data::decode_image(file.data(), file.size(), "dir/x.img", options, ex);
  return ex;
}

// A 40-byte-header, 24-bit BMP of the given size with `pixel_bytes` of pixel data.
Bytes bmp(int32_t width, int32_t height, size_t pixel_bytes) {
  Bytes b(54 + pixel_bytes, 0);
  auto put = [&](size_t at, uint32_t v, int n) {
    for (int i = 0; i < n; ++i) b[at + size_t(i)] = uint8_t(v >> (8 * i));
  };
  b[0] = 'B';
  b[1] = 'M';
  put(2, uint32_t(b.size()), 4);
  put(10, 54, 4);
  put(14, 40, 4);
  put(18, uint32_t(width), 4);
  put(22, uint32_t(height), 4);
  put(26, 1, 2);
  put(28, 24, 2);
  for (size_t i = 54; i < b.size(); ++i) b[i] = uint8_t(i);
  return b;
}

// stb_image's conversion of one pixel from `have` to `want` channels, written out per case.
Bytes reference_convert(const Bytes& px, int have, int want) {
  Bytes out;
  for (size_t i = 0; i < px.size(); i += size_t(have)) {
    const uint8_t* s = &px[i];
    const int r = s[0], g = have >= 3 ? s[1] : s[0], b = have >= 3 ? s[2] : s[0];
    const int a = have == 2 ? s[1] : have == 4 ? s[3] : 255;
    const int y = have >= 3 ? (r * 77 + g * 150 + b * 29) >> 8 : r;
    switch (want) {
      case 1:
        out.push_back(uint8_t(y));
        break;
      case 2:
        out.insert(out.end(), {uint8_t(y), uint8_t(a)});
        break;
      case 3:
        out.insert(out.end(), {uint8_t(r), uint8_t(g), uint8_t(b)});
        break;
      case 4:
        out.insert(out.end(), {uint8_t(r), uint8_t(g), uint8_t(b), uint8_t(a)});
        break;
    }
  }
  return out;
}

}  // namespace

TEST_CASE("decode_image refuses a JPEG whose Huffman table holds more than 256 symbols") {
  // The reproduction: a DHT segment whose 16 code-length counts sum to 257, before the scan.
  const Bytes good = jpeg(pattern(16, 16, 3), 16, 16, 3);
  const data::Example ok = decode(good);
  CHECK(ok.height == 16);
  CHECK(ok.width == 16);
  CHECK(ok.channels == 3);
  Bytes seg = {0x00};
  for (int i = 0; i < 14; ++i) seg.push_back(0);
  seg.push_back(2);
  seg.push_back(255);
  for (int i = 0; i < 257; ++i) seg.push_back(uint8_t(i));
  Bytes dht = {0xff, 0xc4, uint8_t((seg.size() + 2) >> 8), uint8_t(seg.size() + 2)};
  dht.insert(dht.end(), seg.begin(), seg.end());
  Bytes bad = good;
  const uint8_t sos[2] = {0xff, 0xda};
  const auto at = std::search(bad.begin(), bad.end(), sos, sos + 2);
  REQUIRE(at != bad.end());
  bad.insert(at, dht.begin(), dht.end());
  CHECK_THROWS_WITH(decode(bad), Contains("'dir/x.img'") && Contains("cannot decode JPEG") &&
                                     Contains("Bogus Huffman table definition"));
}

TEST_CASE("decode_image refuses a BMP of height INT_MIN and truncated BMP pixel data") {
  // The reproduction: stb_image 2.27 computed abs(INT_MIN).
  const Bytes int_min = bmp(1, INT_MIN, 4);
  CHECK_THROWS_WITH(decode(int_min), Contains("'dir/x.img'") &&
                                         Contains("image is 1x2147483648 (width x height)") &&
                                         Contains("larger than the maximum 8192x8192"));
  CHECK_THROWS_WITH(decode(int_min, {.max_width = 0, .max_height = 0}),
                    Contains("cannot decode BMP") && Contains("truncated pixel data (4 bytes"));
  // 3x2 at 24 bits: rows of 9 bytes padded to 12; bottom-up and top-down both decode.
  const data::Example up = decode(bmp(3, 2, 24));
  const data::Example down = decode(bmp(3, -2, 24));
  REQUIRE(up.pixels.size() == 18);
  CHECK(up.channels == 3);
  CHECK(up.height == 2);
  // BMP rows are BGR; the file's first row is the bottom one unless the height is negative.
  CHECK(up.pixels[0] == 54 + 12 + 2);
  CHECK(up.pixels[2] == 54 + 12);
  CHECK(down.pixels[0] == 54 + 2);
  CHECK_THROWS_WITH(decode(bmp(3, 2, 23)),
                    Contains("cannot decode BMP") && Contains("truncated pixel data (23 bytes"));
  CHECK_THROWS_WITH(decode(bmp(0, 2, 24)), Contains("image is 0x2") && Contains("no pixels"));
  Bytes rle = bmp(3, 2, 24);
  rle[30] = 1;
  CHECK_THROWS_WITH(decode(rle), Contains("RLE compression is not supported"));
  Bytes bpp = bmp(3, 2, 24);
  bpp[28] = 7;
  CHECK_THROWS_WITH(decode(bpp), Contains("7 bits per pixel"));
}

TEST_CASE("decode_image picks the decoder from the data and reports its reason") {
  const Bytes jpg = jpeg(pattern(8, 8, 3), 8, 8, 3);
  // A truncated JPEG is an error naming the format (it was reported as "Not a PNG"), never
  // pixels libjpeg filled with grey.
  const Bytes cut(jpg.begin(), jpg.begin() + long(jpg.size() * 2 / 3));
  CHECK_THROWS_WITH(decode(cut), Contains("'dir/x.img'") && Contains("cannot decode JPEG") &&
                                     Contains("Premature end of JPEG file") && !Contains("PNG"));
  const Bytes header_only(jpg.begin(), jpg.begin() + 4);
  CHECK_THROWS_WITH(decode(header_only), Contains("cannot decode JPEG"));
  const Bytes p = png(pattern(5, 7, 3), 5, 7, 3);
  Bytes broken = p;
  broken[broken.size() - 14] ^= 0xff;  // IDAT's CRC (the last 12 bytes are IEND)
  CHECK_THROWS_WITH(decode(broken), Contains("cannot decode PNG") && Contains("CRC error"));
  const Bytes half(p.begin(), p.begin() + long(p.size() / 2));
  CHECK_THROWS_WITH(decode(half), Contains("cannot decode PNG"));
  CHECK_THROWS_WITH(decode(Bytes{}), Contains("empty file"));
  // Size limits apply from the header, per format.
  CHECK_THROWS_WITH(decode(jpg, {.max_width = 7}),
                    Contains("image is 8x8") && Contains("larger than the maximum 7x8192"));
  CHECK_THROWS_WITH(decode(p, {.max_height = 4}),
                    Contains("image is 7x5") && Contains("larger than the maximum 8192x4"));
}

TEST_CASE("decode_image decodes PNG and JPEG at every stored and requested channel count") {
  for (int have = 1; have <= 4; ++have) {
    const Bytes px = pattern(5, 6, have);
    const Bytes file = png(px, 5, 6, have);
    for (int want = 0; want <= 4; ++want) {
      CAPTURE(have, want);
      const data::Example ex = decode(file, {.channels = want});
      CHECK(ex.height == 5);
      CHECK(ex.width == 6);
      CHECK(ex.channels == (want ? want : have));
      CHECK(ex.pixels == (want ? reference_convert(px, have, want) : px));
    }
  }
  // A grey JPEG is one channel as stored. At quality 100 (quantizer 1) a flat block's only
  // coefficient, its DC, survives exactly; the decoder's integer IDCT rounds to within a level.
  const data::Example grey = decode(libjpeg_encode(Bytes(8 * 8, 90), 8, 8, JCS_GRAYSCALE, 1));
  REQUIRE(grey.channels == 1);
  REQUIRE(grey.pixels.size() == 64);
  for (uint8_t v : grey.pixels) CHECK(std::abs(int(v) - 90) <= 1);
  // CMYK (stored inverted, as Adobe writes it) comes back as RGB = C*K/255, ...; a flat colour.
  Bytes cmyk;
  for (int i = 0; i < 64; ++i) cmyk.insert(cmyk.end(), {255, 0, 128, 128});
  const data::Example rgb = decode(libjpeg_encode(cmyk, 8, 8, JCS_CMYK, 4));
  REQUIRE(rgb.channels == 3);
  REQUIRE(rgb.pixels.size() == 64 * 3);
  // The IDCT's level, and one more from rounding C * K / 255 to an integer.
  for (size_t i = 0; i < rgb.pixels.size(); i += 3) {
    CHECK(std::abs(int(rgb.pixels[i]) - 128) <= 2);
    CHECK(int(rgb.pixels[i + 1]) <= 2);
    CHECK(std::abs(int(rgb.pixels[i + 2]) - 64) <= 2);
  }
}
