// CIFAR-10 and CIFAR-100 binary batches (https://www.cs.toronto.edu/~kriz/cifar.html): records of
// label byte(s) then 3072 pixel bytes, the 32x32 red plane, then green, then blue. Loaded into
// memory as HWC once, so get() is one memcpy of 3072 bytes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace stoke::data {

enum class CifarVariant {
  cifar10,   // data_batch_1..5.bin / test_batch.bin; records of 1 label byte + 3072 bytes
  cifar100,  // train.bin / test.bin; records of coarse label byte, fine label byte, 3072 bytes
};

// CifarDataset ds("cifar-100-binary", {.variant = CifarVariant::cifar100, .train = false}).
struct CifarOptions {
  CifarVariant variant = CifarVariant::cifar10;
  bool train = true;           // the training batches or the test batch
  bool coarse_labels = false;  // CIFAR-100 only: the 20 superclasses instead of the 100 classes
};

// A CIFAR dataset held in memory as uint8 (32, 32, 3) images. Class names are read from the
// dataset's batches.meta.txt / fine_label_names.txt / coarse_label_names.txt when present.
class CifarDataset : public Dataset {
 public:
  // `input` is the directory holding the batch files (the split picks which) or one .bin file.
  // Throws stoke::Error naming the file: missing, a length that is not a multiple of the record
  // size (with both numbers), or a label out of range (with the record index).
  explicit CifarDataset(const std::string& input, CifarOptions options = {});

  int64_t size() const override { return n_; }
  void get(int64_t index, Example& out) const override;
  int64_t num_classes() const override { return num_classes_; }
  std::vector<std::string> class_names() const override { return class_names_; }
  std::string describe(int64_t index) const override;

  static constexpr int64_t kHeight = 32, kWidth = 32, kChannels = 3;
  static constexpr int64_t kImageBytes = kHeight * kWidth * kChannels;

 private:
  struct File {
    std::string path;
    int64_t first = 0;  // index of its first record
  };
  std::vector<File> files_;
  std::vector<uint8_t> pixels_;  // n_ * kImageBytes, HWC
  std::vector<uint8_t> labels_;
  std::vector<std::string> class_names_;
  int64_t n_ = 0, num_classes_ = 0;
};

}  // namespace stoke::data
