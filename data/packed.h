// Packed shards: a dataset converted offline (stoke-pack) into fixed-size uint8 records, split
// into shard files of at most ~64 MiB plus one index file, each shard checksummed with CRC-32.
// The reader memory-maps the shards, so get() is one memcpy of a record. The byte layout is in
// docs/data-formats.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/mapped_file_guard.h"
#include "data/resize.h"

namespace stoke::data {

// pack_dataset(ds, "out", {.height = 64, .width = 64, .fit = Fit::resize_crop}).
struct PackOptions {
  int64_t height = 0;  // record size; 0 (both) = the first sample's size
  int64_t width = 0;
  Fit fit = Fit::exact;                     // how samples of another size are fitted
  int64_t shard_bytes = int64_t{64} << 20;  // records per shard = max(1, shard_bytes / record)
  int threads = 0;                          // pool threads while packing; 0 = stoke's default
  bool sync = true;                         // fsync each file before renaming it into place
  // How the caller asks for a resize, in the error for a sample of another size under
  // Fit::exact (stoke-pack: "pass --size HxW ...").
  std::string resize_hint = "set PackOptions height, width and fit to resize";
};

// What pack_dataset wrote.
struct PackResult {
  int64_t records = 0;
  int64_t shards = 0;
  int64_t bytes = 0;  // all shard files and the index
  double seconds = 0;
};

// Converts every sample of `dataset` into one fixed-size record (pixels fitted to height x width,
// the channel count of the first sample, and the label) and writes out_dir/shard-NNNNN.bin and
// out_dir/pack.index (the directory is created). Samples are read and fitted in parallel over the
// thread pool. Every file is written to a temporary name and renamed into place, the index last
// (an old index is removed first, shards an old pack had beyond the new count afterwards), so a
// reader sees either no pack or a complete one. Throws stoke::Error naming the sample
// (describe()) for a label out of [0, num_classes), a channel count that differs from the first
// sample's, or a size that the fit cannot handle.
PackResult pack_dataset(const Dataset& dataset, const std::string& out_dir,
                        PackOptions options = {});

// How the kernel is told the mapping will be read (madvise).
enum class Access {
  willneed,    // MADV_WILLNEED: read the shards ahead into the page cache (default)
  random,      // MADV_RANDOM: no read-ahead (datasets much larger than RAM, random order)
  sequential,  // MADV_SEQUENTIAL: aggressive read-ahead, pages dropped behind
};

// PackedDataset ds("out", {.verify = false}).
struct PackedOptions {
  // Check every shard's CRC-32 (and every label) when opening: on by default, as a corrupt shard
  // would otherwise train on garbage silently. It reads all shards once (in parallel, ~1 GB/s per
  // core); turn it off to open large packs instantly (sizes, headers and each label read by get()
  // are still checked).
  bool verify = true;
  Access access = Access::willneed;
};

// A packed dataset, memory-mapped read-only (MAP_SHARED, so many processes share one copy in the
// page cache). Thread-safe; get() copies one record.
class PackedDataset : public Dataset {
 public:
  // Opens out_dir/pack.index and its shards. Throws stoke::Error naming the file and what was
  // wrong: missing file, bad magic, unsupported version, a truncated or oversized shard (actual
  // vs expected bytes), a header that disagrees with the index, a CRC mismatch (expected and
  // computed), or a label out of range (shard, record).
  explicit PackedDataset(const std::string& dir, PackedOptions options = {});
  ~PackedDataset() override;
  PackedDataset(const PackedDataset&) = delete;
  PackedDataset& operator=(const PackedDataset&) = delete;

  int64_t size() const override { return num_records_; }
  void get(int64_t index, Example& out) const override;
  int64_t num_classes() const override { return num_classes_; }
  std::vector<std::string> class_names() const override { return class_names_; }
  // "dir/shard-00002.bin, record 17".
  std::string describe(int64_t index) const override;

  int64_t height() const { return height_; }
  int64_t width() const { return width_; }
  int64_t channels() const { return channels_; }
  // The pixels of sample `index` inside the mapping (height * width * channels bytes), for
  // callers that copy straight into a batch; valid while this dataset lives.
  const uint8_t* pixels(int64_t index) const;
  // The label of sample `index` (range-checked against num_classes()).
  int64_t label(int64_t index) const;

 private:
  struct Shard {
    std::string path;
    uint8_t* map = nullptr;  // the whole file
    size_t map_bytes = 0;
    const uint8_t* records = nullptr;
    int64_t count = 0;
    MappedFileGuard guard;  // a shard truncated while mapped exits with its path, not bare SIGBUS
  };
  const uint8_t* record(int64_t index, const Shard** shard) const;

  std::string dir_;
  std::vector<Shard> shards_;
  std::vector<std::string> class_names_;
  int64_t height_ = 0, width_ = 0, channels_ = 0, num_classes_ = 0, num_records_ = 0;
  int64_t record_bytes_ = 0, pixel_bytes_ = 0, records_per_shard_ = 0;
};

// File names inside a pack directory.
std::string packed_index_path(const std::string& dir);
std::string packed_shard_path(const std::string& dir, int64_t shard);

// CRC-32 (zlib's crc32) of data[0, size), computed in parallel chunks over the thread pool and
// combined with crc32_combine: the same value as one zlib call.
uint32_t crc32_parallel(const uint8_t* data, size_t size);

}  // namespace stoke::data
