// MNIST / Fashion-MNIST IDX files as a Dataset: data/idx.h's load_mnist (gzip or raw) held in
// memory, one channel, so get() is one memcpy of H*W bytes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "data/dataset.h"

namespace stoke::data {

// IdxImageDataset ds(dir, {.train = false}).
struct IdxImageOptions {
  bool train = true;  // train-* files (60k for MNIST) or t10k-* (10k)
  // Class names in label order (e.g. Fashion-MNIST's); IDX files carry none. Empty = none.
  std::vector<std::string> class_names = {};
  // Only the first `limit` images (0 = all): the files are read, and a gzip inflated, only as far
  // as they need (load_mnist's limit).
  int64_t limit = 0;
};

// The images of {train,t10k}-images-idx3-ubyte[.gz] with the labels of the matching label file,
// as uint8 (H, W, 1) samples. num_classes() is the largest label + 1 (10 for the MNIST family).
class IdxImageDataset : public Dataset {
 public:
  // Loads from `dir` (see load_mnist for the file names and checks).
  explicit IdxImageDataset(const std::string& dir, IdxImageOptions options = {});
  // Wraps tensors already loaded: images u8 (N, H, W), labels i64 (N) in [0, 255]. `source` names
  // them in describe().
  IdxImageDataset(Tensor images, Tensor labels, std::string source,
                  std::vector<std::string> class_names = {});

  int64_t size() const override { return n_; }
  void get(int64_t index, Example& out) const override;
  int64_t num_classes() const override { return num_classes_; }
  std::vector<std::string> class_names() const override { return class_names_; }
  std::string describe(int64_t index) const override;

  int64_t height() const { return h_; }
  int64_t width() const { return w_; }

 private:
  void init();

  Tensor images_;  // contiguous u8 (N, H, W)
  Tensor labels_;  // contiguous i64 (N)
  std::string source_;
  std::vector<std::string> class_names_;
  int64_t n_ = 0, h_ = 0, w_ = 0, num_classes_ = 0;
};

}  // namespace stoke::data
