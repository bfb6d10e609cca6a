// Image decoding and encoding with stb_image / stb_image_write (Debian's libstb-dev): PNG, JPEG,
// BMP (and what else stb reads) into uint8 HWC pixels, and PNG out. This file's .cpp is the one
// translation unit that compiles stb's implementations; nothing else in stoke includes them.
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
  int channels = 0;           // 1, 3 (stb converts, e.g. RGB -> luma) or 0 = as stored (1-4)
};

// Decodes the encoded image in data[0, size) into out.pixels (HWC, uint8) and sets out.height,
// out.width and out.channels; out.label is left alone. `path` is only used in error messages.
// Throws stoke::Error "stoke::decode_image: 'path': ..." naming what was wrong: unsupported or
// corrupt data (stb's reason), a truncated file, an image larger than the limits, or bad options.
// Thread-safe (stb's failure reason is thread-local).
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
