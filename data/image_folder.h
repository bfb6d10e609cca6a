// Image folders in torchvision's ImageFolder layout: root/<class>/<file>.png|jpg|jpeg|bmp, classes
// sorted by directory name (label = position), files sorted by path within each class, decoded
// with stb_image on every get(). Also the reverse: writing any dataset out as such a folder.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/image_decode.h"

namespace stoke::data {

// ImageFolderDataset ds(root, {.channels = 3, .max_width = 1024, .max_height = 1024}).
struct ImageFolderOptions {
  int channels = 0;          // 1 or 3 (stb converts), or 0 = as each file stores it
  int64_t max_width = 8192;  // bigger images are refused (path + actual size); 0 = no limit
  int64_t max_height = 8192;
};

// Random access to the images of an image folder. The scan happens once in the constructor; each
// get() reads and decodes one file (see data/cache.h to keep the files in RAM).
class ImageFolderDataset : public Dataset {
 public:
  // Scans `root` recursively below each class directory, keeping files whose extension is .png,
  // .jpg, .jpeg or .bmp in any case (others are skipped, as torchvision does). Throws stoke::Error
  // naming the path for: a missing root, a root with no class directories, a class directory
  // with no image file, or bad options.
  explicit ImageFolderDataset(const std::string& root, ImageFolderOptions options = {});

  int64_t size() const override { return static_cast<int64_t>(files_.size()); }
  // Reads and decodes file `index`; a corrupt, truncated, unsupported or oversized file throws
  // stoke::Error with its path and the reason.
  void get(int64_t index, Example& out) const override;
  int64_t num_classes() const override { return static_cast<int64_t>(classes_.size()); }
  std::vector<std::string> class_names() const override { return classes_; }
  std::string describe(int64_t index) const override { return path(index); }

  // The file of sample `index` and its label.
  const std::string& path(int64_t index) const;
  int64_t label(int64_t index) const;
  // Decodes an encoded image (e.g. cached bytes of path(index)) with this folder's options into
  // out, labelled as sample `index`.
  void decode(int64_t index, const uint8_t* data, size_t size, Example& out) const;
  const std::string& root() const { return root_; }
  const DecodeOptions& decode_options() const { return decode_; }

 private:
  std::string root_;
  DecodeOptions decode_;
  std::vector<std::string> classes_;
  std::vector<std::string> files_;
  std::vector<int32_t> labels_;
};

// write_image_folder(ds, dir, {.limit = 10000}).
struct ExportOptions {
  int64_t limit = 0;  // write only the first `limit` samples; 0 = all
};

// Writes samples [0, limit) of `dataset` as PNG files root/<class>/<index>.png, in parallel over
// the thread pool. Class directories are the dataset's class names when they are already sorted
// (and valid directory names), else the label zero-padded to the width of the largest one
// ("0".."9", or "00".."99"), so that sorting by name (as ImageFolderDataset does) gives back the
// same labels; file names are the sample index
// zero-padded, so each class keeps the dataset's order. Each file is written atomically. Returns
// the number of images written.
int64_t write_image_folder(const Dataset& dataset, const std::string& root,
                           ExportOptions options = {});

}  // namespace stoke::data
