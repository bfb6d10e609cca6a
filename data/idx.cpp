#include "data/idx.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

#include "core/error.h"
#include "core/parallel.h"

namespace stoke::data {
namespace {

constexpr const char* kIdxOp = "read_idx";
constexpr int kMaxDims = 8;
// The most that one read()/inflate() call is asked for: zlib counts in 32-bit uInt.
constexpr size_t kMaxChunk = size_t{1} << 30;

template <class... Args>
[[noreturn]] void fail(const std::string& path, const Args&... args) {
  STOKE_FAIL(kIdxOp, "'", path, "': ", args...);
}

std::string hex_byte(uint8_t b) {
  static const char* digits = "0123456789abcdef";
  return std::string("0x") + digits[b >> 4] + digits[b & 15];
}

// A regular file opened for reading; reads are positional so that sniffing the gzip magic does
// not move the raw reader.
class File {
 public:
  explicit File(const std::string& path) : path_(path) {
    // O_NONBLOCK: opening a FIFO would block until a writer came; the regular-file check follows
    // (reads of a regular file ignore the flag).
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd_ < 0) fail(path, "cannot open file: ", std::strerror(errno));
    struct stat st;
    if (::fstat(fd_, &st) != 0) fail(path, "cannot stat file: ", std::strerror(errno));
    if (!S_ISREG(st.st_mode)) fail(path, "not a regular file");
    size_ = static_cast<uint64_t>(st.st_size);
  }
  ~File() { ::close(fd_); }
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  uint64_t size() const { return size_; }

  // Reads up to n bytes at `offset`; fewer only at the end of the file.
  size_t read_at(void* dst, size_t n, uint64_t offset) const {
    size_t got = 0;
    while (got < n) {
      const ssize_t r = ::pread(fd_, static_cast<char*>(dst) + got, std::min(n - got, kMaxChunk),
                                static_cast<off_t>(offset + got));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) fail(path_, "read error: ", std::strerror(errno));
      if (r == 0) break;
      got += static_cast<size_t>(r);
    }
    return got;
  }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// Uncompressed bytes straight from the file.
class RawSource {
 public:
  explicit RawSource(const File& file) : file_(file) {}
  size_t read(uint8_t* dst, size_t n) {
    const size_t got = file_.read_at(dst, n, pos_);
    pos_ += got;
    return got;
  }
  // An upper bound on the bytes left (exact here), checked before allocating the tensor.
  uint64_t max_remaining() const { return file_.size() > pos_ ? file_.size() - pos_ : 0; }
  static constexpr bool kExact = true;
  // Consumes and counts the bytes left.
  uint64_t count_rest() {
    const uint64_t n = max_remaining();
    pos_ += n;
    return n;
  }

 private:
  const File& file_;
  uint64_t pos_ = 0;
};

// Decompressed bytes of an in-memory gzip file, inflated straight into the destination.
// Concatenated gzip members are read as one stream (as gzip -d does); anything else after the
// last member is trailing garbage.
class GzipSource {
 public:
  GzipSource(std::unique_ptr<uint8_t[]> data, uint64_t size, const std::string& path)
      : data_(std::move(data)), size_(size), path_(path) {
    // 15 + 16: a 32 KiB window and a gzip (not zlib) wrapper, whose CRC-32 inflate checks.
    if (inflateInit2(&zs_, 15 + 16) != Z_OK) fail(path_, "zlib initialization failed");
  }
  ~GzipSource() { inflateEnd(&zs_); }
  GzipSource(const GzipSource&) = delete;
  GzipSource& operator=(const GzipSource&) = delete;

