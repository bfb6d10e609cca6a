// In-RAM caches over a dataset, each with a memory budget:
//   EncodedCache  the files of an image folder read into RAM once (in parallel); get() decodes
//                 from memory, so an epoch costs decoding only, no file system calls.
//   DecodedCache  every sample decoded once into one uint8 arena; get() is one memcpy.
// Encoded PNG/JPEG bytes are typically 2-10x smaller than the pixels, so the encoded cache fits
// datasets that the decoded one cannot.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/image_folder.h"

namespace stoke::data {

// Half of the machine's physical memory: the budget used when a cache is given 0.
int64_t default_cache_budget();

// EncodedCache cache(folder, {.budget_bytes = int64_t{1} << 30}).
struct EncodedCacheOptions {
  int64_t budget_bytes = 0;  // 0 = default_cache_budget()
  // What happens when the files do not fit: false (default) = the constructor throws, naming the
  // budget and the total; true = files are cached in dataset order until the budget is reached
  // and the rest are read from disk on every get() (cached_files() says how many fit).
  bool read_rest_from_disk = false;
};

// An image folder with its encoded files held in RAM. Decoding follows the folder's options
// (channels, maximum size), and errors name the file as ImageFolderDataset's do.
class EncodedCache : public Dataset {
 public:
  // Reads the files over the thread pool into one buffer. Throws stoke::Error naming the path
  // for an unreadable file or one whose size changed while it was read, and the budget when the
  // files exceed it (unless read_rest_from_disk).
  explicit EncodedCache(std::shared_ptr<const ImageFolderDataset> folder,
                        EncodedCacheOptions options = {});

  int64_t size() const override { return folder_->size(); }
  void get(int64_t index, Example& out) const override;
  int64_t num_classes() const override { return folder_->num_classes(); }
  std::vector<std::string> class_names() const override { return folder_->class_names(); }
  std::string describe(int64_t index) const override { return folder_->describe(index); }

  // Files held in RAM (the first cached_files() of the folder) and their total bytes.
  int64_t cached_files() const { return cached_; }
  int64_t cached_bytes() const { return offsets_.empty() ? 0 : offsets_.back(); }

 private:
  std::shared_ptr<const ImageFolderDataset> folder_;
  std::unique_ptr<uint8_t[]> bytes_;
  std::vector<int64_t> offsets_;  // cached_ + 1 entries: file i is [offsets_[i], offsets_[i+1])
  int64_t cached_ = 0;
};

// DecodedCache cache(dataset, {.budget_bytes = int64_t{4} << 30}).
struct DecodedCacheOptions {
  int64_t budget_bytes = 0;  // 0 = default_cache_budget(); exceeding it is an error
};

// Any dataset with every sample decoded once, in parallel, into RAM. Samples may differ in size.
class DecodedCache : public Dataset {
 public:
  // Decodes all of `source` (its errors propagate, naming the sample). Throws stoke::Error naming
  // the budget, the bytes decoded so far and the sample when the pixels exceed the budget.
  explicit DecodedCache(std::shared_ptr<const Dataset> source, DecodedCacheOptions options = {});

  int64_t size() const override { return static_cast<int64_t>(entries_.size()); }
  void get(int64_t index, Example& out) const override;
  int64_t num_classes() const override { return source_->num_classes(); }
  std::vector<std::string> class_names() const override { return source_->class_names(); }
  std::string describe(int64_t index) const override { return source_->describe(index); }

  // Total pixel bytes held.
  int64_t cached_bytes() const { return total_bytes_; }

 private:
  struct Entry {
    int64_t offset;  // within its chunk's arena
    int32_t chunk;
    int32_t height, width, channels;
    int64_t label;
  };
  std::shared_ptr<const Dataset> source_;
  std::vector<std::vector<uint8_t>> arenas_;  // one per decoding chunk
  std::vector<Entry> entries_;
  int64_t total_bytes_ = 0;
};

// How open_image_folder keeps the images.
enum class CacheMode {
  none,     // read and decode the file on every get()
  encoded,  // EncodedCache
  decoded,  // DecodedCache
};

// An image folder, optionally behind a cache with the given budget (0 = default_cache_budget();
// over budget is an error in both modes).
std::shared_ptr<Dataset> open_image_folder(const std::string& root, ImageFolderOptions options = {},
                                           CacheMode cache = CacheMode::none,
                                           int64_t budget_bytes = 0);

}  // namespace stoke::data
