// uint8 transforms against straightforward references: crop of an explicitly padded image (zero
// and reflect), flip, resize, center crop, cutout, composition, and the per-sample streams.
#include <algorithm>
#include <catch2/catch.hpp>
#include <set>
#include <vector>

#include "core/tensor.h"
#include "data/transforms.h"

using namespace stoke;
using namespace stoke::data;
using Catch::Contains;

namespace {

// An h x w x c image whose bytes are all distinct-ish and nonzero.
Example make_image(int64_t h, int64_t w, int64_t c, int salt = 0) {
  Example ex;
  ex.height = h;
  ex.width = w;
  ex.channels = c;
  ex.label = 3;
  ex.pixels.resize(static_cast<size_t>(h * w * c));
  for (size_t i = 0; i < ex.pixels.size(); ++i)
    ex.pixels[i] = static_cast<uint8_t>(1 + (i * 7 + static_cast<size_t>(salt) * 13) % 255);
  return ex;
}

uint8_t at(const Example& e, int64_t y, int64_t x, int64_t ch) {
  return e.pixels[static_cast<size_t>((y * e.width + x) * e.channels + ch)];
}

// Reference: pad explicitly (zero or numpy/torch "reflect"), then take the window at (top, left).
Example reference_crop(const Example& in, int64_t pad, bool reflect, int64_t top, int64_t left,
                       int64_t oh, int64_t ow) {
  const int64_t ph = in.height + 2 * pad, pw = in.width + 2 * pad, c = in.channels;
  std::vector<uint8_t> padded(static_cast<size_t>(ph * pw * c), 0);
  auto refl = [](int64_t i, int64_t n) {
    while (i < 0 || i >= n) i = i < 0 ? -i : 2 * (n - 1) - i;
    return i;
  };
  for (int64_t y = 0; y < ph; ++y)
    for (int64_t x = 0; x < pw; ++x)
      for (int64_t ch = 0; ch < c; ++ch) {
        int64_t sy = y - pad, sx = x - pad;
        const bool inside = sy >= 0 && sy < in.height && sx >= 0 && sx < in.width;
        if (!inside && !reflect) continue;
        sy = refl(sy, in.height);
        sx = refl(sx, in.width);
        padded[static_cast<size_t>((y * pw + x) * c + ch)] = at(in, sy, sx, ch);
      }
  Example out;
  out.height = oh;
  out.width = ow;
  out.channels = c;
  out.label = in.label;
  for (int64_t y = 0; y < oh; ++y)
    for (int64_t x = 0; x < ow; ++x)
      for (int64_t ch = 0; ch < c; ++ch)
        out.pixels.push_back(padded[static_cast<size_t>(((y + top) * pw + x + left) * c + ch)]);
  return out;
}

void check_same(const Example& a, const Example& b) {
  REQUIRE(a.height == b.height);
  REQUIRE(a.width == b.width);
  REQUIRE(a.channels == b.channels);
  CHECK(a.label == b.label);
  CHECK(a.pixels == b.pixels);
}

}  // namespace

TEST_CASE("transforms: the sample stream is a function of (seed, epoch, sample)",
          "[data][transforms]") {
  auto draw = [](uint64_t seed, int64_t epoch, int64_t sample) {
    SampleRng r(seed, epoch, sample);
    std::vector<uint32_t> v;
    for (int i = 0; i < 10; ++i) v.push_back(r.next_u32());  // crosses a Philox block
    return v;
  };
  CHECK(draw(1, 2, 3) == draw(1, 2, 3));
  CHECK(draw(1, 2, 3) != draw(1, 2, 4));
  CHECK(draw(1, 2, 3) != draw(1, 3, 3));
  CHECK(draw(1, 2, 3) != draw(2, 2, 3));
  SampleRng r(0, 0, 0);
  std::set<int64_t> seen;
  for (int i = 0; i < 2000; ++i) {
    const int64_t v = r.below(9);
    REQUIRE(v >= 0);
    REQUIRE(v < 9);
    seen.insert(v);
    const float u = r.uniform();
    REQUIRE(u >= 0.f);
    REQUIRE(u < 1.f);
  }
  CHECK(seen.size() == 9);
}

