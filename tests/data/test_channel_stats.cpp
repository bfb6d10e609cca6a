// data::channel_stats against an f64 loop over the same pixels, on images of several channels and
// sizes, at 1 and 2 threads; its errors; Fashion-MNIST's published statistics; and the
// per-channel lists of --mean/--std and checkpoint metadata (parse_channels, channels_text).
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "data/channel_stats.h"
#include "data/idx_dataset.h"

using namespace stoke;

namespace {

// Images held in memory, each of its own size (HWC bytes), for closed-form checks.
class VectorDataset : public data::Dataset {
 public:
  std::vector<data::Example> images;
  int64_t size() const override { return static_cast<int64_t>(images.size()); }
  void get(int64_t index, data::Example& out) const override {
    out = images[static_cast<size_t>(index)];
  }
  int64_t num_classes() const override { return 1; }
  std::string describe(int64_t index) const override { return "image " + std::to_string(index); }
};

VectorDataset random_images(int64_t n, int64_t channels, uint32_t seed) {
  std::mt19937 gen(seed);
  VectorDataset ds;
  for (int64_t i = 0; i < n; ++i) {
    data::Example ex;
    ex.height = 3 + i % 4;  // sizes differ: the mean is over pixels, not over images
    ex.width = 5 + i % 3;
    ex.channels = channels;
    ex.pixels.resize(static_cast<size_t>(ex.height * ex.width * channels));
    for (size_t k = 0; k < ex.pixels.size(); ++k) {
      // A channel's own range: a wrong channel stride reads another channel's values.
      const int64_t c = static_cast<int64_t>(k) % channels;
      ex.pixels[k] = static_cast<uint8_t>(40 * c + gen() % 100);
    }
    ds.images.push_back(std::move(ex));
  }
  return ds;
}

// The f64 two-pass reference over the images at `indices`: mean, then the mean squared deviation.
void reference(const VectorDataset& ds, const std::vector<int64_t>& indices, int64_t channels,
               std::vector<double>& mean, std::vector<double>& std) {
  mean.assign(static_cast<size_t>(channels), 0);
  std.assign(static_cast<size_t>(channels), 0);
  double count = 0;
  for (int64_t i : indices) {
    const auto& px = ds.images[static_cast<size_t>(i)].pixels;
    for (size_t k = 0; k < px.size(); ++k) mean[k % static_cast<size_t>(channels)] += px[k] / 255.0;
    count += static_cast<double>(px.size() / static_cast<size_t>(channels));
  }
  for (double& m : mean) m /= count;
  for (int64_t i : indices) {
    const auto& px = ds.images[static_cast<size_t>(i)].pixels;
    for (size_t k = 0; k < px.size(); ++k) {
      const double d = px[k] / 255.0 - mean[k % static_cast<size_t>(channels)];
      std[k % static_cast<size_t>(channels)] += d * d;
    }
  }
  for (double& s : std) s = std::sqrt(s / count);
}

// The result is a double from exact integer sums rounded once to float: half an f32 ulp (2^-24
// relative), plus the f64 reference's own rounding over a few thousand terms (< 1e-12 relative).
void check_close(const std::vector<float>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t c = 0; c < got.size(); ++c) {
    INFO("channel " << c << ": " << got[c] << " against " << want[c]);
    CHECK(std::abs(got[c] - want[c]) <= 0x1p-24 * std::abs(want[c]) + 1e-12);
  }
}

}  // namespace

TEST_CASE("channel_stats: each channel's mean and std of x / 255 against an f64 loop",
          "[data][channel_stats]") {
  for (int64_t channels : {1, 3, 4}) {
    const VectorDataset ds = random_images(150, channels, static_cast<uint32_t>(channels));
    std::vector<int64_t> all(150);
    for (int64_t i = 0; i < 150; ++i) all[static_cast<size_t>(i)] = i;
    std::vector<double> mean, std;
    reference(ds, all, channels, mean, std);
    const int saved = num_threads();
    std::vector<data::ChannelStats> runs;
    for (int threads : {1, 2, 3}) {
      set_num_threads(threads);
      runs.push_back(data::channel_stats(ds));
    }
    set_num_threads(saved);
    INFO(channels << " channels");
    CHECK(runs[0].images == 150);
    check_close(runs[0].mean, mean);
    check_close(runs[0].std, std);
    // Integer sums: the same bits at every thread count, by construction.
    for (const auto& r : runs) {
      CHECK(r.mean == runs[0].mean);
      CHECK(r.std == runs[0].std);
    }
  }
}