  size_t read(uint8_t* dst, size_t n) {
    size_t got = 0;
    while (got < n && !ended_) {
      refill();
      const size_t chunk = std::min(n - got, kMaxChunk);
      zs_.next_out = dst + got;
      zs_.avail_out = static_cast<uInt>(chunk);
      const int ret = inflate(&zs_, Z_NO_FLUSH);
      got += chunk - zs_.avail_out;
      produced_ += chunk - zs_.avail_out;
      if (ret == Z_STREAM_END) {
        refill();
        if (zs_.avail_in == 0) {
          ended_ = true;
        } else if (zs_.avail_in >= 2 && zs_.next_in[0] == 0x1f && zs_.next_in[1] == 0x8b) {
          inflateReset(&zs_);
        } else {
          fail(path_, "corrupt gzip: ", input_left(),
               " bytes of trailing garbage after the end of the gzip stream");
        }
      } else if (ret == Z_BUF_ERROR && zs_.avail_in == 0) {
        fail(path_, "corrupt gzip: truncated compressed stream (the ", size_,
             "-byte file ends before the gzip end-of-stream marker, after ", produced_,
             " decompressed bytes)");
      } else if (ret != Z_OK) {
        fail(path_, "corrupt gzip: ", zs_.msg ? zs_.msg : zError(ret), " (after ", produced_,
             " decompressed bytes)");
      }
    }
    return got;
  }

  // Deflate's best compression ratio is 1032:1, so a header declaring more than this is
  // truncated for sure: checked before allocating what a corrupt header asks for.
  uint64_t max_remaining() const { return input_left() * 1032 + 1024; }
  static constexpr bool kExact = false;
  // The compressed bytes not yet inflated, for the error that max_remaining() bounds.
  uint64_t compressed_left() const { return input_left(); }

  uint64_t count_rest() {
    std::vector<uint8_t> scratch(size_t{1} << 16);
    uint64_t total = 0;
    for (;;) {
      const size_t got = read(scratch.data(), scratch.size());
      total += got;
      if (got < scratch.size()) return total;
    }
  }

 private:
  uint64_t input_left() const { return zs_.avail_in + (size_ - in_pos_); }
  void refill() {
    if (zs_.avail_in != 0 || in_pos_ == size_) return;
    const uint64_t chunk = std::min<uint64_t>(size_ - in_pos_, kMaxChunk);
    zs_.next_in = data_.get() + in_pos_;
    zs_.avail_in = static_cast<uInt>(chunk);
    in_pos_ += chunk;
  }

  std::unique_ptr<uint8_t[]> data_;
  uint64_t size_;
  uint64_t in_pos_ = 0;  // bytes of data_ handed to zlib so far
  std::string path_;
  z_stream zs_{};
  uint64_t produced_ = 0;
  bool ended_ = false;
};

struct ElementType {
  const char* name;  // as the IDX spec calls it
  size_t file_size;  // bytes per element in the file
  DType dtype;       // what it becomes
};

bool element_type(uint8_t code, ElementType* out) {
  switch (code) {
    case 0x08:
      *out = {"u8", 1, DType::u8};
      return true;
    case 0x09:
      *out = {"i8", 1, DType::i32};
      return true;
    case 0x0B:
      *out = {"i16", 2, DType::i32};
      return true;
    case 0x0C:
      *out = {"i32", 4, DType::i32};
      return true;
    case 0x0D:
      *out = {"f32", 4, DType::f32};
      return true;
    case 0x0E:
      *out = {"f64", 8, DType::f64};
      return true;
    default:
      return false;
  }
}

// Byte-swaps n 4- or 8-byte elements in place, over the thread pool (`grain` elements a task).
template <class T>
void byteswap_all(T* p, int64_t n, int64_t grain) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8);
  parallel_for(0, n, grain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      if constexpr (sizeof(T) == 4)
        p[i] = __builtin_bswap32(p[i]);
      else
        p[i] = __builtin_bswap64(p[i]);
    }
  });
}

