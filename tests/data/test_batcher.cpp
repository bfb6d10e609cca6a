#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <numeric>
#include <vector>

#include "data/batcher.h"
#include "stoke/stoke.h"

using namespace stoke;
using Catch::Contains;
using data::BatcherOptions;
using data::InMemoryBatcher;

namespace {

// u8 images whose bytes identify sample and position; shape (n, h, w) or (n, h, w, c).
Tensor make_images(const Shape& shape) {
  Tensor t = empty(shape, {.dtype = DType::u8});
  uint8_t* p = t.data<uint8_t>();
  const int64_t per = t.numel() / shape[0];
  for (int64_t i = 0; i < shape[0]; ++i)
    for (int64_t j = 0; j < per; ++j)
      p[i * per + j] = static_cast<uint8_t>((i * 37 + j * 11) % 256);
  return t;
}

// Labels 1000 + i, so that a label names its sample.
Tensor make_labels(int64_t n) {
  Tensor t = empty({n}, {.dtype = DType::i64});
  for (int64_t i = 0; i < n; ++i) t.data<int64_t>()[i] = 1000 + i;
  return t;
}

bool is_permutation(const std::vector<int64_t>& order, int64_t n) {
  std::vector<int64_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> iota(static_cast<size_t>(n));
  std::iota(iota.begin(), iota.end(), 0);
  return sorted == iota;
}

// The contents of every batch of the current epoch.
std::vector<std::pair<std::vector<float>, std::vector<int64_t>>> all_batches(
    const InMemoryBatcher& b) {
  std::vector<std::pair<std::vector<float>, std::vector<int64_t>>> out;
  for (int64_t i = 0; i < b.num_batches(); ++i) {
    InMemoryBatcher::Batch batch = b.batch(i);
    out.emplace_back(batch.images.to_vector<float>(), batch.labels.to_vector<int64_t>());
  }
  return out;
}

}  // namespace

TEST_CASE("batcher: each epoch is a deterministic permutation", "[data][batcher]") {
  const int64_t n = 103;
  Tensor images = make_images({n, 4, 5});
  Tensor labels = make_labels(n);
  InMemoryBatcher b(images, labels, {.batch_size = 10, .seed = 7});
  CHECK(b.size() == n);
  std::vector<std::vector<int64_t>> orders;
  for (int64_t epoch = 0; epoch < 4; ++epoch) {
    b.set_epoch(epoch);
    INFO("epoch " << epoch);
    CHECK(is_permutation(b.order(), n));
    for (const auto& previous : orders) CHECK(b.order() != previous);
    orders.push_back(b.order());
  }
  // Same (seed, epoch): same order, in this batcher and a new one; another seed differs.
  b.set_epoch(1);
  CHECK(b.order() == orders[1]);
  InMemoryBatcher again(images, labels, {.batch_size = 10, .seed = 7});
  CHECK(again.order() == orders[0]);
  InMemoryBatcher other(images, labels, {.batch_size = 10, .seed = 8});
  CHECK(other.order() != orders[0]);
  // No shuffle: dataset order in every epoch.
  InMemoryBatcher plain(images, labels, {.batch_size = 10, .shuffle = false});
  std::vector<int64_t> iota(n);
  std::iota(iota.begin(), iota.end(), 0);
  for (int64_t epoch : {0, 3}) {
    plain.set_epoch(epoch);
    CHECK(plain.order() == iota);
  }
}

TEST_CASE("batcher: same batches for 1 and 2 threads", "[data][batcher]") {
  const int threads = num_threads();
  Tensor images = make_images({300, 8, 8, 3});
  Tensor labels = make_labels(300);
  std::vector<std::vector<int64_t>> orders;
  std::vector<std::vector<std::pair<std::vector<float>, std::vector<int64_t>>>> batches;
  for (int t : {1, 2}) {
    set_num_threads(t);
    InMemoryBatcher b(images, labels, {.batch_size = 64, .seed = 3, .mean = 0.5f, .std = 0.2f});
    b.set_epoch(5);
    orders.push_back(b.order());
    batches.push_back(all_batches(b));
  }
  set_num_threads(threads);
  CHECK(orders[0] == orders[1]);
  CHECK(batches[0] == batches[1]);
}