TEST_CASE("channel_stats: max_images reads that many images spread evenly over the set",
          "[data][channel_stats]") {
  const VectorDataset ds = random_images(10, 3, 7);
  const data::ChannelStats s = data::channel_stats(ds, {.max_images = 4});
  CHECK(s.images == 4);
  std::vector<double> mean, std;
  reference(ds, {0, 2, 5, 7}, 3, mean, std);  // j * 10 / 4 for j = 0..3
  check_close(s.mean, mean);
  check_close(s.std, std);
  // More than the set holds: all of them.
  CHECK(data::channel_stats(ds, {.max_images = 99}).images == 10);
}

TEST_CASE("channel_stats: bad datasets are named", "[data][channel_stats]") {
  VectorDataset empty;
  CHECK_THROWS_WITH(data::channel_stats(empty, {}, "my set"),
                    Catch::Contains("my set has no images"));
  VectorDataset mixed = random_images(200, 3, 1);
  mixed.images[150] = random_images(1, 1, 2).images[0];
  CHECK_THROWS_WITH(
      data::channel_stats(mixed, {}, "my set"),
      Catch::Contains("my set: image 150 has 1 channels, but image ") && Catch::Contains("has 3"));
  CHECK_THROWS_WITH(data::channel_stats(mixed, {.max_images = -1}),
                    Catch::Contains("max_images must be >= 0"));
}

TEST_CASE("channel_stats: a constant channel has std 0 and its value as mean",
          "[data][channel_stats]") {
  VectorDataset constant = random_images(5, 2, 3);
  for (auto& ex : constant.images)
    for (size_t k = 1; k < ex.pixels.size(); k += 2) ex.pixels[k] = 17;
  const data::ChannelStats s = data::channel_stats(constant);
  CHECK(s.std[1] == 0.f);  // N sum(x^2) - sum(x)^2 is exactly 0 in integers
  CHECK(s.mean[1] == static_cast<float>(17 / 255.0));
  CHECK(s.std[0] > 0.f);
}

TEST_CASE("channel_stats: Fashion-MNIST's training split gives its published 0.2860 / 0.3530",
          "[data][channel_stats]") {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  if (!std::filesystem::exists(dir)) {
    WARN("skipped: " << dir << " is not installed (Debian's dataset-fashion-mnist)");
    return;
  }
  const data::IdxImageDataset ds(dir, {.train = true});
  const data::ChannelStats s = data::channel_stats(ds);
  CHECK(s.images == 60000);
  REQUIRE(s.mean.size() == 1);
  // The figures every Fashion-MNIST recipe quotes, to 4 decimals: within half a unit of the last.
  CHECK(std::abs(s.mean[0] - 0.2860) <= 0.5e-4);
  CHECK(std::abs(s.std[0] - 0.3530) <= 0.5e-4);
  CHECK(data::format_channels(s.mean) == "(0.2860)");
}

TEST_CASE("parse_channels reads what channels_text writes, bit for bit, and refuses the rest",
          "[data][channel_stats]") {
  const std::vector<float> v = {0.1f, 0.4914f, 1e-30f, std::numeric_limits<float>::max(), 255.f};
  const std::string text = data::channels_text(v);
  CHECK(data::parse_channels(text, true, "t", "x") == v);
  CHECK(data::parse_channels("-0.5,2", false, "t", "x") == std::vector<float>{-0.5f, 2.f});
  std::string seventeen = "1";
  for (int i = 0; i < 16; ++i) seventeen += ",1";
  for (const std::string& bad : std::vector<std::string>{"", "1,", ",1", "1,,2", "a", "nan", "inf",
                                                         "1e99", " 1", "1 ", "0.5x", seventeen}) {
    INFO("'" << bad << "'");
    CHECK_THROWS_WITH(data::parse_channels(bad, false, "t", "flag --mean"),
                      Catch::Contains("flag --mean is '" + bad + "', expected 1 to 16 finite"));
  }
  for (const std::string bad : {"0", "1,-1", "-0"})
    CHECK_THROWS_WITH(data::parse_channels(bad, true, "t", "flag --std"),
                      Catch::Contains("expected 1 to 16 positive"));
}
