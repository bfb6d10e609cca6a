// A simple in-memory batcher: a dataset held as one u8 tensor, shuffled per epoch, cut into
// normalized f32 batches. The threaded loader replaces it later, so the interface stays small.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace stoke::data {

// InMemoryBatcher options: InMemoryBatcher b(images, labels, {.batch_size = 64, .seed = 1}).
struct BatcherOptions {
  int64_t batch_size = 128;
  bool shuffle = true;     // a new permutation every epoch; false keeps dataset order
  bool drop_last = false;  // drop the last batch when it is smaller than batch_size
  uint64_t seed = 0;       // with the epoch, fully determines the permutation
  float mean = 0.f;        // images become (x / 255 - mean) / std
  float std = 1.f;
  // Augmentation, per sample and epoch from Philox (seed, epoch, sample): a random crop of the
  // image zero-padded by this many pixels on each side (0 = off; torchvision's
  // RandomCrop(size, padding)), and a horizontal flip with probability 1/2.
  int64_t random_crop_padding = 0;
  bool horizontal_flip = false;
};

// Serves batches of a u8 image dataset in memory. The permutation of epoch e is a Fisher-Yates
// shuffle whose step i draws from philox4x32(counter = (e, i), key = seed), so it is the same on
// every machine and for every thread count.
class InMemoryBatcher {
 public:
  // images: u8 (N, H, W) (one channel) or (N, H, W, C); labels: i64 (N). Starts at epoch 0.
  InMemoryBatcher(Tensor images_u8, Tensor labels_i64, BatcherOptions options = {});

  // Number of samples.
  int64_t size() const { return n_; }
  // Number of batches per epoch (the last one may be smaller unless drop_last).
  int64_t num_batches() const;
  // Selects the permutation for `epoch`, reshuffling deterministically from (seed, epoch).
  void set_epoch(int64_t epoch);

  struct Batch {
    Tensor images;  // f32 (B, C, H, W), (x / 255 - mean) / std
    Tensor labels;  // i64 (B)
  };
  // Batch `index` of the current epoch. Random access, so a resumed run can continue mid-epoch;
  // built in parallel over the samples.
  Batch batch(int64_t index) const;

  // The current epoch's sample order: batch i holds order()[i * batch_size ...].
  const std::vector<int64_t>& order() const { return order_; }

 private:
  Tensor images_;  // contiguous u8 (N, H, W, C)
  Tensor labels_;  // contiguous i64 (N)
  BatcherOptions options_;
  int64_t n_ = 0, h_ = 0, w_ = 0, c_ = 0;
  float scale_ = 1.f, bias_ = 0.f;  // normalized = x * scale_ + bias_
  std::vector<int64_t> order_;
  int64_t epoch_ = 0;
};

}  // namespace stoke::data
