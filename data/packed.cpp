#include "data/packed.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <sstream>

#include "core/error.h"
#include "core/parallel.h"
#include "data/image_decode.h"

namespace stoke::data {
namespace {

namespace fs = std::filesystem;
constexpr const char* kPack = "pack_dataset";
constexpr const char* kOpen = "PackedDataset";
constexpr char kIndexMagic[8] = {'S', 'T', 'K', 'P', 'I', 'D', 'X', '\0'};
constexpr char kShardMagic[8] = {'S', 'T', 'K', 'S', 'H', 'R', 'D', '\0'};
constexpr uint32_t kVersion = 1;
constexpr size_t kIndexHeader = 64;
constexpr size_t kShardHeader = 64;
constexpr int64_t kLabelBytes = 4;

// Little-endian integers, written and read byte by byte so the format does not depend on the
// host.
void put_le(std::vector<uint8_t>& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void store_le(uint8_t* p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t load_le(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Sets the pool size for a scope and restores it.
struct ThreadScope {
  int saved = 0;
  explicit ThreadScope(int n) {
    if (n > 0 && n != num_threads()) {
      saved = num_threads();
      set_num_threads(n);
    }
  }
  ~ThreadScope() {
    if (saved) set_num_threads(saved);
  }
};

// A bounds-checked cursor over the index bytes.
struct Reader {
  const std::vector<uint8_t>& b;
  size_t pos;
  const std::string& path;
  uint64_t take(int bytes, const char* what) {
    STOKE_CHECK(pos + static_cast<size_t>(bytes) <= b.size(), kOpen, "'", path,
                "': truncated index: ", what, " at byte ", pos, " runs past the end (", b.size(),
                " bytes)");
    const uint64_t v = load_le(b.data() + pos, bytes);
    pos += static_cast<size_t>(bytes);
    return v;
  }
};

}  // namespace

std::string packed_index_path(const std::string& dir) {
  return (fs::path(dir) / "pack.index").string();
}

std::string packed_shard_path(const std::string& dir, int64_t shard) {
  std::ostringstream name;
  name << "shard-" << std::setw(5) << std::setfill('0') << shard << ".bin";
  return (fs::path(dir) / name.str()).string();
}

uint32_t crc32_parallel(const uint8_t* data, size_t size) {
  constexpr int64_t kChunk = int64_t{1} << 20;
  const int64_t chunks = (static_cast<int64_t>(size) + kChunk - 1) / kChunk;
  if (chunks <= 1) return static_cast<uint32_t>(crc32(0L, data, static_cast<uInt>(size)));
  std::vector<uLong> crcs(static_cast<size_t>(chunks));
  parallel_for(0, chunks, 1, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c) {
      const size_t begin = static_cast<size_t>(c * kChunk);
      const size_t len = std::min(size - begin, static_cast<size_t>(kChunk));
      crcs[static_cast<size_t>(c)] = crc32(0L, data + begin, static_cast<uInt>(len));
    }
  });
  uLong crc = crcs[0];
  for (int64_t c = 1; c < chunks; ++c) {
    const size_t begin = static_cast<size_t>(c * kChunk);
    const size_t len = std::min(size - begin, static_cast<size_t>(kChunk));
    crc = crc32_combine(crc, crcs[static_cast<size_t>(c)], static_cast<z_off_t>(len));
  }
  return static_cast<uint32_t>(crc);
}

PackResult pack_dataset(const Dataset& dataset, const std::string& out_dir, PackOptions options) {
  const auto start = std::chrono::steady_clock::now();
  ThreadScope threads(options.threads);
  const int64_t n = dataset.size();
  const int64_t num_classes = dataset.num_classes();
  STOKE_CHECK(n > 0, kPack, "the dataset is empty: nothing to pack into '", out_dir, "'");
  STOKE_CHECK(num_classes > 0 && num_classes <= INT32_MAX, kPack,
              "expected num_classes in [1, 2^31), got ", num_classes);
  STOKE_CHECK(
      options.height >= 0 && options.width >= 0 && (options.height > 0) == (options.width > 0),
      kPack, "expected height and width both > 0 or both 0 (the first sample's size), got ",
      options.height, "x", options.width);
  STOKE_CHECK(options.shard_bytes > 0, kPack, "expected shard_bytes > 0, got ",
              options.shard_bytes);

  Example first;
  dataset.get(0, first);
  const int64_t h = options.height ? options.height : first.height;
  const int64_t w = options.width ? options.width : first.width;
  const int64_t c = first.channels;
  STOKE_CHECK(h > 0 && w > 0 && c > 0 && h <= INT32_MAX && w <= INT32_MAX, kPack,
              dataset.describe(0), ": bad first sample size ", first.height, "x", first.width, "x",
              first.channels);
  const int64_t pixel_bytes = h * w * c;
  const int64_t record_bytes = pixel_bytes + kLabelBytes;
  const int64_t per_shard = std::max<int64_t>(1, options.shard_bytes / record_bytes);
  const int64_t num_shards = (n + per_shard - 1) / per_shard;
  std::vector<std::string> names = dataset.class_names();
  if (static_cast<int64_t>(names.size()) != num_classes) names.clear();

  fs::create_directories(out_dir);
  const std::string index_path = packed_index_path(out_dir);
  fs::remove(index_path);  // a reader now finds no pack rather than a half-replaced one

  PackResult result{.records = n, .shards = num_shards};
  std::vector<uint8_t> buffer;
  std::vector<uint32_t> crcs(static_cast<size_t>(num_shards));
  for (int64_t s = 0; s < num_shards; ++s) {
    const int64_t begin = s * per_shard;
    const int64_t count = std::min(per_shard, n - begin);
    buffer.assign(kShardHeader + static_cast<size_t>(count * record_bytes), 0);
    uint8_t* records = buffer.data() + kShardHeader;
    parallel_for(0, count, 32, [&](int64_t b, int64_t e) {
      thread_local Example ex;
      thread_local std::vector<uint8_t> fitted;
      for (int64_t r = b; r < e; ++r) {
        const int64_t i = begin + r;
        dataset.get(i, ex);
        STOKE_CHECK(ex.label >= 0 && ex.label < num_classes, kPack, dataset.describe(i), ": label ",
                    ex.label, " out of range [0, ", num_classes, ")");
        STOKE_CHECK(ex.channels == c, kPack, dataset.describe(i), ": ", ex.channels,
                    " channels, but the pack has ", c,
                    " (from the first sample); decode with a fixed channel count");
        uint8_t* rec = records + r * record_bytes;
        if (ex.height == h && ex.width == w) {
          std::memcpy(rec, ex.pixels.data(), static_cast<size_t>(pixel_bytes));
        } else if (options.fit == Fit::exact) {
          STOKE_FAIL(kPack, dataset.describe(i), ": a ", ex.height, "x", ex.width,
                     " image, but the records are ", h, "x", w,
                     options.height ? "" : " (the first sample's size)",
                     " and no resize was asked for: ", options.resize_hint);
        } else {
          try {
            fit_image(ex.pixels.data(), ex.height, ex.width, c, h, w, options.fit, fitted);
          } catch (const Error& err) {
            STOKE_FAIL(kPack, dataset.describe(i), ": ", err.what());
          }
          std::memcpy(rec, fitted.data(), static_cast<size_t>(pixel_bytes));
        }
        store_le(rec + pixel_bytes, static_cast<uint64_t>(ex.label), kLabelBytes);
      }
    });
    const uint32_t crc = crc32_parallel(records, static_cast<size_t>(count * record_bytes));
    crcs[static_cast<size_t>(s)] = crc;
    uint8_t* hd = buffer.data();
    std::memcpy(hd, kShardMagic, 8);
    store_le(hd + 8, kVersion, 4);
    store_le(hd + 12, static_cast<uint64_t>(s), 4);
    store_le(hd + 16, static_cast<uint64_t>(h), 4);
    store_le(hd + 20, static_cast<uint64_t>(w), 4);
    store_le(hd + 24, static_cast<uint64_t>(c), 4);
    store_le(hd + 28, crc, 4);
    store_le(hd + 32, static_cast<uint64_t>(begin), 8);
    store_le(hd + 40, static_cast<uint64_t>(count), 8);
    store_le(hd + 48, static_cast<uint64_t>(record_bytes), 8);
    write_file_atomic(packed_shard_path(out_dir, s), buffer.data(), buffer.size(), options.sync);
    result.bytes += static_cast<int64_t>(buffer.size());
  }

  std::vector<uint8_t> index(kIndexHeader, 0);
  std::memcpy(index.data(), kIndexMagic, 8);
  store_le(index.data() + 8, kVersion, 4);
  store_le(index.data() + 12, static_cast<uint64_t>(h), 4);
  store_le(index.data() + 16, static_cast<uint64_t>(w), 4);
  store_le(index.data() + 20, static_cast<uint64_t>(c), 4);
  store_le(index.data() + 24, static_cast<uint64_t>(num_classes), 4);
  store_le(index.data() + 28, static_cast<uint64_t>(num_shards), 4);
  store_le(index.data() + 32, static_cast<uint64_t>(n), 8);
  store_le(index.data() + 40, static_cast<uint64_t>(record_bytes), 8);
  store_le(index.data() + 48, static_cast<uint64_t>(per_shard), 8);
  store_le(index.data() + 56, names.size(), 4);
  for (const auto& name : names) {
    put_le(index, name.size(), 4);
    index.insert(index.end(), name.begin(), name.end());
  }
  for (int64_t s = 0; s < num_shards; ++s) {
    put_le(index, static_cast<uint64_t>(std::min(per_shard, n - s * per_shard)), 8);
    put_le(index, crcs[static_cast<size_t>(s)], 4);
    put_le(index, 0, 4);
  }
  put_le(index, static_cast<uint32_t>(crc32(0L, index.data(), static_cast<uInt>(index.size()))), 4);
  write_file_atomic(index_path, index.data(), index.size(), options.sync);
  result.bytes += static_cast<int64_t>(index.size());
  // Shards of an older, larger pack in the same directory are no longer referenced.
  for (int64_t s = num_shards; fs::exists(packed_shard_path(out_dir, s)); ++s)
    fs::remove(packed_shard_path(out_dir, s));
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

PackedDataset::PackedDataset(const std::string& dir, PackedOptions options) : dir_(dir) {
  const std::string path = packed_index_path(dir);
  STOKE_CHECK(fs::exists(path), kOpen, "'", path, "' does not exist (not a stoke-pack directory)");
  std::vector<uint8_t> bytes;
  read_file_bytes(path, bytes);
  STOKE_CHECK(bytes.size() >= kIndexHeader + 4 && std::memcmp(bytes.data(), kIndexMagic, 8) == 0,
              kOpen, "'", path, "': bad magic: not a stoke-pack index");
  Reader rd{bytes, 8, path};
  const uint64_t version = rd.take(4, "version");
  STOKE_CHECK(version == kVersion, kOpen, "'", path, "': unsupported version ", version,
              " (this build reads version ", kVersion, ")");
  const uint32_t stored_crc = static_cast<uint32_t>(load_le(bytes.data() + bytes.size() - 4, 4));
  const uint32_t crc =
      static_cast<uint32_t>(crc32(0L, bytes.data(), static_cast<uInt>(bytes.size() - 4)));
  STOKE_CHECK(stored_crc == crc, kOpen, "'", path, "': index CRC mismatch (stored ", stored_crc,
              ", computed ", crc, "): the index is corrupt");
  height_ = static_cast<int64_t>(rd.take(4, "height"));
  width_ = static_cast<int64_t>(rd.take(4, "width"));
  channels_ = static_cast<int64_t>(rd.take(4, "channels"));
  num_classes_ = static_cast<int64_t>(rd.take(4, "num_classes"));
  const int64_t num_shards = static_cast<int64_t>(rd.take(4, "num_shards"));
  num_records_ = static_cast<int64_t>(rd.take(8, "num_records"));
  record_bytes_ = static_cast<int64_t>(rd.take(8, "record_bytes"));
  records_per_shard_ = static_cast<int64_t>(rd.take(8, "records_per_shard"));
  const uint64_t num_names = rd.take(4, "num_class_names");
  // Bounds first, so that no product below can overflow on a crafted index.
  constexpr int64_t kMaxDim = int64_t{1} << 24, kMaxShardBytes = int64_t{1} << 40;
  STOKE_CHECK(height_ <= kMaxDim && width_ <= kMaxDim && channels_ <= 4096 && num_records_ >= 0 &&
                  num_records_ <= (int64_t{1} << 48) && record_bytes_ > 0 &&
                  record_bytes_ <= kMaxShardBytes && records_per_shard_ > 0 &&
                  records_per_shard_ <= kMaxShardBytes / record_bytes_,
              kOpen, "'", path, "': implausible header: ", height_, "x", width_, "x", channels_,
              ", records of ", record_bytes_, " bytes, ", records_per_shard_, " per shard");
  pixel_bytes_ = height_ * width_ * channels_;
  STOKE_CHECK(height_ > 0 && width_ > 0 && channels_ > 0 && num_classes_ > 0 &&
                  record_bytes_ == pixel_bytes_ + kLabelBytes && records_per_shard_ > 0 &&
                  num_records_ >= 0 &&
                  num_shards == (num_records_ + records_per_shard_ - 1) / records_per_shard_ &&
                  (num_names == 0 || num_names == static_cast<uint64_t>(num_classes_)),
              kOpen, "'", path, "': inconsistent header: ", height_, "x", width_, "x", channels_,
              ", ", num_classes_, " classes, ", num_records_, " records of ", record_bytes_,
              " bytes, ", records_per_shard_, " per shard, ", num_shards, " shards, ", num_names,
              " class names");
  rd.pos = kIndexHeader;
  for (uint64_t k = 0; k < num_names; ++k) {
    const uint64_t len = rd.take(4, "class name length");
    STOKE_CHECK(rd.pos + len <= bytes.size() - 4, kOpen, "'", path,
                "': truncated index: class name ", k, " of ", len, " bytes runs past the end");
    class_names_.emplace_back(reinterpret_cast<const char*>(bytes.data() + rd.pos), len);
    rd.pos += len;
  }
  std::vector<uint32_t> crcs;
  for (int64_t s = 0; s < num_shards; ++s) {
    Shard sh;
    sh.path = packed_shard_path(dir, s);
    sh.count = static_cast<int64_t>(rd.take(8, "shard record count"));
    crcs.push_back(static_cast<uint32_t>(rd.take(4, "shard crc32")));
    rd.take(4, "reserved");
    const int64_t expected = std::min(records_per_shard_, num_records_ - s * records_per_shard_);
    STOKE_CHECK(sh.count == expected, kOpen, "'", path, "': shard ", s, " has ", sh.count,
                " records, expected ", expected);
    shards_.push_back(std::move(sh));
  }
  STOKE_CHECK(rd.pos + 4 == bytes.size(), kOpen, "'", path, "': ", bytes.size() - 4 - rd.pos,
              " unexpected bytes after the shard table");

  for (int64_t s = 0; s < num_shards; ++s) {
    Shard& sh = shards_[static_cast<size_t>(s)];
    // O_NONBLOCK: opening a FIFO would block until a writer came.
    const int fd = ::open(sh.path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) STOKE_FAIL(kOpen, "'", sh.path, "': cannot open shard: ", std::strerror(errno));
    struct stat st;
    const int stat_rc = ::fstat(fd, &st);
    if (stat_rc == 0 && !S_ISREG(st.st_mode)) {
      ::close(fd);
      STOKE_FAIL(kOpen, "'", sh.path, "': not a regular file");
    }
    const size_t expected = kShardHeader + static_cast<size_t>(sh.count * record_bytes_);
    if (stat_rc != 0 || static_cast<size_t>(st.st_size) != expected) {
      ::close(fd);
      STOKE_FAIL(kOpen, "'", sh.path,
                 "': ", static_cast<size_t>(st.st_size) < expected ? "truncated" : "oversized",
                 " shard: ", st.st_size, " bytes, expected ", expected, " (", kShardHeader,
                 "-byte header + ", sh.count, " records of ", record_bytes_, " bytes)");
    }
    void* map = ::mmap(nullptr, expected, PROT_READ, MAP_SHARED, fd, 0);
    const int map_errno = errno;
    ::close(fd);  // the mapping keeps the file
    if (map == MAP_FAILED)
      STOKE_FAIL(kOpen, "'", sh.path, "': mmap failed: ", std::strerror(map_errno));
    sh.map = static_cast<uint8_t*>(map);
    sh.map_bytes = expected;
    sh.guard = MappedFileGuard(map, expected, sh.path);
    sh.records = sh.map + kShardHeader;
    ::madvise(map, expected,
              options.access == Access::random       ? MADV_RANDOM
              : options.access == Access::sequential ? MADV_SEQUENTIAL
                                                     : MADV_WILLNEED);
    const uint8_t* hd = sh.map;
    STOKE_CHECK(std::memcmp(hd, kShardMagic, 8) == 0, kOpen, "'", sh.path,
                "': bad magic: not a stoke-pack shard");
    STOKE_CHECK(load_le(hd + 8, 4) == kVersion, kOpen, "'", sh.path, "': unsupported version ",
                load_le(hd + 8, 4), " (this build reads version ", kVersion, ")");
    const bool agrees = load_le(hd + 12, 4) == static_cast<uint64_t>(s) &&
                        load_le(hd + 16, 4) == static_cast<uint64_t>(height_) &&
                        load_le(hd + 20, 4) == static_cast<uint64_t>(width_) &&
                        load_le(hd + 24, 4) == static_cast<uint64_t>(channels_) &&
                        load_le(hd + 28, 4) == crcs[static_cast<size_t>(s)] &&
                        load_le(hd + 32, 8) == static_cast<uint64_t>(s * records_per_shard_) &&
                        load_le(hd + 40, 8) == static_cast<uint64_t>(sh.count) &&
                        load_le(hd + 48, 8) == static_cast<uint64_t>(record_bytes_);
    STOKE_CHECK(agrees, kOpen, "'", sh.path, "': header disagrees with '", path,
                "' (a shard from another pack?)");
  }

  if (!options.verify) return;
  for (int64_t s = 0; s < num_shards; ++s) {
    const Shard& sh = shards_[static_cast<size_t>(s)];
    const uint32_t got = crc32_parallel(sh.records, static_cast<size_t>(sh.count * record_bytes_));
    STOKE_CHECK(got == crcs[static_cast<size_t>(s)], kOpen, "'", sh.path,
                "': CRC mismatch: the index says ", crcs[static_cast<size_t>(s)],
                ", the records hash to ", got, " (corrupt shard)");
  }
  parallel_for(0, num_records_, 4096, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) label(i);
  });
}

PackedDataset::~PackedDataset() {
  for (auto& sh : shards_) {
    sh.guard = MappedFileGuard();  // before the range can be mapped again
    if (sh.map) ::munmap(sh.map, sh.map_bytes);
  }
}

const uint8_t* PackedDataset::record(int64_t index, const Shard** shard) const {
  STOKE_CHECK(index >= 0 && index < num_records_, kOpen, "index ", index, " out of range [0, ",
              num_records_, ") for '", dir_, "'");
  const Shard& sh = shards_[static_cast<size_t>(index / records_per_shard_)];
  *shard = &sh;
  return sh.records + (index % records_per_shard_) * record_bytes_;
}

const uint8_t* PackedDataset::pixels(int64_t index) const {
  const Shard* sh = nullptr;
  return record(index, &sh);
}

int64_t PackedDataset::label(int64_t index) const {
  const Shard* sh = nullptr;
  const uint8_t* rec = record(index, &sh);
  const auto label = static_cast<int64_t>(static_cast<int32_t>(load_le(rec + pixel_bytes_, 4)));
  STOKE_CHECK(label >= 0 && label < num_classes_, kOpen, "'", sh->path, "', record ",
              index % records_per_shard_, ": label ", label, " out of range [0, ", num_classes_,
              ") (sample ", index, ")");
  return label;
}

void PackedDataset::get(int64_t index, Example& out) const {
  const Shard* sh = nullptr;
  const uint8_t* rec = record(index, &sh);
  out.label = label(index);
  out.pixels.resize(static_cast<size_t>(pixel_bytes_));
  std::memcpy(out.pixels.data(), rec, static_cast<size_t>(pixel_bytes_));
  out.height = height_;
  out.width = width_;
  out.channels = channels_;
}

std::string PackedDataset::describe(int64_t index) const {
  if (index < 0 || index >= num_records_)
    return stoke::detail::str_cat(dir_, ", record ", index, " (out of range)");
  return stoke::detail::str_cat(packed_shard_path(dir_, index / records_per_shard_), ", record ",
                                index % records_per_shard_);
}

}  // namespace stoke::data