// Big-endian file elements (already in `out`'s buffer, or in `raw` when they widen) to host
// order, over the thread pool for large files.
void convert(const Tensor& out, const uint8_t* raw, uint8_t code) {
  constexpr bool kSwap = std::endian::native == std::endian::little;
  const int64_t n = out.numel();
  constexpr int64_t kGrain = int64_t{1} << 18;
  switch (code) {
    case 0x09: {
      int32_t* o = out.data<int32_t>();
      parallel_for(0, n, kGrain, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) o[i] = static_cast<int8_t>(raw[i]);
      });
      break;
    }
    case 0x0B: {
      int32_t* o = out.data<int32_t>();
      parallel_for(0, n, kGrain, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i)
          o[i] = static_cast<int16_t>((raw[2 * i] << 8) | raw[2 * i + 1]);
      });
      break;
    }
    case 0x0C:
    case 0x0D:
      if (kSwap) byteswap_all(static_cast<uint32_t*>(out.data_ptr()), n, kGrain);
      break;
    case 0x0E:
      if (kSwap) byteswap_all(static_cast<uint64_t*>(out.data_ptr()), n, kGrain);
      break;
    default:
      break;
  }
}

// MemAvailable from /proc/meminfo in bytes, or 0 when it cannot be read.
uint64_t available_memory_bytes() {
  std::FILE* f = std::fopen("/proc/meminfo", "re");
  if (!f) return 0;
  char line[256];
  unsigned long long kib = 0;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1) break;
  std::fclose(f);
  return static_cast<uint64_t>(kib) * 1024;
}

// An IDX header: the element type and the dims, with the byte counts they imply.
struct Header {
  uint8_t code = 0;
  ElementType type{};
  Shape shape;
  uint64_t count = 1, data_bytes = 0;
  size_t header_bytes = 0;
};

template <class Source>
Header read_header(Source& src, const std::string& path, const char* where) {
  Header h;
  uint8_t head[4 + 4 * kMaxDims];
  size_t got = src.read(head, 4);
  if (got < 4)
    fail(path, "too short for an IDX header: expected at least 4 bytes, found ", got, where);
  if (head[0] != 0 || head[1] != 0)
    fail(path, "bad magic: an IDX file starts with bytes 0x00 0x00, found ", hex_byte(head[0]), " ",
         hex_byte(head[1]), where);
  h.code = head[2];
  if (!element_type(h.code, &h.type))
    fail(path, "unknown IDX element type code ", hex_byte(h.code),
         " (known: 0x08 u8, 0x09 i8, 0x0B i16, 0x0C i32, 0x0D f32, 0x0E f64)");
  const int ndims = head[3];
  if (ndims == 0 || ndims > kMaxDims)
    fail(path, "bad number of dims ", ndims, " in the IDX header (expected 1 to ", kMaxDims, ")");
  h.header_bytes = 4 + 4 * static_cast<size_t>(ndims);
  got = src.read(head + 4, h.header_bytes - 4);
  if (got < h.header_bytes - 4)
    fail(path, "truncated header: ", ndims, " dims need ", h.header_bytes, " header bytes, found ",
         4 + got, where);
  bool overflow = false;
  for (int d = 0; d < ndims; ++d) {
    const uint8_t* p = head + 4 + 4 * d;
    const uint64_t n = (uint64_t{p[0]} << 24) | (uint64_t{p[1]} << 16) | (p[2] << 8) | p[3];
    h.shape.push_back(static_cast<int64_t>(n));
    overflow = overflow || __builtin_mul_overflow(h.count, n, &h.count);
  }
  overflow = overflow || __builtin_mul_overflow(h.count, h.type.file_size, &h.data_bytes) ||
             h.data_bytes > (uint64_t{1} << 62);
  if (overflow)
    fail(path, "absurd size in the IDX header: dims ", h.shape, " of ", h.type.name,
         " overflow a 64-bit byte count");
  return h;
}

