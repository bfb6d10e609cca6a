#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "data/idx.h"
#include "data/idx_dataset.h"
#include "stoke/stoke.h"
#include "support/temp_dir.h"

using namespace stoke;
using Catch::Contains;
namespace fs = std::filesystem;

namespace {

using Bytes = std::vector<uint8_t>;

void write_idx(const fs::path& path, const std::vector<uint32_t>& dims, const Bytes& data) {
  Bytes b = {0, 0, 0x08, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims)
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(d >> s));
  b.insert(b.end(), data.begin(), data.end());
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

}  // namespace

TEST_CASE("IdxImageDataset serves the IDX images as HxWx1 samples with their labels") {
  test::TempDir dir("stoke_test_idxds");
  const uint32_t n = 5, h = 3, w = 4;
  Bytes pixels(n * h * w);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>(i * 7 + 1);
  const Bytes labels = {3, 0, 9, 1, 3};
  write_idx(dir.path / "t10k-images-idx3-ubyte", {n, h, w}, pixels);
  write_idx(dir.path / "t10k-labels-idx1-ubyte", {n}, labels);

  data::IdxImageDataset ds(dir.path.string(), {.train = false});
  REQUIRE(ds.size() == n);
  CHECK(ds.num_classes() == 10);
  CHECK(ds.class_names().empty());
  data::Example ex;
  for (uint32_t i = 0; i < n; ++i) {
    ds.get(i, ex);
    CHECK(ex.height == h);
    CHECK(ex.width == w);
    CHECK(ex.channels == 1);
    CHECK(ex.label == labels[i]);
    REQUIRE(ex.pixels.size() == h * w);
    CHECK(std::memcmp(ex.pixels.data(), pixels.data() + i * h * w, h * w) == 0);
  }
  CHECK_THAT(ds.describe(2), Contains("t10k-images-idx3-ubyte") && Contains("image 2"));
  CHECK_THROWS_WITH(ds.get(5, ex), Contains("index 5 out of range [0, 5)"));
  // The train split is missing: load_mnist's error names the file.
  CHECK_THROWS_WITH(data::IdxImageDataset(dir.path.string()), Contains("train-images-idx3-ubyte"));
}

TEST_CASE("IdxImageDataset refuses images of no pixels") {
  // An IDX file of shape [N, 0, 0] (it parses: N x 0 bytes of data) copied from a null buffer in
  // get() before: undefined behaviour under UBSan, and nothing to train on.
  test::TempDir dir("stoke_test_idxds_empty");
  for (const std::vector<uint32_t>& dims :
       {std::vector<uint32_t>{3, 0, 0}, std::vector<uint32_t>{3, 4, 0}}) {
    write_idx(dir.path / "t10k-images-idx3-ubyte", dims, {});
    write_idx(dir.path / "t10k-labels-idx1-ubyte", {3}, {1, 2, 0});
    CHECK_THROWS_WITH(data::IdxImageDataset(dir.path.string(), {.train = false}),
                      Contains("t10k-images-idx3-ubyte") &&
                          Contains("images of " + std::to_string(dims[1]) + "x" +
                                   std::to_string(dims[2]) + " pixels") &&
                          Contains("expected at least 1x1"));
  }
}

TEST_CASE("IdxImageDataset takes class names and checks them against the labels") {
  Tensor images = zeros({2, 2, 2}, {.dtype = DType::u8});
  Tensor labels = from_vector<int64_t>({0, 2}, {2}, {.dtype = DType::i64});
  data::IdxImageDataset ds(images, labels, "mem", {"a", "b", "c", "d"});
  CHECK(ds.num_classes() == 4);
  CHECK(ds.class_names() == std::vector<std::string>{"a", "b", "c", "d"});
  CHECK_THROWS_WITH(data::IdxImageDataset(images, labels, "mem", {"a", "b"}),
                    Contains("2 class names given but labels go up to 2"));
  CHECK_THROWS_WITH(data::IdxImageDataset(images.to(DType::f32), labels, "mem"),
                    Contains("expected u8 images"));
}

TEST_CASE("IdxImageDataset matches load_mnist on Fashion-MNIST") {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  if (!fs::exists(dir)) {
    WARN("skipped: " << dir << " is not installed (Debian's dataset-fashion-mnist)");
    return;
  }
  data::IdxImageDataset ds(dir, {.train = false});
  data::IdxDataset ref = data::load_mnist(dir, false);
  REQUIRE(ds.size() == 10000);
  CHECK(ds.num_classes() == 10);
  data::Example ex;
  for (int64_t i : {0, 1, 4321, 9999}) {
    ds.get(i, ex);
    CHECK(ex.label == ref.labels.data<int64_t>()[i]);
    CHECK(std::memcmp(ex.pixels.data(), ref.images.data<uint8_t>() + i * 784, 784) == 0);
  }
}
