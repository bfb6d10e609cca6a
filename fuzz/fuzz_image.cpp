// libFuzzer harness: data::decode_image (data/image_decode.h), the decoder of untrusted image
// folders: PNG (libpng), JPEG (libjpeg-turbo), BMP (stb behind a header check). Byte 0 picks the
// requested channels (0-4, as stoke-train's --channels and the loaders pass them); the rest is the
// file. Limits 1024x1024 keep each execution short (the checks are the same at any limit). A
// decoded image must have exactly height x width x channels bytes.
#include "core/error.h"
#include "data/image_decode.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int channels = data[0] % 5;
  stoke::data::Example ex;
  try {
    stoke::data::decode_image(data + 1, size - 1, "fuzz-input",
                              {.max_width = 1024, .max_height = 1024, .channels = channels}, ex);
  } catch (const stoke::Error&) {
    return 0;
  }
  if (ex.height <= 0 || ex.width <= 0 || ex.channels < 1 || ex.channels > 4 ||
      (channels != 0 && ex.channels != channels) ||
      ex.pixels.size() != static_cast<size_t>(ex.height * ex.width * ex.channels))
    std::abort();
  return 0;
}
