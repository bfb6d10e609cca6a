// Image decoding and encoding: PNG (libpng), JPEG (libjpeg-turbo) and BMP (stb_image's BMP
// decoder behind a header check) into uint8 HWC pixels, and PNG out (stb_image_write). The format
// comes from the data's signature, not the file name; other formats are refused. Why these
// decoders for untrusted image folders: docs/design-notes.md; fuzzed by fuzz/fuzz_image.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace stoke::data {

// What decode_image accepts and produces.
struct DecodeOptions {
  int64_t max_width = 8192;   // larger images are refused (path + actual size); 0 = no limit
  int64_t max_height = 8192;  // checked from the header, before any pixel is decoded
  int channels = 0;           // 1-4 (converted as stb_image did, e.g. RGB -> luma) or 0 = as stored
};

// Decodes the encoded image in data[0, size) into out.pixels (HWC, uint8) and sets out.height,
// out.width and out.channels; out.label is left alone. `path` is only used in error messages.
// Throws stoke::Error "stoke::decode_image: 'path': ..." naming what was wrong: an unsupported
// format, corrupt or truncated data (the format and its decoder's reason), an image larger than
// the limits, or bad options. Thread-safe.
void decode_image(const uint8_t* data, size_t size, const std::string& path,
                  const DecodeOptions& options, Example& out);

// Reads the whole file at `path` into `bytes` (resized; its capacity is reused). Throws
// stoke::Error naming the path and the OS error.
void read_file_bytes(const std::string& path, std::vector<uint8_t>& bytes);

// Encodes an HWC uint8 image (1-4 channels) as PNG bytes.
std::vector<uint8_t> encode_png(const uint8_t* pixels, int64_t height, int64_t width,
                                int64_t channels);

// Writes `bytes` to `path` atomically: a temporary file in the same directory, then rename, so a
// reader never sees a partial file. With `sync`, the data is fsync'ed before the rename (packed
// shards); without, a crash may lose the file but never leaves a torn one under `path`.
void write_file_atomic(const std::string& path, const uint8_t* bytes, size_t size,
                       bool sync = false);

}  // namespace stoke::data