TEST_CASE("batcher: Fisher-Yates is uniform over permutations", "[data][batcher]") {
  // All 3! orders of 3 samples, each about equally often (1000 expected; sigma ~ 29).
  InMemoryBatcher b(make_images({3, 1, 1}), make_labels(3), {.batch_size = 1, .seed = 11});
  std::map<std::vector<int64_t>, int> counts;
  for (int64_t epoch = 0; epoch < 6000; ++epoch) {
    b.set_epoch(epoch);
    ++counts[b.order()];
  }
  CHECK(counts.size() == 6);
  for (const auto& [order, count] : counts) {
    INFO(order[0] << order[1] << order[2]);
    CHECK(count > 850);
    CHECK(count < 1150);
  }
}

TEST_CASE("batcher: batches cover every sample once", "[data][batcher]") {
  const int64_t n = 103;
  Tensor images = make_images({n, 2, 3});
  Tensor labels = make_labels(n);
  for (bool drop_last : {false, true}) {
    INFO("drop_last " << drop_last);
    InMemoryBatcher b(images, labels, {.batch_size = 10, .drop_last = drop_last, .seed = 1});
    b.set_epoch(2);
    const int64_t nb = drop_last ? 10 : 11;
    REQUIRE(b.num_batches() == nb);
    std::vector<int64_t> seen;
    for (int64_t i = 0; i < nb; ++i) {
      InMemoryBatcher::Batch batch = b.batch(i);
      const int64_t expected = (!drop_last && i == nb - 1) ? 3 : 10;
      CHECK(batch.images.shape() == Shape{expected, 1, 2, 3});
      CHECK(batch.labels.shape() == Shape{expected});
      for (int64_t label : batch.labels.to_vector<int64_t>()) seen.push_back(label - 1000);
    }
    // In epoch order: batch i holds order()[i * 10 ...].
    CHECK(seen == std::vector<int64_t>(b.order().begin(), b.order().begin() + seen.size()));
    if (!drop_last) CHECK(is_permutation(seen, n));
    std::sort(seen.begin(), seen.end());
    CHECK(std::adjacent_find(seen.begin(), seen.end()) == seen.end());
    CHECK_THROWS_WITH(b.batch(nb),
                      Contains("batch index " + std::to_string(nb) + " out of range") &&
                          Contains(std::to_string(nb) + " batches"));
    CHECK_THROWS_WITH(b.batch(-1), Contains("batch index -1 out of range"));
  }
  // Exactly divisible: drop_last changes nothing.
  InMemoryBatcher even(make_images({20, 2, 2}), make_labels(20),
                       {.batch_size = 5, .drop_last = true});
  CHECK(even.num_batches() == 4);
}

TEST_CASE("batcher: normalization matches the naive formula", "[data][batcher]") {
  const int64_t n = 40;
  Tensor images = make_images({n, 7, 9});
  const float mean = 0.2860f, std = 0.3530f;
  InMemoryBatcher b(images, make_labels(n),
                    {.batch_size = 16, .seed = 4, .mean = mean, .std = std});
  b.set_epoch(1);
  const uint8_t* src = images.data<uint8_t>();
  for (int64_t i = 0; i < b.num_batches(); ++i) {
    InMemoryBatcher::Batch batch = b.batch(i);
    REQUIRE(batch.images.dtype() == DType::f32);
    REQUIRE(batch.labels.dtype() == DType::i64);
    const float* out = batch.images.data<float>();
    for (int64_t k = 0; k < batch.images.size(0); ++k) {
      const int64_t sample = b.order()[i * 16 + k];
      CHECK(batch.labels.data<int64_t>()[k] == 1000 + sample);
      float worst = 0;
      for (int64_t p = 0; p < 63; ++p) {
        const float naive = (static_cast<float>(src[sample * 63 + p]) / 255.f - mean) / std;
        worst = std::max(worst, std::abs(out[k * 63 + p] - naive) / std::max(1.f, std::abs(naive)));
      }
      // x * fl(1 / fl(255 std)) + fl(-mean / std) against ((x / 255) - mean) / std, both in f32:
      // with r the result and b = mean / std (0.81), |got - exact| <= u (4|r| + 4|b|) and
      // |naive - exact| <= u (3|r| + |b|), so |got - naive| <= u (7|r| + 5|b|) <= 11u max(1, |r|)
      // = 6.6e-7 max(1, |r|) (u = 2^-24).
      CHECK(worst <= 1e-6f);
    }
  }
}

