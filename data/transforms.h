// Transforms on uint8 HWC images, applied per sample on the loader's worker threads: random crop
// with zero or reflect padding, horizontal flip, bilinear resize, center crop, cutout, and Compose.
//
// Randomness is per sample, not per worker: a sample's transforms draw from SampleRng, a Philox
// stream keyed by the loader's seed whose counter is (epoch, sample index, block). What happens to
// a sample is therefore a pure function of (seed, epoch, index), so batches are byte-identical for
// any number of workers and on any machine, and a resumed run sees the same augmentations.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace stoke::data {

// The random stream of one sample's transforms (see the file comment). Cheap to construct.
class SampleRng {
 public:
  SampleRng(uint64_t seed, int64_t epoch, int64_t sample);
  // The next 32 random bits.
  uint32_t next_u32();
  // Uniform in [0, 1), from 24 bits.
  float uniform();
  // Uniform integer in [0, n) for n >= 1 (64-bit multiply-shift; bias below n / 2^32).
  int64_t below(int64_t n);

 private:
  uint64_t counter_lo_, counter_hi_, key_;
  uint32_t block_[4] = {0, 0, 0, 0};
  int used_ = 4;  // values of block_ already handed out
};

// A transform of one uint8 HWC image. Implementations are stateless (const apply), so one
// instance serves every worker thread.
class Transform {
 public:
  virtual ~Transform() = default;
  // Transforms `image`, either in place or by writing `scratch` and swapping the two (both keep
  // their buffers' capacity, so a worker's steady state allocates nothing). Throws stoke::Error
  // naming the transform when the image does not fit (e.g. a crop larger than the image).
  virtual void apply(Example& image, Example& scratch, SampleRng& rng) const = 0;
  // "RandomCrop(28, padding 4, reflect)": for messages and logs.
  virtual std::string name() const = 0;
};

enum class PaddingMode { zero, reflect };

// RandomCrop options: {.height = 28, .width = 28, .padding = 4}. height/width 0 = the input's.
struct RandomCropOptions {
  int64_t height = 0;
  int64_t width = 0;
  int64_t padding = 0;  // pixels added on each side before cropping (torchvision's padding=p)
  PaddingMode padding_mode = PaddingMode::zero;  // reflect: torchvision's "reflect" (no edge copy)
};

// A crop at a uniformly random position of the image padded by `padding` on every side.
class RandomCrop : public Transform {
 public:
  explicit RandomCrop(RandomCropOptions options);
  void apply(Example& image, Example& scratch, SampleRng& rng) const override;
  std::string name() const override;

 private:
  RandomCropOptions o_;
};

// HorizontalFlip options: {.p = 0.5}.
struct HorizontalFlipOptions {
  float p = 0.5f;  // probability of mirroring
};

// Mirrors the image left-right with probability p (in place).
class HorizontalFlip : public Transform {
 public:
  explicit HorizontalFlip(HorizontalFlipOptions options = {});
  void apply(Example& image, Example& scratch, SampleRng& rng) const override;
  std::string name() const override;

 private:
  HorizontalFlipOptions o_;
};

// Resize options: {.height = 32, .width = 32}.
struct ResizeOptions {
  int64_t height = 0;
  int64_t width = 0;
};

// Bilinear resize with half-pixel centres (align_corners = false, like torch's interpolate and
// OpenCV), rounded to nearest; no antialiasing, so strong downscaling aliases.
class Resize : public Transform {
 public:
  explicit Resize(ResizeOptions options);
  void apply(Example& image, Example& scratch, SampleRng& rng) const override;
  std::string name() const override;

 private:
  ResizeOptions o_;
};

// CenterCrop options: {.height = 24, .width = 24}.
struct CenterCropOptions {
  int64_t height = 0;
  int64_t width = 0;
};

// The central height x width window (top = (H - height) / 2 rounded down, likewise left). The
// image must be at least that large.
class CenterCrop : public Transform {
 public:
  explicit CenterCrop(CenterCropOptions options);
  void apply(Example& image, Example& scratch, SampleRng& rng) const override;
  std::string name() const override;

 private:
  CenterCropOptions o_;
};

// Cutout options: {.size = 8}.
struct CutoutOptions {
  int64_t size = 0;   // side of the square
  int64_t count = 1;  // squares per image
  uint8_t fill = 0;   // value written into every channel
};

// Cutout (DeVries & Taylor 2017): squares of side `size` centred at uniformly random pixels,
// clipped at the border, filled with `fill` (in place).
class Cutout : public Transform {
 public:
  explicit Cutout(CutoutOptions options);
  void apply(Example& image, Example& scratch, SampleRng& rng) const override;
  std::string name() const override;

 private:
  CutoutOptions o_;
};

// Applies transforms in order, all drawing from the same sample stream.
class Compose : public Transform {
 public:
  explicit Compose(std::vector<std::shared_ptr<const Transform>> transforms);
  void apply(Example& image, Example& scratch, SampleRng& rng) const override;
  std::string name() const override;

 private:
  std::vector<std::shared_ptr<const Transform>> transforms_;
};

}  // namespace stoke::data