template <class Source>
Tensor parse(Source& src, const std::string& path, bool gzipped, uint64_t max_bytes,
             int64_t max_items) {
  const char* where = gzipped ? " (after decompression)" : "";
  const Header h = read_header(src, path, where);
  const uint8_t code = h.code;
  const ElementType type = h.type;
  const Shape& original_shape = h.shape;
  const uint64_t data_bytes = h.data_bytes;
  const size_t header_bytes = h.header_bytes;
  Shape shape = h.shape;
  uint64_t count = h.count;
  size_t got = 0;

  auto truncated = [&](uint64_t found) {
    fail(path, "truncated data: the header declares dims ", original_shape, " of ", type.name,
         ", which need ", data_bytes, " data bytes after the ", header_bytes,
         "-byte header, but only ", found, " are present", where);
  };
  // More than the file can hold fails here, before anything is inflated or allocated: a raw
  // file's bytes are counted exactly; a gzip stream's only bounded (inflating it all to count
  // them took as long as the bomb was big).
  if (data_bytes > src.max_remaining()) {
    if constexpr (Source::kExact) {
      truncated(src.count_rest());
    } else {
      fail(path, "truncated data: the header declares dims ", original_shape, " of ", type.name,
           ", which need ", data_bytes, " data bytes, but the ", src.compressed_left(),
           " compressed bytes left can hold at most ", src.max_remaining(),
           " (deflate compresses at most 1032:1)", where);
    }
  }
  // --limit: only the first max_items entries of the first dim are read.
  const bool limited = max_items > 0 && shape[0] > max_items;
  const uint64_t row = count == 0 ? 0 : count / static_cast<uint64_t>(shape[0]);
  if (limited) {
    shape[0] = max_items;
    count = row * static_cast<uint64_t>(max_items);
  }
  const uint64_t read_bytes = limited ? count * type.file_size : data_bytes;
  // The tensor (and the file-typed copy when elements widen) must fit the memory limit.
  const bool widens = type.file_size != dtype_size(type.dtype);
  uint64_t need = 0;
  if (__builtin_mul_overflow(count, dtype_size(type.dtype), &need) ||
      __builtin_add_overflow(need, widens ? read_bytes : 0, &need))
    need = UINT64_MAX;
  const std::string what =
      limited ? stoke::detail::str_cat("the first ", max_items, " entries of the header's dims ",
                                       original_shape)
              : stoke::detail::str_cat("the header declares dims ", original_shape, " of ",
                                       type.name, ", which");
  const uint64_t limit = max_bytes ? max_bytes : available_memory_bytes();
  if (limit && need > limit)
    fail(path, what, " need ", need, " bytes of memory", where, ", more than the ", limit,
         " bytes ", max_bytes ? "allowed" : "available (MemAvailable)");

  Tensor out = empty(shape, {.dtype = type.dtype});
  const bool widen = type.file_size != dtype_size(type.dtype);
  std::unique_ptr<uint8_t[]> raw;
  uint8_t* dst = static_cast<uint8_t*>(out.data_ptr());
  if (widen) {
    raw.reset(new uint8_t[read_bytes]);
    dst = raw.get();
  }
  got = src.read(dst, read_bytes);
  if (got < read_bytes) {
    if (limited)
      fail(path, "truncated data: ", what, " need ", read_bytes, " data bytes after the ",
           header_bytes, "-byte header, but only ", got, " are present", where);
    truncated(got);
  }
  if (limited) {
    // A raw file's size says at no cost whether the rest is there; a gzip stream's is not read.
    if constexpr (Source::kExact) {
      const uint64_t rest = src.max_remaining();
      if (rest != data_bytes - read_bytes)
        fail(path, rest < data_bytes - read_bytes ? "truncated data" : "trailing bytes",
             ": the header declares dims ", original_shape, " of ", type.name, " = ", data_bytes,
             " data bytes after the ", header_bytes, "-byte header, but the file holds ",
             read_bytes + rest);
    }
    convert(out, raw.get(), code);
    return out;
  }
  const uint64_t extra = src.count_rest();
  if (extra > 0)
    fail(path, "trailing bytes: the header declares dims ", shape, " of ", type.name, " = ",
         data_bytes, " data bytes after the ", header_bytes, "-byte header, but ", extra,
         " extra bytes follow them", where);
  convert(out, raw.get(), code);
  return out;
}

