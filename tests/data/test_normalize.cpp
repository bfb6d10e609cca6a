// normalize: u8 NHWC -> f32/f16 NCHW against the literal formula, per channel; crop_flip_normalize
// against the loader's RandomCrop + HorizontalFlip followed by normalize.
#include <catch2/catch.hpp>
#include <cmath>
#include <set>

#include "core/tensor.h"
#include "data/normalize.h"
#include "data/transforms.h"
#include "stoke/stoke.h"

using namespace stoke;
using namespace stoke::data;
using Catch::Contains;

namespace {

Tensor make_u8(int64_t n, int64_t h, int64_t w, int64_t c) {
  Tensor t = empty({n, h, w, c}, {.dtype = DType::u8});
  uint8_t* p = t.data<uint8_t>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<uint8_t>((i * 31 + 7) % 256);
  return t;
}

// (x / 255 - mean[c]) / std[c] at (n, c, y, x), computed literally in double.
double reference(const Tensor& u8, int64_t n, int64_t ch, int64_t y, int64_t x,
                 const std::vector<float>& mean, const std::vector<float>& std) {
  const int64_t h = u8.size(1), w = u8.size(2), c = u8.size(3);
  const double v = u8.data<uint8_t>()[((n * h + y) * w + x) * c + ch];
  const double m = mean.size() == 1 ? mean[0] : mean[static_cast<size_t>(ch)];
  const double s = std.size() == 1 ? std[0] : std[static_cast<size_t>(ch)];
  return (v / 255.0 - m) / s;
}

}  // namespace

TEST_CASE("normalize: f32 and f16 NCHW equal the literal formula", "[data][normalize]") {
  struct Case {
    int64_t n, h, w, c;
    std::vector<float> mean, std;
  };
  // C = 1 and 3 take specialized loops, 4 the generic one; 1100 columns cross the f16 buffer.
  const std::vector<Case> cases = {{5, 28, 28, 1, {0.286f}, {0.353f}},
                                   {3, 9, 11, 3, {0.49f, 0.48f, 0.45f}, {0.25f, 0.24f, 0.26f}},
                                   {2, 5, 7, 4, {0.5f}, {0.5f}},
                                   {1, 2, 1100, 1, {0.1f}, {2.f}}};
  for (const Case& k : cases) {
    INFO("shape " << k.n << "x" << k.h << "x" << k.w << "x" << k.c);
    const Tensor in = make_u8(k.n, k.h, k.w, k.c);
    const Tensor f32 = normalize(in, {.mean = k.mean, .std = k.std});
    const Tensor f16 = normalize(in, {.mean = k.mean, .std = k.std, .dtype = DType::f16});
    REQUIRE(f32.shape() == Shape({k.n, k.c, k.h, k.w}));
    REQUIRE(f16.dtype() == DType::f16);
    const float* a = f32.data<float>();
    const Half* b = f16.data<Half>();
    int64_t i = 0;
    for (int64_t n = 0; n < k.n; ++n)
      for (int64_t ch = 0; ch < k.c; ++ch)
        for (int64_t y = 0; y < k.h; ++y)
          for (int64_t x = 0; x < k.w; ++x, ++i) {
            const double want = reference(in, n, ch, y, x, k.mean, k.std);
            // x * s + b in f32 with s = fl(1 / fl(255 std)) (2 roundings) and b = fl(-mean / std):
            // |got - want| <= u (3|x s| + |b| + |got|) <= u (4|want| + 4|b|), u = 2^-24; the
            // largest |b| here is 0.49 / 0.25 = 1.96, so under 7.1e-7 (1 + |want|).
            REQUIRE(std::abs(a[i] - want) <= 1e-6 * (1 + std::abs(want)));
            // f16 is the f32 result rounded to nearest even: the same row_f32 on the same bytes,
            // then a correctly rounded conversion (F16C or core/half.h, one answer either way).
            REQUIRE(b[i].bits == Half(a[i]).bits);
          }
  }
}

TEST_CASE("normalize: into a reused buffer, and errors name what is wrong", "[data][normalize]") {
  const Tensor in = make_u8(2, 3, 3, 1);
  Tensor out = empty({2, 1, 3, 3});
  normalize_into(in, out, {.mean = {0.5f}, .std = {0.25f}});
  // As above with b = -2 exact and s rounded once: 2u |x s| + u |got| <= 2u * 4 + 2u = 6e-7.
  CHECK(out.data<float>()[4] == Approx(reference(in, 0, 0, 1, 1, {0.5f}, {0.25f})).margin(1e-6));
  CHECK_THROWS_WITH(normalize(in.to(DType::f32)), Contains("normalize") && Contains("u8"));
  CHECK_THROWS_WITH(normalize(in, {.mean = {0.1f, 0.2f}}),
                    Contains("1 or 1 mean values") && Contains("got 2"));
  CHECK_THROWS_WITH(normalize(in, {.std = {0.f}}), Contains("std != 0"));
  CHECK_THROWS_WITH(normalize(in, {.dtype = DType::f64}), Contains("f32 or f16"));
  Tensor wrong = empty({2, 3, 3, 1});
  CHECK_THROWS_WITH(normalize_into(in, wrong), Contains("[2, 1, 3, 3]"));
}

