// PNG through libpng's simplified API (png_image_*): libpng is maintained, fuzzed by OSS-Fuzz, and
// its simplified API keeps the setjmp/longjmp error handling inside libpng (errors come back as
// image.message), so no C++ frame is ever jumped over.
#include <png.h>

#include <vector>

#include "core/error.h"
#include "data/image_codecs.h"

namespace stoke::data::detail {
namespace {

// Frees the png_image's internal state on every exit (a no-op after libpng freed it itself).
struct PngImage {
  png_image image{};
  PngImage() { image.version = PNG_IMAGE_VERSION; }
  ~PngImage() { png_image_free(&image); }
  PngImage(const PngImage&) = delete;
  PngImage& operator=(const PngImage&) = delete;
};

}  // namespace

void decode_png(const uint8_t* data, size_t size, const std::string& path,
                const DecodeOptions& options, Example& out) {
  PngImage png;
  if (!png_image_begin_read_from_memory(&png.image, data, size))
    STOKE_FAIL("decode_image", "'", path, "': cannot decode PNG (", size,
               " bytes): ", png.image.message);
  check_image_size(png.image.width, png.image.height, path, options);
  // 8-bit samples at the stored layout: grey, grey+alpha, RGB or RGBA (a palette becomes RGB, or
  // RGBA with a tRNS chunk; 16-bit samples are scaled to 8 bits).
  png.image.format &= PNG_FORMAT_FLAG_ALPHA | PNG_FORMAT_FLAG_COLOR;
  const int channels = static_cast<int>(PNG_IMAGE_SAMPLE_CHANNELS(png.image.format));
  out.pixels.resize(PNG_IMAGE_SIZE(png.image));
  if (!png_image_finish_read(&png.image, nullptr, out.pixels.data(), 0, nullptr))
    STOKE_FAIL("decode_image", "'", path, "': cannot decode PNG (", size, " bytes, ",
               png.image.width, "x", png.image.height, "): ", png.image.message);
  out.height = png.image.height;
  out.width = png.image.width;
  out.channels = channels;
}

}  // namespace stoke::data::detail