TEST_CASE("batcher: (N, H, W, C) input becomes (B, C, H, W)", "[data][batcher]") {
  const int64_t n = 9, h = 3, w = 4, c = 3;
  Tensor images = make_images({n, h, w, c});
  InMemoryBatcher b(images, make_labels(n),
                    {.batch_size = 4, .seed = 2, .mean = 0.5f, .std = 0.25f});
  const uint8_t* src = images.data<uint8_t>();
  for (int64_t i = 0; i < b.num_batches(); ++i) {
    InMemoryBatcher::Batch batch = b.batch(i);
    const int64_t bs = batch.images.size(0);
    REQUIRE(batch.images.shape() == Shape{bs, c, h, w});
    const float* out = batch.images.data<float>();
    int64_t mismatches = 0;
    for (int64_t k = 0; k < bs; ++k) {
      const int64_t s = b.order()[i * 4 + k];
      for (int64_t ch = 0; ch < c; ++ch)
        for (int64_t y = 0; y < h; ++y)
          for (int64_t x = 0; x < w; ++x) {
            const uint8_t v = src[((s * h + y) * w + x) * c + ch];
            const float naive = (static_cast<float>(v) / 255.f - 0.5f) / 0.25f;
            // As above, with b = 2 and 255 * 0.25, 0.5 / 0.25 exact: <= u (5|r| + 6) <= 11u
            // max(1, |r|).
            mismatches += std::abs(out[((k * c + ch) * h + y) * w + x] - naive) >
                          1e-6f * std::max(1.f, std::abs(naive));
          }
    }
    CHECK(mismatches == 0);
  }
}

TEST_CASE("batcher: non-contiguous inputs", "[data][batcher]") {
  // Every other sample of a larger set, and labels through a strided view.
  Tensor images = make_images({20, 3, 3});
  Tensor labels = make_labels(20);
  InMemoryBatcher b(images.slice(0, 0, 20, 2), labels.slice(0, 0, 20, 2),
                    {.batch_size = 10, .shuffle = false});
  InMemoryBatcher::Batch batch = b.batch(0);
  REQUIRE(batch.labels.shape() == Shape{10});
  for (int64_t k = 0; k < 10; ++k) {
    CHECK(batch.labels.data<int64_t>()[k] == 1000 + 2 * k);
    const uint8_t first = images.data<uint8_t>()[2 * k * 9];
    // x * fl(1 / 255) (two roundings) against x / 255 (one): within 3 u = 3 * 2^-24 relative.
    CHECK(batch.images.data<float>()[k * 9] ==
          Approx(static_cast<float>(first) / 255.f).epsilon(3 * 0x1p-24));
  }
}

