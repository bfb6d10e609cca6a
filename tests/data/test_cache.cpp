#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "data/cache.h"
#include "data/idx_dataset.h"
#include "data/image_decode.h"
#include "data/image_folder.h"
#include "stoke/stoke.h"
#include "support/temp_dir.h"

using namespace stoke;
using Catch::Contains;
namespace fs = std::filesystem;

namespace {

using Bytes = std::vector<uint8_t>;

// A folder of n PNGs in 3 classes, sizes varying with the index; returns the total file bytes.
int64_t make_folder(const fs::path& root, int n) {
  int64_t total = 0;
  for (int i = 0; i < n; ++i) {
    const int h = 3 + i % 4, w = 2 + i % 5, c = 3;
    Bytes px(size_t(h * w * c));
    for (size_t k = 0; k < px.size(); ++k) px[k] = uint8_t(k * 11 + i * 29);
    const Bytes png = data::encode_png(px.data(), h, w, c);
    const fs::path dir = root / ("class" + std::to_string(i % 3));
    fs::create_directories(dir);
    data::write_file_atomic((dir / (std::to_string(100 + i) + ".png")).string(), png.data(),
                            png.size());
    total += int64_t(png.size());
  }
  return total;
}

void check_same(const data::Dataset& a, const data::Dataset& b) {
  REQUIRE(a.size() == b.size());
  CHECK(a.num_classes() == b.num_classes());
  CHECK(a.class_names() == b.class_names());
  data::Example x, y;
  for (int64_t i = 0; i < a.size(); ++i) {
    a.get(i, x);
    b.get(i, y);
    CHECK(x.pixels == y.pixels);
    CHECK(x.height == y.height);
    CHECK(x.width == y.width);
    CHECK(x.channels == y.channels);
    CHECK(x.label == y.label);
  }
}

}  // namespace

TEST_CASE("EncodedCache holds the files in RAM and decodes them like the folder") {
  test::TempDir dir("stoke_test_cache");
  const int64_t total = make_folder(dir.path, 23);
  auto folder = std::make_shared<data::ImageFolderDataset>(dir.path.string());
  data::EncodedCache cache(folder);
  CHECK(cache.cached_files() == 23);
  CHECK(cache.cached_bytes() == total);
  check_same(cache, *folder);
  CHECK(cache.describe(4) == folder->path(4));

  // Served from RAM: the files can go away.
  const std::string first = folder->path(0);
  data::Example before, after;
  cache.get(0, before);
  fs::remove(first);
  cache.get(0, after);
  CHECK(after.pixels == before.pixels);
  CHECK_THROWS_WITH(folder->get(0, after), Contains(first) && Contains("cannot open"));
}

TEST_CASE("EncodedCache over budget is an error, or reads the rest from disk when asked") {
  test::TempDir dir("stoke_test_cache");
  const int64_t total = make_folder(dir.path, 12);
  auto folder = std::make_shared<data::ImageFolderDataset>(dir.path.string());
  CHECK_THROWS_WITH(data::EncodedCache(folder, {.budget_bytes = total - 1}),
                    Contains("take " + std::to_string(total) + " bytes") &&
                        Contains("more than the budget of " + std::to_string(total - 1)));
  data::EncodedCache exact(folder, {.budget_bytes = total});
  CHECK(exact.cached_files() == 12);

  data::EncodedCache part(folder, {.budget_bytes = total / 2, .read_rest_from_disk = true});
  CHECK(part.cached_files() > 0);
  CHECK(part.cached_files() < 12);
  CHECK(part.cached_bytes() <= total / 2);
  check_same(part, *folder);
}

TEST_CASE("EncodedCache reports a corrupt cached file with its path on get()") {
  test::TempDir dir("stoke_test_cache");
  make_folder(dir.path, 3);
  const fs::path bad = dir.path / "class0" / "100.png";
  data::write_file_atomic(bad.string(), reinterpret_cast<const uint8_t*>("not a png"), 9);
  auto folder = std::make_shared<data::ImageFolderDataset>(dir.path.string());
  data::EncodedCache cache(folder);
  data::Example ex;
  CHECK_THROWS_WITH(cache.get(0, ex), Contains(bad.string()) && Contains("cannot decode"));
  cache.get(1, ex);  // the others still decode
  CHECK(ex.label == 1);
}

TEST_CASE("DecodedCache decodes every sample once, keeps differing sizes and enforces a budget") {
  test::TempDir dir("stoke_test_cache");
  make_folder(dir.path, 40);
  auto folder = std::make_shared<data::ImageFolderDataset>(dir.path.string());
  data::DecodedCache cache(folder);
  check_same(cache, *folder);
  int64_t pixels = 0;
  data::Example ex;
  for (int64_t i = 0; i < folder->size(); ++i) {
    folder->get(i, ex);
    pixels += int64_t(ex.pixels.size());
  }
  CHECK(cache.cached_bytes() == pixels);
  // Decoded pixels no longer need the files: sample 14 is the first of class1 (class0 has 14).
  REQUIRE(folder->label(14) == 1);
  data::Example before;
  folder->get(14, before);
  fs::remove_all(dir.path / "class1");
  CHECK_THROWS(folder->get(14, ex));
  cache.get(14, ex);
  CHECK(ex.label == 1);
  CHECK(ex.pixels == before.pixels);

  auto again = std::make_shared<data::ImageFolderDataset>(dir.path.string());
  CHECK_THROWS_WITH(data::DecodedCache(again, {.budget_bytes = 100}),
                    Contains("exceed the budget of 100 bytes"));

  // Any dataset: an IDX one.
  Tensor images = empty({50, 4, 4}, {.dtype = DType::u8});
  for (int64_t i = 0; i < 800; ++i) images.data<uint8_t>()[i] = uint8_t(i);
  std::vector<int64_t> labels(50);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = int64_t(i % 10);
  auto idx = std::make_shared<data::IdxImageDataset>(
      images, from_vector(labels, {50}, {.dtype = DType::i64}), "mem");
  data::DecodedCache idx_cache(idx);
  check_same(idx_cache, *idx);
  CHECK(idx_cache.cached_bytes() == 800);
}

TEST_CASE("open_image_folder applies the cache mode") {
  test::TempDir dir("stoke_test_cache");
  make_folder(dir.path, 6);
  auto plain = data::open_image_folder(dir.path.string());
  auto encoded = data::open_image_folder(dir.path.string(), {}, data::CacheMode::encoded);
  auto decoded =
      data::open_image_folder(dir.path.string(), {.channels = 1}, data::CacheMode::decoded);
  CHECK(dynamic_cast<data::ImageFolderDataset*>(plain.get()) != nullptr);
  CHECK(dynamic_cast<data::EncodedCache*>(encoded.get()) != nullptr);
  CHECK(dynamic_cast<data::DecodedCache*>(decoded.get()) != nullptr);
  check_same(*plain, *encoded);
  data::Example ex;
  decoded->get(0, ex);
  CHECK(ex.channels == 1);
  CHECK_THROWS_WITH(data::open_image_folder(dir.path.string(), {}, data::CacheMode::encoded, 10),
                    Contains("more than the budget of 10 bytes"));
}
