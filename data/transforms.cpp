#include "data/transforms.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "core/error.h"
#include "core/random.h"
#include "data/resize.h"

namespace stoke::data {

namespace {

// Distinct from the shuffle's key (the seed itself), as in InMemoryBatcher.
constexpr uint64_t kAugmentKey = 0x5bd1e9955bd1e995ull;

void check_image(const Example& im, const char* op) {
  STOKE_CHECK(im.height > 0 && im.width > 0 && im.channels > 0, op,
              "expected a non-empty HWC image, got ", im.height, "x", im.width, "x", im.channels);
  STOKE_CHECK(static_cast<int64_t>(im.pixels.size()) == im.height * im.width * im.channels, op,
              "expected ", im.height * im.width * im.channels, " bytes for a ", im.height, "x",
              im.width, "x", im.channels, " image, got ", im.pixels.size());
}

// Shapes `out` as h x w x c and sizes its buffer (keeping capacity); copies the label.
void prepare(Example& out, const Example& in, int64_t h, int64_t w) {
  out.height = h;
  out.width = w;
  out.channels = in.channels;
  out.label = in.label;
  out.pixels.resize(static_cast<size_t>(h * w * in.channels));
}

// torchvision's "reflect" padding for an index at most n - 1 outside [0, n).
inline int64_t reflect(int64_t i, int64_t n) {
  if (i < 0) return -i;
  if (i >= n) return 2 * (n - 1) - i;
  return i;
}

}  // namespace

SampleRng::SampleRng(uint64_t seed, int64_t epoch, int64_t sample)
    : counter_lo_(static_cast<uint64_t>(epoch)),
      // Block b of sample s is counter (epoch, s * 2^16 + b): 65,536 blocks per sample are far
      // more than any composition draws, and sample indices up to 2^48 stay distinct.
      counter_hi_(static_cast<uint64_t>(sample) << 16),
      key_(seed ^ kAugmentKey) {}

uint32_t SampleRng::next_u32() {
  if (used_ == 4) {
    const auto r = philox4x32(counter_lo_, counter_hi_++, key_);
    std::copy(r.begin(), r.end(), block_);
    used_ = 0;
  }
  return block_[used_++];
}

float SampleRng::uniform() {
  return uint32_to_unit_float(next_u32());
}

int64_t SampleRng::below(int64_t n) {
  return static_cast<int64_t>((uint64_t{next_u32()} * static_cast<uint64_t>(n)) >> 32);
}

// --- RandomCrop ---------------------------------------------------------------------------------

RandomCrop::RandomCrop(RandomCropOptions options) : o_(options) {
  STOKE_CHECK(o_.height >= 0 && o_.width >= 0 && o_.padding >= 0, "RandomCrop",
              "expected height, width, padding >= 0, got ", o_.height, ", ", o_.width, ", ",
              o_.padding);
}

std::string RandomCrop::name() const {
  return stoke::detail::str_cat("RandomCrop(", o_.height, "x", o_.width, ", padding ", o_.padding,
                                o_.padding_mode == PaddingMode::reflect ? ", reflect)" : ")");
}

void RandomCrop::apply(Example& image, Example& scratch, SampleRng& rng) const {
  check_image(image, "RandomCrop");
  const int64_t h = image.height, w = image.width, c = image.channels, p = o_.padding;
  const int64_t oh = o_.height > 0 ? o_.height : h, ow = o_.width > 0 ? o_.width : w;
  STOKE_CHECK(oh <= h + 2 * p && ow <= w + 2 * p, "RandomCrop", "expected a crop of at most ",
              h + 2 * p, "x", w + 2 * p, " (", h, "x", w, " padded by ", p, "), got ", name());
  const bool reflect_mode = o_.padding_mode == PaddingMode::reflect;
  STOKE_CHECK(!reflect_mode || (p < h && p < w), "RandomCrop", "reflect padding ", p,
              " needs an image larger than the padding, got ", h, "x", w);
  // Top-left corner of the crop in padded coordinates; source = padded - p.
  const int64_t dy = rng.below(h + 2 * p - oh + 1) - p;
  const int64_t dx = rng.below(w + 2 * p - ow + 1) - p;
  if (dy == 0 && dx == 0 && oh == h && ow == w) return;  // the identity crop
  prepare(scratch, image, oh, ow);
  const uint8_t* src = image.pixels.data();
  uint8_t* dst = scratch.pixels.data();
  // Output columns [x0, x1) read inside the image; the rest is padding.
  const int64_t x0 = std::clamp<int64_t>(-dx, 0, ow), x1 = std::clamp<int64_t>(w - dx, x0, ow);
  for (int64_t y = 0; y < oh; ++y) {
    uint8_t* drow = dst + y * ow * c;
    int64_t sy = y + dy;
    if (sy < 0 || sy >= h) {
      if (!reflect_mode) {
        std::memset(drow, 0, static_cast<size_t>(ow * c));
        continue;
      }
      sy = reflect(sy, h);
    }
    const uint8_t* srow = src + sy * w * c;
    if (x1 > x0)
      std::memcpy(drow + x0 * c, srow + (x0 + dx) * c, static_cast<size_t>((x1 - x0) * c));
    if (!reflect_mode) {
      std::memset(drow, 0, static_cast<size_t>(x0 * c));
      std::memset(drow + x1 * c, 0, static_cast<size_t>((ow - x1) * c));
    } else {
      for (int64_t x = 0; x < x0; ++x)
        std::memcpy(drow + x * c, srow + reflect(x + dx, w) * c, static_cast<size_t>(c));
      for (int64_t x = x1; x < ow; ++x)
        std::memcpy(drow + x * c, srow + reflect(x + dx, w) * c, static_cast<size_t>(c));
    }
  }
  std::swap(image, scratch);
}

// --- HorizontalFlip -----------------------------------------------------------------------------

HorizontalFlip::HorizontalFlip(HorizontalFlipOptions options) : o_(options) {
  STOKE_CHECK(o_.p >= 0.f && o_.p <= 1.f, "HorizontalFlip", "expected p in [0, 1], got ", o_.p);
}

std::string HorizontalFlip::name() const {
  return stoke::detail::str_cat("HorizontalFlip(p ", o_.p, ")");
}

void HorizontalFlip::apply(Example& image, Example&, SampleRng& rng) const {
  check_image(image, "HorizontalFlip");
  // Always draw, so that the transforms after this one see the same stream either way.
  if (!(rng.uniform() < o_.p)) return;
  const int64_t h = image.height, w = image.width, c = image.channels;
  uint8_t* px = image.pixels.data();
  for (int64_t y = 0; y < h; ++y) {
    uint8_t* row = px + y * w * c;
    if (c == 1) {
      std::reverse(row, row + w);
      continue;
    }
    for (int64_t a = 0, b = w - 1; a < b; ++a, --b)
      std::swap_ranges(row + a * c, row + a * c + c, row + b * c);
  }
}

// --- Resize -------------------------------------------------------------------------------------

Resize::Resize(ResizeOptions options) : o_(options) {
  STOKE_CHECK(o_.height > 0 && o_.width > 0, "Resize", "expected height, width > 0, got ",
              o_.height, "x", o_.width);
}

std::string Resize::name() const {
  return stoke::detail::str_cat("Resize(", o_.height, "x", o_.width, ")");
}

void Resize::apply(Example& image, Example& scratch, SampleRng&) const {
  check_image(image, "Resize");
  const int64_t h = image.height, w = image.width, c = image.channels;
  const int64_t oh = o_.height, ow = o_.width;
  if (oh == h && ow == w) return;
  prepare(scratch, image, oh, ow);
  // The packer's bilinear resize (data/resize.h), so packed and on-the-fly resizing agree.
  resize_window(image.pixels.data(), h, w, c, oh, ow, 0, 0, oh, ow, scratch.pixels.data());
  std::swap(image, scratch);
}

// --- CenterCrop ---------------------------------------------------------------------------------

CenterCrop::CenterCrop(CenterCropOptions options) : o_(options) {
  STOKE_CHECK(o_.height > 0 && o_.width > 0, "CenterCrop", "expected height, width > 0, got ",
              o_.height, "x", o_.width);
}

std::string CenterCrop::name() const {
  return stoke::detail::str_cat("CenterCrop(", o_.height, "x", o_.width, ")");
}

void CenterCrop::apply(Example& image, Example& scratch, SampleRng&) const {
  check_image(image, "CenterCrop");
  const int64_t h = image.height, w = image.width, c = image.channels;
  STOKE_CHECK(o_.height <= h && o_.width <= w, "CenterCrop", "expected an image of at least ",
              o_.height, "x", o_.width, ", got ", h, "x", w);
  if (o_.height == h && o_.width == w) return;
  const int64_t top = (h - o_.height) / 2, left = (w - o_.width) / 2;
  prepare(scratch, image, o_.height, o_.width);
  for (int64_t y = 0; y < o_.height; ++y)
    std::memcpy(scratch.pixels.data() + y * o_.width * c,
                image.pixels.data() + ((top + y) * w + left) * c,
                static_cast<size_t>(o_.width * c));
  std::swap(image, scratch);
}

// --- Cutout -------------------------------------------------------------------------------------

Cutout::Cutout(CutoutOptions options) : o_(options) {
  STOKE_CHECK(o_.size > 0 && o_.count >= 0, "Cutout", "expected size > 0 and count >= 0, got ",
              o_.size, " and ", o_.count);
}

std::string Cutout::name() const {
  return stoke::detail::str_cat("Cutout(", o_.size, ", count ", o_.count, ")");
}

void Cutout::apply(Example& image, Example&, SampleRng& rng) const {
  check_image(image, "Cutout");
  const int64_t h = image.height, w = image.width, c = image.channels;
  for (int64_t k = 0; k < o_.count; ++k) {
    const int64_t cy = rng.below(h), cx = rng.below(w);
    const int64_t y0 = std::max<int64_t>(cy - o_.size / 2, 0);
    const int64_t y1 = std::min<int64_t>(cy - o_.size / 2 + o_.size, h);
    const int64_t x0 = std::max<int64_t>(cx - o_.size / 2, 0);
    const int64_t x1 = std::min<int64_t>(cx - o_.size / 2 + o_.size, w);
    for (int64_t y = y0; y < y1; ++y)
      std::memset(image.pixels.data() + (y * w + x0) * c, o_.fill,
                  static_cast<size_t>((x1 - x0) * c));
  }
}

// --- Compose ------------------------------------------------------------------------------------

Compose::Compose(std::vector<std::shared_ptr<const Transform>> transforms)
    : transforms_(std::move(transforms)) {
  for (size_t i = 0; i < transforms_.size(); ++i)
    STOKE_CHECK(transforms_[i] != nullptr, "Compose", "transform ", i, " is null");
}

std::string Compose::name() const {
  std::string s = "Compose(";
  for (size_t i = 0; i < transforms_.size(); ++i) {
    if (i > 0) s += ", ";
    s += transforms_[i]->name();
  }
  s += ")";
  return s;
}

void Compose::apply(Example& image, Example& scratch, SampleRng& rng) const {
  for (const auto& t : transforms_) t->apply(image, scratch, rng);
}

}  // namespace stoke::data