std::string find_file(const std::string& dir, const std::string& name) {
  namespace fs = std::filesystem;
  const fs::path raw = fs::path(dir) / name;
  fs::path gz = raw;
  gz += ".gz";
  std::error_code ec;
  if (fs::exists(raw, ec)) return raw.string();
  if (fs::exists(gz, ec)) return gz.string();
  STOKE_FAIL("load_mnist", "found neither '", raw.string(), "' nor '", gz.string(), "'");
}

}  // namespace

Tensor read_idx(const std::string& path, IdxReadOptions options) {
  File file(path);
  uint8_t magic[2];
  if (file.read_at(magic, 2, 0) == 2 && magic[0] == 0x1f && magic[1] == 0x8b) {
    // One big read of the compressed file, then one inflate pass into the tensor.
    std::unique_ptr<uint8_t[]> data(new uint8_t[file.size()]);
    const size_t got = file.read_at(data.get(), file.size(), 0);
    if (got != file.size())
      fail(path, "file shrank while reading: expected ", file.size(), " bytes, got ", got);
    GzipSource src(std::move(data), got, path);
    return parse(src, path, true, options.max_bytes, options.max_items);
  }
  RawSource src(file);
  return parse(src, path, false, options.max_bytes, options.max_items);
}

Shape read_idx_shape(const std::string& path) {
  File file(path);
  uint8_t magic[2];
  if (file.read_at(magic, 2, 0) == 2 && magic[0] == 0x1f && magic[1] == 0x8b) {
    // The header is the stream's first 36 bytes at most: the first 64 KiB of input hold them.
    const uint64_t size = std::min<uint64_t>(file.size(), uint64_t{1} << 16);
    std::unique_ptr<uint8_t[]> data(new uint8_t[size]);
    const size_t got = file.read_at(data.get(), size, 0);
    GzipSource src(std::move(data), got, path);
    return read_header(src, path, " (after decompression)").shape;
  }
  RawSource src(file);
  return read_header(src, path, "").shape;
}

IdxDataset load_mnist(const std::string& dir, bool train, int64_t limit) {
  const std::string prefix = train ? "train" : "t10k";
  const std::string images_path = find_file(dir, prefix + "-images-idx3-ubyte");
  const std::string labels_path = find_file(dir, prefix + "-labels-idx1-ubyte");
  IdxDataset ds;
  ds.images = read_idx(images_path, {.max_items = limit});
  STOKE_CHECK(ds.images.dtype() == DType::u8 && ds.images.dim() == 3, "load_mnist", "'",
              images_path, "': expected u8 images (N, H, W), got ", ds.images.dtype(), " ",
              ds.images.shape());
  Tensor raw = read_idx(labels_path, {.max_items = limit});
  STOKE_CHECK(raw.dim() == 1 && (raw.dtype() == DType::u8 || raw.dtype() == DType::i32),
              "load_mnist", "'", labels_path, "': expected 1-D u8 or i32 labels, got ", raw.dtype(),
              " ", raw.shape());
  const int64_t n = ds.images.size(0);
  // With a limit, the counts the headers declare are compared (the files are read only so far).
  const int64_t declared_images = limit > 0 ? read_idx_shape(images_path)[0] : n;
  const int64_t declared_labels = limit > 0 ? read_idx_shape(labels_path)[0] : raw.size(0);
  STOKE_CHECK(raw.size(0) == n && declared_images == declared_labels, "load_mnist", "'",
              images_path, "' has ", declared_images, " images but '", labels_path, "' has ",
              declared_labels, " labels");
  ds.labels = empty({n}, {.dtype = DType::i64});
  int64_t* out = ds.labels.data<int64_t>();
  if (raw.dtype() == DType::u8) {
    const uint8_t* in = raw.data<uint8_t>();
    for (int64_t i = 0; i < n; ++i) out[i] = in[i];
  } else {
    const int32_t* in = raw.data<int32_t>();
    for (int64_t i = 0; i < n; ++i) {
      STOKE_CHECK(in[i] >= 0 && in[i] <= 255, "load_mnist", "'", labels_path, "': label ", in[i],
                  " at index ", i, " is outside [0, 255]");
      out[i] = in[i];
    }
  }
  return ds;
}

}  // namespace stoke::data
