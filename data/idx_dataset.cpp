#include "data/idx_dataset.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "data/idx.h"

namespace stoke::data {
namespace {

constexpr const char* kIdxDatasetOp = "IdxImageDataset";

// The image file load_mnist reads (the raw file wins over .gz), for describe().
std::string image_file(const std::string& dir, bool train) {
  const std::filesystem::path raw =
      std::filesystem::path(dir) / (train ? "train-images-idx3-ubyte" : "t10k-images-idx3-ubyte");
  if (std::filesystem::exists(raw)) return raw.string();
  return raw.string() + ".gz";
}

}  // namespace

IdxImageDataset::IdxImageDataset(const std::string& dir, IdxImageOptions options)
    : source_(image_file(dir, options.train)), class_names_(std::move(options.class_names)) {
  IdxDataset ds = load_mnist(dir, options.train, options.limit);
  images_ = ds.images.contiguous();
  labels_ = ds.labels.contiguous();
  init();
}

IdxImageDataset::IdxImageDataset(Tensor images, Tensor labels, std::string source,
                                 std::vector<std::string> class_names)
    : images_(images.contiguous()),
      labels_(labels.contiguous()),
      source_(std::move(source)),
      class_names_(std::move(class_names)) {
  init();
}

void IdxImageDataset::init() {
  STOKE_CHECK(images_.dtype() == DType::u8 && images_.dim() == 3, kIdxDatasetOp, "'", source_,
              "': expected u8 images of shape (N, H, W), got ", images_.dtype(), " ",
              images_.shape());
  STOKE_CHECK(
      labels_.dtype() == DType::i64 && labels_.dim() == 1 && labels_.size(0) == images_.size(0),
      kIdxDatasetOp, "'", source_, "': expected i64 labels of shape (", images_.size(0), "), got ",
      labels_.dtype(), " ", labels_.shape());
  n_ = images_.size(0);
  h_ = images_.size(1);
  w_ = images_.size(2);
  // An image of no pixels has nothing to train on (and get() would copy from a null buffer).
  STOKE_CHECK(n_ == 0 || (h_ > 0 && w_ > 0), kIdxDatasetOp, "'", source_, "': images of ", h_, "x",
              w_, " pixels (shape ", images_.shape(), "): expected at least 1x1");
  const int64_t* l = labels_.data<int64_t>();
  int64_t max_label = -1;
  for (int64_t i = 0; i < n_; ++i) {
    STOKE_CHECK(l[i] >= 0, kIdxDatasetOp, "'", source_, "': label ", l[i], " of image ", i,
                " is negative");
    max_label = std::max(max_label, l[i]);
  }
  num_classes_ = max_label + 1;
  if (!class_names_.empty()) {
    STOKE_CHECK(static_cast<int64_t>(class_names_.size()) >= num_classes_, kIdxDatasetOp, "'",
                source_, "': ", class_names_.size(), " class names given but labels go up to ",
                max_label);
    num_classes_ = static_cast<int64_t>(class_names_.size());
  }
}

void IdxImageDataset::get(int64_t index, Example& out) const {
  STOKE_CHECK(index >= 0 && index < n_, kIdxDatasetOp, "::get: index ", index, " out of range [0, ",
              n_, ") for '", source_, "'");
  const size_t bytes = static_cast<size_t>(h_ * w_);
  out.pixels.resize(bytes);
  std::memcpy(out.pixels.data(), images_.data<uint8_t>() + index * h_ * w_, bytes);
  out.height = h_;
  out.width = w_;
  out.channels = 1;
  out.label = labels_.data<int64_t>()[index];
}

std::string IdxImageDataset::describe(int64_t index) const {
  return stoke::detail::str_cat(source_, ", image ", index);
}

}  // namespace stoke::data
