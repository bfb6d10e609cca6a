#include "data/image_decode.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>

#include "core/error.h"
#include "core/files.h"

#include "data/image_codecs.h"

// stb_image_write encodes the PNGs stoke writes itself (trusted input: decoded pixels). It is
// static to this file so that a test may compile its own copy without duplicate symbols. stb is
// third-party C written for many compilers; its warnings under -Wall -Wextra are not ours to fix.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wall"
#pragma GCC diagnostic ignored "-Wextra"
#pragma GCC diagnostic ignored "-Wconversion"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#define STB_IMAGE_WRITE_STATIC
#define STBI_WRITE_NO_STDIO
#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb/stb_image_write.h>
#pragma GCC diagnostic pop

namespace stoke::data {
namespace {

constexpr const char* kDecode = "decode_image";

enum class Format { png, jpeg, bmp, unknown };

// The format comes from the data, never the file name: a JPEG named .png decodes as a JPEG, and
// a corrupt one reports the JPEG decoder's reason.
Format sniff(const uint8_t* d, size_t n) {
  static constexpr uint8_t kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (n >= 8 && std::memcmp(d, kPng, 8) == 0) return Format::png;
  if (n >= 3 && d[0] == 0xff && d[1] == 0xd8 && d[2] == 0xff) return Format::jpeg;
  if (n >= 2 && d[0] == 'B' && d[1] == 'M') return Format::bmp;
  return Format::unknown;
}

// What an unsupported file looks like, for the error: a known signature's name, else its first
// bytes in hex.
std::string describe_unknown(const uint8_t* d, size_t n) {
  if (n >= 6 && (std::memcmp(d, "GIF87a", 6) == 0 || std::memcmp(d, "GIF89a", 6) == 0))
    return "a GIF";
  if (n >= 12 && std::memcmp(d, "RIFF", 4) == 0 && std::memcmp(d + 8, "WEBP", 4) == 0)
    return "a WebP";
  if (n >= 4 && (std::memcmp(d, "II*", 4) == 0 || std::memcmp(d, "MM\0*", 4) == 0)) return "a TIFF";
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s = "unknown data starting";
  for (size_t i = 0; i < n && i < 8; ++i) {
    s += ' ';
    s += kHex[d[i] >> 4];
    s += kHex[d[i] & 15];
  }
  return s;
}

// Stored channels -> requested channels, with stb_image's rules (the library's behaviour before
// libpng/libjpeg, kept so cached and packed data stay the same): luma = (77 R + 150 G + 29 B) >> 8,
// an added alpha is 255, grey replicates into RGB.
void convert_channels(Example& ex, int want) {
  const int have = static_cast<int>(ex.channels);
  if (want == 0 || want == have) return;
  const size_t n = static_cast<size_t>(ex.height) * static_cast<size_t>(ex.width);
  std::vector<uint8_t>& p = ex.pixels;
  auto luma = [](const uint8_t* s) {
    return static_cast<uint8_t>((s[0] * 77 + s[1] * 150 + s[2] * 29) >> 8);
  };
  // Growing converts from the last pixel down, shrinking from the first up, in place.
  if (want > have) {
    p.resize(n * size_t(want));
    for (size_t i = n; i-- > 0;) {
      const uint8_t* s = p.data() + i * size_t(have);
      uint8_t px[4];
      const uint8_t g = s[0];
      const uint8_t a = (have == 2) ? s[1] : (have == 4 ? s[3] : 255);
      if (have <= 2) {
        px[0] = px[1] = px[2] = g;
      } else {
        px[0] = s[0];
        px[1] = s[1];
        px[2] = s[2];
      }
      px[3] = a;
      uint8_t* d = p.data() + i * size_t(want);
      if (want == 2) {
        d[0] = g;  // only from 1 channel
        d[1] = a;
      } else {
        std::memcpy(d, px, size_t(want == 3 ? 3 : 4));
      }
    }
  } else {
    for (size_t i = 0; i < n; ++i) {
      const uint8_t* s = p.data() + i * size_t(have);
      uint8_t* d = p.data() + i * size_t(want);
      const uint8_t y = have >= 3 ? luma(s) : s[0];
      const uint8_t a = have == 4 ? s[3] : (have == 2 ? s[1] : 255);
      if (want == 1) {
        d[0] = y;
      } else if (want == 2) {
        d[0] = y;
        d[1] = a;
      } else {  // 4 -> 3
        d[0] = s[0];
        d[1] = s[1];
        d[2] = s[2];
      }
    }
    p.resize(n * size_t(want));
  }
  ex.channels = want;
}

}  // namespace

namespace detail {

void check_image_size(int64_t width, int64_t height, const std::string& path,
                      const DecodeOptions& options) {
  STOKE_CHECK((options.max_width <= 0 || width <= options.max_width) &&
                  (options.max_height <= 0 || height <= options.max_height),
              kDecode, "'", path, "': image is ", width, "x", height,
              " (width x height), larger than the maximum ", options.max_width, "x",
              options.max_height);
}

}  // namespace detail

void decode_image(const uint8_t* data, size_t size, const std::string& path,
                  const DecodeOptions& options, Example& out) {
  STOKE_CHECK(options.channels >= 0 && options.channels <= 4, kDecode, "'", path,
              "': expected channels 0 (as stored), 1, 2, 3 or 4, got ", options.channels);
  STOKE_CHECK(size > 0, kDecode, "'", path, "': empty file (0 bytes)");
  switch (sniff(data, size)) {
    case Format::png:
      detail::decode_png(data, size, path, options, out);
      break;
    case Format::jpeg:
      detail::decode_jpeg(data, size, path, options, out);
      break;
    case Format::bmp:
      detail::decode_bmp(data, size, path, options, out);
      break;
    case Format::unknown:
      STOKE_FAIL(kDecode, "'", path, "': cannot decode (", size,
                 " bytes): ", describe_unknown(data, size), ", not a PNG, JPEG or BMP image");
  }
  convert_channels(out, options.channels);
}

void read_file_bytes(const std::string& path, std::vector<uint8_t>& bytes) {
  constexpr const char* kOp = "read_file_bytes";
  // O_NONBLOCK: opening a FIFO would block until a writer came; the regular-file check follows.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) STOKE_FAIL(kOp, "'", path, "': cannot open file: ", std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st;
  if (::fstat(fd, &st) != 0) STOKE_FAIL(kOp, "'", path, "': cannot stat: ", std::strerror(errno));
  STOKE_CHECK(S_ISREG(st.st_mode), kOp, "'", path, "': not a regular file");
  const size_t size = static_cast<size_t>(st.st_size);
  bytes.resize(size);
  size_t got = 0;
  while (got < size) {
    const ssize_t r = ::pread(fd, bytes.data() + got, size - got, static_cast<off_t>(got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) STOKE_FAIL(kOp, "'", path, "': read error: ", std::strerror(errno));
    if (r == 0) break;  // shrank since fstat: keep what is there, the decoder will judge it
    got += static_cast<size_t>(r);
  }
  bytes.resize(got);
}

std::vector<uint8_t> encode_png(const uint8_t* pixels, int64_t height, int64_t width,
                                int64_t channels) {
  STOKE_CHECK(channels >= 1 && channels <= 4 && height > 0 && width > 0 && height < INT_MAX &&
                  width * channels < INT_MAX,
              "encode_png", "expected a non-empty HWC image with 1-4 channels, got ", height, "x",
              width, "x", channels);
  std::vector<uint8_t> png;
  auto append = [](void* ctx, void* data, int size) {
    auto* v = static_cast<std::vector<uint8_t>*>(ctx);
    v->insert(v->end(), static_cast<uint8_t*>(data), static_cast<uint8_t*>(data) + size);
  };
  const int ok = stbi_write_png_to_func(append, &png, static_cast<int>(width),
                                        static_cast<int>(height), static_cast<int>(channels),
                                        pixels, static_cast<int>(width * channels));
  STOKE_CHECK(ok, "encode_png", "stb_image_write failed for a ", height, "x", width, "x", channels,
              " image");
  return png;
}

void write_file_atomic(const std::string& path, const uint8_t* bytes, size_t size, bool sync) {
  constexpr const char* kOp = "write_file_atomic";
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  // Opened without blocking: a FIFO left at the temporary name is refused, not waited on.
  const int fd = open_output_file(tmp, O_TRUNC, kOp, "temporary file");
  size_t done = 0;
  while (done < size) {
    const ssize_t r = ::write(fd, bytes + done, size - done);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      STOKE_FAIL(kOp, "'", tmp, "': write error: ", std::strerror(err));
    }
    done += static_cast<size_t>(r);
  }
  if (sync && ::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    STOKE_FAIL(kOp, "'", tmp, "': fsync failed: ", std::strerror(err));
  }
  if (::close(fd) != 0) {
    ::unlink(tmp.c_str());
    STOKE_FAIL(kOp, "'", tmp, "': close failed: ", std::strerror(errno));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    STOKE_FAIL(kOp, "cannot rename '", tmp, "' to '", path, "': ", std::strerror(err));
  }
}

}  // namespace stoke::data