TEST_CASE("transforms: random crop equals the window of the padded image, zero and reflect",
          "[data][transforms]") {
  for (const bool reflect : {false, true}) {
    for (const int64_t c : {1, 3}) {
      const RandomCrop crop({.height = 5,
                             .width = 6,
                             .padding = 3,
                             .padding_mode = reflect ? PaddingMode::reflect : PaddingMode::zero});
      std::set<std::pair<int64_t, int64_t>> offsets;
      for (int64_t sample = 0; sample < 1500; ++sample) {
        INFO("reflect " << reflect << " c " << c << " sample " << sample);
        const Example in = make_image(7, 8, c, static_cast<int>(sample));
        Example im = in, scratch;
        SampleRng rng(42, 1, sample);
        crop.apply(im, scratch, rng);
        // The same draws, in the same order, give the reference's window.
        SampleRng again(42, 1, sample);
        const int64_t top = again.below(7 + 6 - 5 + 1), left = again.below(8 + 6 - 6 + 1);
        offsets.insert({top, left});
        check_same(im, reference_crop(in, 3, reflect, top, left, 5, 6));
      }
      CHECK(offsets.size() == 9 * 9);  // every window position occurs
    }
  }
  // Same output size as the input (torchvision's RandomCrop(28, padding=4)).
  const RandomCrop same({.padding = 2});
  const Example in = make_image(4, 4, 1);
  Example im = in, scratch;
  SampleRng rng(1, 0, 5);
  same.apply(im, scratch, rng);
  SampleRng again(1, 0, 5);
  const int64_t top = again.below(5), left = again.below(5);
  check_same(im, reference_crop(in, 2, false, top, left, 4, 4));

  Example small = make_image(2, 2, 1);
  CHECK_THROWS_WITH(RandomCrop({.height = 5, .width = 5}).apply(small, scratch, rng),
                    Contains("RandomCrop") && Contains("at most 2x2"));
  small = make_image(2, 2, 1);
  CHECK_THROWS_WITH(
      RandomCrop({.padding = 2, .padding_mode = PaddingMode::reflect}).apply(small, scratch, rng),
      Contains("reflect padding 2"));
}

TEST_CASE("transforms: horizontal flip mirrors rows with probability p", "[data][transforms]") {
  const Example in = make_image(3, 5, 3);
  Example im = in, scratch;
  SampleRng rng(0, 0, 0);
  HorizontalFlip({.p = 1.f}).apply(im, scratch, rng);
  for (int64_t y = 0; y < 3; ++y)
    for (int64_t x = 0; x < 5; ++x)
      for (int64_t ch = 0; ch < 3; ++ch) CHECK(at(im, y, x, ch) == at(in, y, 4 - x, ch));
  im = in;
  HorizontalFlip({.p = 0.f}).apply(im, scratch, rng);
  CHECK(im.pixels == in.pixels);
  int flips = 0;
  const HorizontalFlip half;
  for (int64_t s = 0; s < 1000; ++s) {
    im = in;
    SampleRng r(3, 0, s);
    half.apply(im, scratch, r);
    flips += im.pixels != in.pixels;
  }
  CHECK(flips > 430);
  CHECK(flips < 570);
  CHECK_THROWS_WITH(HorizontalFlip({.p = 2.f}), Contains("p in [0, 1]"));
}