TEST_CASE("batcher: errors", "[data][batcher]") {
  Tensor images = make_images({10, 2, 2});
  CHECK_THROWS_WITH(
      InMemoryBatcher(images, make_labels(9)),
      Contains("expected one label per image, got 10 images") && Contains("and 9 labels"));
  CHECK_THROWS_WITH(InMemoryBatcher(images.to(DType::f32), make_labels(10)),
                    Contains("expected u8 images, got f32"));
  CHECK_THROWS_WITH(InMemoryBatcher(images, make_labels(10).to(DType::i32)),
                    Contains("expected i64 labels, got i32"));
  CHECK_THROWS_WITH(InMemoryBatcher(images.view({10, 4}), make_labels(10)),
                    Contains("expected images of shape (N, H, W) or (N, H, W, C), got [10, 4]"));
  CHECK_THROWS_WITH(InMemoryBatcher(images, make_labels(10), {.batch_size = 0}),
                    Contains("expected batch_size > 0, got 0"));
}

TEST_CASE("batcher: random crop with zero padding and horizontal flip", "[data][batcher]") {
  // One 4x5 image whose pixels are their own index (0..19), normalization off (mean 0, std 1/255
  // gives x exactly).
  std::vector<uint8_t> px(20);
  for (int i = 0; i < 20; ++i) px[i] = static_cast<uint8_t>(i + 1);
  stoke::Tensor images = stoke::empty({1, 4, 5}, {.dtype = stoke::DType::u8});
  std::copy(px.begin(), px.end(), images.data<uint8_t>());
  stoke::Tensor labels = stoke::empty({1}, {.dtype = stoke::DType::i64});
  labels.data<int64_t>()[0] = 3;
  const float std255 = 1.f / 255.f;
  // x * (1 / (255 * std)) is x up to rounding: compare rounded values.
  auto pixels = [](const stoke::data::InMemoryBatcher& b) {
    std::vector<float> v = b.batch(0).images.to_vector<float>();
    for (float& x : v) x = std::round(x);
    return v;
  };
  stoke::data::InMemoryBatcher flip_only(
      images, labels, {.batch_size = 1, .shuffle = false, .std = std255, .horizontal_flip = true});
  int flipped = 0, kept = 0;
  for (int64_t e = 0; e < 64; ++e) {
    flip_only.set_epoch(e);
    const auto v = pixels(flip_only);
    if (v[0] == 5.f && v[4] == 1.f && v[19] == 16.f) ++flipped;
    if (v[0] == 1.f && v[4] == 5.f && v[19] == 20.f) ++kept;
  }
  CHECK(flipped + kept == 64);  // every epoch is exactly one of the two
  CHECK(flipped > 16);          // both happen (p = 1/2)
  CHECK(kept > 16);
  stoke::data::InMemoryBatcher crop(
      images, labels, {.batch_size = 1, .shuffle = false, .std = std255, .random_crop_padding = 2});
  bool saw_shift = false;
  for (int64_t e = 0; e < 32; ++e) {
    crop.set_epoch(e);
    const auto v = pixels(crop);
    // Each output is either padding (0) or a source pixel, and the source pixels keep their
    // relative layout: find the shift from any nonzero pixel and check all others.
    int64_t dy = 99, dx = 99;
    for (int64_t i = 0; i < 20 && dy == 99; ++i)
      if (v[i] != 0) {
        const int64_t src = static_cast<int64_t>(v[i]) - 1;
        dy = src / 5 - i / 5;
        dx = src % 5 - i % 5;
      }
    REQUIRE(dy != 99);
    CHECK(std::abs(dy) <= 2);
    CHECK(std::abs(dx) <= 2);
    saw_shift = saw_shift || dy != 0 || dx != 0;
    for (int64_t i = 0; i < 20; ++i) {
      const int64_t sy = i / 5 + dy, sx = i % 5 + dx;
      const float want = (sy >= 0 && sy < 4 && sx >= 0 && sx < 5) ? float(sy * 5 + sx + 1) : 0.f;
      REQUIRE(v[i] == want);
    }
  }
  CHECK(saw_shift);
  // Deterministic: same (seed, epoch) -> same augmented batch.
  crop.set_epoch(5);
  const auto a = pixels(crop);
  crop.set_epoch(5);
  CHECK(pixels(crop) == a);
}
