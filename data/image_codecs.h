// The per-format decoders behind decode_image (data/image_decode.h); internal to stoke_data.
// Each decodes an image of its format into out.pixels at the channel count stored in the file
// (1 grey, 2 grey+alpha, 3 RGB, 4 RGBA), sets out.height/width/channels, refuses an image
// larger than options' limits from its header before decoding any pixel, and throws
// stoke::Error "stoke::decode_image: 'path': cannot decode <FORMAT> (N bytes): <reason>".
// Why these decoders (libpng, libjpeg-turbo, stb only for header-checked BMP):
// docs/design-notes.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "data/image_decode.h"

namespace stoke::data::detail {

void decode_png(const uint8_t* data, size_t size, const std::string& path,
                const DecodeOptions& options, Example& out);
void decode_jpeg(const uint8_t* data, size_t size, const std::string& path,
                 const DecodeOptions& options, Example& out);
void decode_bmp(const uint8_t* data, size_t size, const std::string& path,
                const DecodeOptions& options, Example& out);

// Refuses w x h when it exceeds options' limits (0 = no limit), naming the path and both sizes.
void check_image_size(int64_t width, int64_t height, const std::string& path,
                      const DecodeOptions& options);

}  // namespace stoke::data::detail
