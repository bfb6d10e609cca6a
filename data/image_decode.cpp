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

// stb's implementations, compiled once here. stb is third-party C written for many compilers;
// its warnings under -Wall -Wextra are not ours to fix. stb_image_write is static to this file so
// that a test may compile its own copy without duplicate symbols.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wall"
#pragma GCC diagnostic ignored "-Wextra"
#pragma GCC diagnostic ignored "-Wconversion"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wunused-but-set-variable"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define STBI_NO_STDIO  // every decode goes through memory: one path for files and the cache
#define STBI_FAILURE_USERMSG
#define STB_IMAGE_IMPLEMENTATION
#include <stb/stb_image.h>
#define STB_IMAGE_WRITE_STATIC
#define STBI_WRITE_NO_STDIO
#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb/stb_image_write.h>
#pragma GCC diagnostic pop

namespace stoke::data {
namespace {

constexpr const char* kDecode = "decode_image";

struct StbFree {
  void operator()(stbi_uc* p) const { stbi_image_free(p); }
};

}  // namespace

void decode_image(const uint8_t* data, size_t size, const std::string& path,
                  const DecodeOptions& options, Example& out) {
  STOKE_CHECK(options.channels >= 0 && options.channels <= 4, kDecode, "'", path,
              "': expected channels 0 (as stored), 1, 2, 3 or 4, got ", options.channels);
  STOKE_CHECK(size > 0, kDecode, "'", path, "': empty file (0 bytes)");
  STOKE_CHECK(size <= static_cast<size_t>(INT_MAX), kDecode, "'", path, "': file of ", size,
              " bytes is larger than stb_image's limit of ", INT_MAX, " bytes");
  const int len = static_cast<int>(size);
  int w = 0, h = 0, stored = 0;
  // The header alone gives the size, so an oversized image is refused before it is decoded.
  if (!stbi_info_from_memory(data, len, &w, &h, &stored))
    STOKE_FAIL(kDecode, "'", path, "': cannot decode (", size,
               " bytes): ", stbi_failure_reason() ? stbi_failure_reason() : "unknown reason");
  STOKE_CHECK((options.max_width <= 0 || w <= options.max_width) &&
                  (options.max_height <= 0 || h <= options.max_height),
              kDecode, "'", path, "': image is ", w, "x", h,
              " (width x height), larger than the maximum ", options.max_width, "x",
              options.max_height);
  int got_channels = 0;
  std::unique_ptr<stbi_uc, StbFree> pixels(
      stbi_load_from_memory(data, len, &w, &h, &got_channels, options.channels));
  if (!pixels)
    STOKE_FAIL(kDecode, "'", path, "': cannot decode (", size, " bytes, ", w, "x", h,
               "): ", stbi_failure_reason() ? stbi_failure_reason() : "unknown reason");
  const int c = options.channels ? options.channels : got_channels;
  const size_t n = static_cast<size_t>(w) * static_cast<size_t>(h) * static_cast<size_t>(c);
  // stb allocates its own result; one copy into the reused buffer keeps the worker loop free of
  // allocation once out.pixels has grown to the largest image.
  out.pixels.resize(n);
  std::memcpy(out.pixels.data(), pixels.get(), n);
  out.height = h;
  out.width = w;
  out.channels = c;
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
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) STOKE_FAIL(kOp, "'", tmp, "': cannot create: ", std::strerror(errno));
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