TEST_CASE("transforms: resize is bilinear with half-pixel centres", "[data][transforms]") {
  // 4x4 -> 2x2: each output samples the middle of a 2x2 block, i.e. its rounded mean.
  Example im = make_image(4, 4, 2), scratch;
  const Example in = im;
  SampleRng rng(0, 0, 0);
  Resize({.height = 2, .width = 2}).apply(im, scratch, rng);
  REQUIRE(im.height == 2);
  REQUIRE(im.width == 2);
  REQUIRE(im.pixels.size() == 8);
  for (int64_t y = 0; y < 2; ++y)
    for (int64_t x = 0; x < 2; ++x)
      for (int64_t ch = 0; ch < 2; ++ch) {
        const float mean = (at(in, 2 * y, 2 * x, ch) + at(in, 2 * y, 2 * x + 1, ch) +
                            at(in, 2 * y + 1, 2 * x, ch) + at(in, 2 * y + 1, 2 * x + 1, ch)) /
                           4.f;
        // The taps' weights are 0.5, so the bilinear value is the mean exactly (quarter integers
        // in f32); + 0.5 and truncation round it: within half a level, nothing more.
        CHECK(std::abs(at(im, y, x, ch) - mean) <= 0.5f);
      }
  // A constant image stays constant at any size.
  Example flat = make_image(3, 5, 1);
  std::fill(flat.pixels.begin(), flat.pixels.end(), 77);
  Resize({.height = 7, .width = 4}).apply(flat, scratch, rng);
  CHECK(flat.height == 7);
  CHECK(std::all_of(flat.pixels.begin(), flat.pixels.end(), [](uint8_t v) { return v == 77; }));
}

TEST_CASE("transforms: center crop takes the middle window", "[data][transforms]") {
  const Example in = make_image(7, 6, 3);
  Example im = in, scratch;
  SampleRng rng(0, 0, 0);
  CenterCrop({.height = 4, .width = 3}).apply(im, scratch, rng);
  check_same(im, reference_crop(in, 0, false, 1, 1, 4, 3));
  CHECK_THROWS_WITH(CenterCrop({.height = 8, .width = 3}).apply(im, scratch, rng),
                    Contains("CenterCrop") && Contains("at least 8x3") && Contains("got 4x3"));
}

TEST_CASE("transforms: cutout fills a clipped square", "[data][transforms]") {
  const Example in = make_image(10, 10, 3);  // no zero bytes
  const Cutout cut({.size = 4});
  for (int64_t s = 0; s < 50; ++s) {
    Example im = in, scratch;
    SampleRng rng(1, 0, s);
    cut.apply(im, scratch, rng);
    SampleRng again(1, 0, s);
    const int64_t cy = again.below(10), cx = again.below(10);
    int64_t zeros = 0;
    for (int64_t y = 0; y < 10; ++y)
      for (int64_t x = 0; x < 10; ++x) {
        const bool inside = y >= cy - 2 && y < cy + 2 && x >= cx - 2 && x < cx + 2;
        for (int64_t ch = 0; ch < 3; ++ch) {
          CHECK(at(im, y, x, ch) == (inside ? 0 : at(in, y, x, ch)));
          zeros += at(im, y, x, ch) == 0;
        }
      }
    CHECK(zeros <= 4 * 4 * 3);
  }
}

TEST_CASE("transforms: compose applies in order from one stream", "[data][transforms]") {
  auto crop = std::make_shared<RandomCrop>(RandomCropOptions{.padding = 2});
  auto flip = std::make_shared<HorizontalFlip>();
  const Compose both({crop, flip});
  CHECK(both.name() == "Compose(RandomCrop(0x0, padding 2), HorizontalFlip(p 0.5))");
  const Example in = make_image(6, 6, 1);
  for (int64_t s = 0; s < 20; ++s) {
    Example a = in, b = in, scratch;
    SampleRng r1(5, 2, s), r2(5, 2, s);
    both.apply(a, scratch, r1);
    crop->apply(b, scratch, r2);
    flip->apply(b, scratch, r2);
    check_same(a, b);
  }
  CHECK_THROWS_WITH(Compose({nullptr}), Contains("transform 0 is null"));
}
