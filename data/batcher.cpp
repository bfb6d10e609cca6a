#include "data/batcher.h"

#include <algorithm>
#include <utility>

#include "core/error.h"
#include "core/parallel.h"
#include "core/random.h"

namespace stoke::data {

namespace {
constexpr const char* kBatcherOp = "InMemoryBatcher";
}

InMemoryBatcher::InMemoryBatcher(Tensor images_u8, Tensor labels_i64, BatcherOptions options)
    : options_(options) {
  STOKE_CHECK(images_u8.defined() && labels_i64.defined(), kBatcherOp, "expected defined tensors");
  STOKE_CHECK(images_u8.device().is_cpu() && labels_i64.device().is_cpu(), kBatcherOp,
              "expected CPU tensors, got images on ", images_u8.device(), " and labels on ",
              labels_i64.device());
  STOKE_CHECK(images_u8.dtype() == DType::u8, kBatcherOp, "expected u8 images, got ",
              images_u8.dtype());
  STOKE_CHECK(images_u8.dim() == 3 || images_u8.dim() == 4, kBatcherOp,
              "expected images of shape (N, H, W) or (N, H, W, C), got ", images_u8.shape());
  STOKE_CHECK(labels_i64.dtype() == DType::i64, kBatcherOp, "expected i64 labels, got ",
              labels_i64.dtype());
  STOKE_CHECK(labels_i64.dim() == 1, kBatcherOp, "expected 1-D labels (N), got ",
              labels_i64.shape());
  STOKE_CHECK(labels_i64.size(0) == images_u8.size(0), kBatcherOp,
              "expected one label per image, got ", images_u8.size(0), " images ",
              images_u8.shape(), " and ", labels_i64.size(0), " labels");
  STOKE_CHECK(options.batch_size > 0, kBatcherOp, "expected batch_size > 0, got ",
              options.batch_size);
  STOKE_CHECK(options.std != 0.f, kBatcherOp, "expected std != 0");
  STOKE_CHECK(options.random_crop_padding >= 0, kBatcherOp,
              "expected random_crop_padding >= 0, got ", options.random_crop_padding);
  // Detached: the dataset is data, never part of a graph.
  images_ = images_u8.detach().contiguous();
  labels_ = labels_i64.detach().contiguous();
  n_ = images_.size(0);
  h_ = images_.size(1);
  w_ = images_.size(2);
  c_ = images_.dim() == 4 ? images_.size(3) : 1;
  // (x / 255 - mean) / std as one multiply-add, which vectorizes (a 256-entry table lookup is
  // 3x slower); it differs from the naive formula by a few ulps.
  scale_ = 1.f / (255.f * options.std);
  bias_ = -options.mean / options.std;
  set_epoch(0);
}

int64_t InMemoryBatcher::num_batches() const {
  const int64_t b = options_.batch_size;
  return options_.drop_last ? n_ / b : (n_ + b - 1) / b;
}

void InMemoryBatcher::set_epoch(int64_t epoch) {
  epoch_ = epoch;
  order_.resize(static_cast<size_t>(n_));
  for (int64_t i = 0; i < n_; ++i) order_[i] = i;
  if (!options_.shuffle) return;
  // Fisher-Yates from the back: step i swaps i with j uniform in [0, i]. j comes from 64 Philox
  // bits by multiply-shift (bias below n / 2^64): a pure function of (seed, epoch, i).
  for (int64_t i = n_ - 1; i > 0; --i) {
    const auto r =
        philox4x32(static_cast<uint64_t>(epoch), static_cast<uint64_t>(i), options_.seed);
    const uint64_t bits = (uint64_t{r[1]} << 32) | r[0];
    const auto j = static_cast<int64_t>(
        (static_cast<unsigned __int128>(bits) * static_cast<uint64_t>(i + 1)) >> 64);
    std::swap(order_[i], order_[j]);
  }
}

InMemoryBatcher::Batch InMemoryBatcher::batch(int64_t index) const {
  const int64_t nb = num_batches();
  STOKE_CHECK(index >= 0 && index < nb, kBatcherOp, "batch index ", index, " out of range: ", nb,
              " batches (", n_, " samples, batch_size ", options_.batch_size,
              options_.drop_last ? ", drop_last" : "", ")");
  const int64_t start = index * options_.batch_size;
  const int64_t count = std::min(options_.batch_size, n_ - start);
  const int64_t hw = h_ * w_, sample = hw * c_;
  Batch out;
  out.images = empty({count, c_, h_, w_}, {.dtype = DType::f32});
  out.labels = empty({count}, {.dtype = DType::i64});
  const uint8_t* src = images_.data<uint8_t>();
  const int64_t* labels = labels_.data<int64_t>();
  float* dst = out.images.data<float>();
  int64_t* dst_labels = out.labels.data<int64_t>();
  const int64_t* order = order_.data() + start;
  const float scale = scale_, bias = bias_;
  const int64_t c = c_, h = h_, w = w_;
  const int64_t pad = options_.random_crop_padding;
  const bool flip = options_.horizontal_flip, augment = pad > 0 || flip;
  // Augmentation randomness: a Philox block per (epoch, sample index), under a key distinct from
  // the shuffle's.
  const uint64_t aug_key = options_.seed ^ 0x5bd1e9955bd1e995ull;
  const uint64_t epoch = static_cast<uint64_t>(epoch_);
  // Samples per chunk: enough bytes that a chunk outweighs the pool's dispatch cost.
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(sample, 1));
  parallel_for(0, count, grain, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) {
      const uint8_t* s = src + order[k] * sample;
      float* d = dst + k * sample;
      dst_labels[k] = labels[order[k]];
      if (augment) {
        const auto r = philox4x32(epoch, static_cast<uint64_t>(order[k]), aug_key);
        const int64_t dy = pad > 0 ? static_cast<int64_t>(r[0] % (2 * pad + 1)) - pad : 0;
        const int64_t dx = pad > 0 ? static_cast<int64_t>(r[1] % (2 * pad + 1)) - pad : 0;
        const bool mirror = flip && (r[2] & 1u);
        // Output (y, x) reads source (y + dy, x' + dx) with x' = x or w - 1 - x; outside the
        // image is the zero padding.
        for (int64_t ch = 0; ch < c; ++ch)
          for (int64_t y = 0; y < h; ++y) {
            float* drow = d + ch * hw + y * w;
            const int64_t sy = y + dy;
            for (int64_t x = 0; x < w; ++x) {
              const int64_t sx = (mirror ? w - 1 - x : x) + dx;
              const bool inside = sy >= 0 && sy < h && sx >= 0 && sx < w;
              const float v = inside ? static_cast<float>(s[(sy * w + sx) * c + ch]) : 0.f;
              drow[x] = v * scale + bias;
            }
          }
      } else if (c == 1) {
        for (int64_t p = 0; p < hw; ++p) d[p] = static_cast<float>(s[p]) * scale + bias;
      } else {
        // (H, W, C) -> (C, H, W): one output plane at a time, reading the channel strided.
        for (int64_t ch = 0; ch < c; ++ch) {
          float* dc = d + ch * hw;
          const uint8_t* sc = s + ch;
          for (int64_t p = 0; p < hw; ++p) dc[p] = static_cast<float>(sc[p * c]) * scale + bias;
        }
      }
    }
  });
  return out;
}

}  // namespace stoke::data