// --- crop_flip_normalize: augmentation folded into the normalize pass ---------------------------

namespace {

// Images of random bytes (a fixed generator), (n, h, w, c).
Tensor random_u8(int64_t n, int64_t h, int64_t w, int64_t c, uint64_t seed) {
  Generator g(seed);
  return randint(0, 256, {n, h, w, c}, {.dtype = DType::u8}, &g);
}

// What the loader's workers produce: each image through Compose(RandomCrop, HorizontalFlip) with
// the sample's stream, then normalize() of the stacked batch.
Tensor via_workers(const Tensor& images, const std::vector<int64_t>& indices,
                   const CropFlipOptions& o, uint64_t seed, int64_t epoch,
                   const NormalizeOptions& norm) {
  const int64_t n = images.size(0), h = images.size(1), w = images.size(2), c = images.size(3);
  const Compose t({std::make_shared<RandomCrop>(RandomCropOptions{
                       .height = o.height, .width = o.width, .padding = o.padding}),
                   std::make_shared<HorizontalFlip>(HorizontalFlipOptions{.p = o.flip_p})});
  const int64_t oh = o.height > 0 ? o.height : h, ow = o.width > 0 ? o.width : w;
  Tensor batch = empty({n, oh, ow, c}, {.dtype = DType::u8});
  for (int64_t i = 0; i < n; ++i) {
    Example ex, scratch;
    ex.height = h;
    ex.width = w;
    ex.channels = c;
    const uint8_t* src = images.data<uint8_t>() + i * h * w * c;
    ex.pixels.assign(src, src + h * w * c);
    SampleRng rng(seed, epoch, indices[static_cast<size_t>(i)]);
    t.apply(ex, scratch, rng);
    REQUIRE(ex.pixels.size() == static_cast<size_t>(oh * ow * c));
    std::copy(ex.pixels.begin(), ex.pixels.end(), batch.data<uint8_t>() + i * oh * ow * c);
  }
  return normalize(batch, norm);
}

Tensor index_tensor(const std::vector<int64_t>& v) {
  Tensor t = empty({static_cast<int64_t>(v.size())}, {.dtype = DType::i64});
  std::copy(v.begin(), v.end(), t.data<int64_t>());
  return t;
}

}  // namespace

TEST_CASE("crop_flip_normalize: the same batch as RandomCrop + HorizontalFlip on the workers",
          "[data][normalize][crop_flip]") {
  struct Case {
    int64_t n, h, w, c;
    CropFlipOptions o;
  };
  // Padding 0 / 2 / 4 (crops past the edge), a smaller crop, never and always flipped, 1, 3 and 5
  // channels, and a crop larger than the image (all padding at some offsets).
  const std::vector<Case> cases = {
      {16, 28, 28, 1, {.padding = 2}},
      {12, 9, 11, 3, {.padding = 4}},
      {8, 10, 13, 1, {.height = 6, .width = 7, .padding = 1}},
      {6, 8, 8, 5, {.padding = 0, .flip_p = 1.f}},
      {6, 8, 8, 3, {.padding = 3, .flip_p = 0.f}},
      {5, 4, 5, 1, {.height = 9, .width = 12, .padding = 4}},
  };
  const NormalizeOptions norm1 = {.mean = {0.286f}, .std = {0.353f}};
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const Case& k = cases[ci];
    INFO("case " << ci);
    const Tensor images = random_u8(k.n, k.h, k.w, k.c, 10 + ci);
    std::vector<int64_t> idx;
    for (int64_t i = 0; i < k.n; ++i) idx.push_back(1000 + 37 * i);
    NormalizeOptions norm = norm1;
    if (k.c > 1) {
      norm.mean.assign(static_cast<size_t>(k.c), 0.f);
      norm.std.assign(static_cast<size_t>(k.c), 0.f);
      for (int64_t ch = 0; ch < k.c; ++ch) {
        norm.mean[static_cast<size_t>(ch)] = 0.4f + 0.02f * static_cast<float>(ch);
        norm.std[static_cast<size_t>(ch)] = 0.2f + 0.01f * static_cast<float>(ch);
      }
    }
    for (int64_t epoch : {0, 3}) {
      const Tensor crops = draw_crops(index_tensor(idx), k.h, k.w, k.o, 7, epoch);
      const Tensor want = via_workers(images, idx, k.o, 7, epoch, norm);
      const Tensor got = crop_flip_normalize(images, crops, norm, k.o.height, k.o.width);
      REQUIRE(got.shape() == want.shape());
      // Bit for bit: crops and flips only select bytes, the padding is bias (= 0 * scale + bias),
      // and both passes compute fl(fl(x * scale) + bias) per pixel (ops/cpu/normalize.cpp's
      // row_f32 and crop_flip_span, written alike; FMA contraction is off project-wide, issue 37,
      // so the compiler cannot fuse one and not the other).
      CHECK(got.to_vector<float>() == want.to_vector<float>());
      // f16 and bf16: the f32 result rounded once.
      for (DType d : {DType::f16, DType::bf16}) {
        NormalizeOptions low = norm;
        low.dtype = d;
        const Tensor h = crop_flip_normalize(images, crops, low, k.o.height, k.o.width);
        CHECK(h.dtype() == d);
        CHECK(h.to(DType::f32).to_vector<float>() == want.to(d).to(DType::f32).to_vector<float>());
      }
    }
  }
  // The draws vary: over 64 samples of padding 2 both flips and several offsets occur.
  std::vector<int64_t> many(64);
  for (int64_t i = 0; i < 64; ++i) many[static_cast<size_t>(i)] = i;
  const auto k = draw_crops(index_tensor(many), 28, 28, {.padding = 2}, 1, 0).to_vector<int32_t>();
  std::set<int32_t> tops, flips;
  for (size_t i = 0; i < 64; ++i) {
    tops.insert(k[3 * i]);
    flips.insert(k[3 * i + 2]);
    CHECK(k[3 * i] >= -2);
    CHECK(k[3 * i] <= 2);
  }
  CHECK(tops.size() == 5);
  CHECK(flips.size() == 2);
}

TEST_CASE("crop_flip_normalize: errors name the op and what is wrong",
          "[data][normalize][crop_flip]") {
  const Tensor images = random_u8(2, 4, 4, 1, 1);
  const Tensor idx = index_tensor({0, 1});
  CHECK_THROWS_WITH(draw_crops(idx, 4, 4, {.height = 9, .padding = 2}, 0, 0),
                    Contains("crop_flip") && Contains("expected a crop of at most 8x8"));
  CHECK_THROWS_WITH(draw_crops(idx, 4, 4, {.flip_p = 2.f}, 0, 0),
                    Contains("expected flip_p in [0, 1], got 2"));
  const Tensor crops = draw_crops(idx, 4, 4, {}, 0, 0);
  CHECK_THROWS_WITH(
      crop_flip_normalize(images, crops.to(DType::i64)),
      Contains("crop_flip_normalize") && Contains("expected crops as a contiguous i32"));
  CHECK_THROWS_WITH(crop_flip_normalize(images.narrow(0, 0, 1), crops),
                    Contains("of shape [1, 3]"));
  Tensor bad = crops.clone();
  bad.data<int32_t>()[5] = 2;
  CHECK_THROWS_WITH(crop_flip_normalize(images, bad),
                    Contains("expected flip 0 or 1, got 2 for image 1"));
  CHECK_THROWS_WITH(crop_flip_normalize(images, crops, {.std = {0.f}}),
                    Contains("expected std != 0"));
  CHECK_THROWS_WITH(crop_flip_normalize(images, crops, {.dtype = DType::f64}),
                    Contains("expected an f32, f16 or bf16 output, got f64"));
  // An empty batch is an empty result.
  const Tensor none = empty({0, 4, 4, 1}, {.dtype = DType::u8});
  CHECK(crop_flip_normalize(none, empty({0, 3}, {.dtype = DType::i32})).shape() ==
        Shape({0, 1, 4, 4}));
}

TEST_CASE("normalize and crop_flip_normalize: channels_last output holds the NCHW values",
          "[data][normalize][crop_flip]") {
  // The same multiply-add per value in both layouts (on the CPU the channels_last one is the NCHW
  // pass copied): equal bit for bit, in a tensor whose strides are NHWC's. 3 channels and 1 (a
  // one-channel tensor is dense in both layouts).
  for (int64_t c : {3, 1})
    for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
      INFO("C=" << c << " " << dtype);
      const Tensor images = random_u8(3, 6, 5, c, 40 + static_cast<uint64_t>(c));
      const NormalizeOptions nchw{.mean = {0.4f}, .std = {0.3f}, .dtype = dtype};
      NormalizeOptions nhwc = nchw;
      nhwc.memory_format = MemoryFormat::channels_last;
      const Tensor a = normalize(images, nchw), b = normalize(images, nhwc);
      CHECK(b.is_contiguous(MemoryFormat::channels_last));
      CHECK(b.shape() == a.shape());
      CHECK(b.to(DType::f32).contiguous().to_vector<float>() ==
            a.to(DType::f32).to_vector<float>());
      const Tensor crops =
          draw_crops(index_tensor({0, 1, 2}), 6, 5, {.height = 4, .width = 4, .padding = 2}, 7, 1);
      const Tensor ca = crop_flip_normalize(images, crops, nchw, 4, 4),
                   cb = crop_flip_normalize(images, crops, nhwc, 4, 4);
      CHECK(cb.is_contiguous(MemoryFormat::channels_last));
      CHECK(cb.shape() == Shape({3, c, 4, 4}));
      CHECK(cb.to(DType::f32).contiguous().to_vector<float>() ==
            ca.to(DType::f32).to_vector<float>());
    }
  // An output in neither layout is refused with its strides.
  const Tensor images = random_u8(2, 3, 3, 2, 9);
  Tensor odd = empty({2, 2, 3, 3}).transpose(2, 3);
  CHECK_THROWS_WITH(normalize_into(images, odd),
                    Contains("contiguous or channels_last") && Contains("strides"));
}
