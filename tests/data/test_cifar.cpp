#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "data/cifar.h"
#include "support/temp_dir.h"

using namespace stoke;
using Catch::Contains;
namespace fs = std::filesystem;

namespace {

using Bytes = std::vector<uint8_t>;

// The pixel value record `seed` stores at plane c, row y, column x.
uint8_t pix(int seed, int c, int y, int x) {
  return static_cast<uint8_t>(seed * 31 + c * 97 + y * 5 + x * 3);
}

// One record: the label bytes, then the R, G and B planes of 32x32.
void append_record(Bytes& out, const Bytes& label_bytes, int seed) {
  out.insert(out.end(), label_bytes.begin(), label_bytes.end());
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < 32; ++y)
      for (int x = 0; x < 32; ++x) out.push_back(pix(seed, c, y, x));
}

void write_file(const fs::path& path, const Bytes& b) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

// Checks sample `got` holds record `seed` in HWC order.
void check_hwc(const data::Example& got, int seed) {
  REQUIRE(got.pixels.size() == 3072);
  CHECK(got.height == 32);
  CHECK(got.width == 32);
  CHECK(got.channels == 3);
  int bad = 0;
  for (int y = 0; y < 32; ++y)
    for (int x = 0; x < 32; ++x)
      for (int c = 0; c < 3; ++c) bad += got.pixels[(y * 32 + x) * 3 + c] != pix(seed, c, y, x);
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("CIFAR-10 batches load as HWC with their labels, files in order") {
  test::TempDir dir("stoke_test_cifar");
  int seed = 0;
  std::vector<int> labels;
  for (int b = 1; b <= 5; ++b) {
    Bytes bytes;
    for (int r = 0; r < b; ++r) {  // batch b holds b records
      labels.push_back((seed * 3) % 10);
      append_record(bytes, {static_cast<uint8_t>(labels.back())}, seed++);
    }
    write_file(dir.path / ("data_batch_" + std::to_string(b) + ".bin"), bytes);
  }
  Bytes test;
  append_record(test, {7}, 100);
  write_file(dir.path / "test_batch.bin", test);
  {
    std::ofstream meta(dir.path / "batches.meta.txt");
    for (const char* name :
         {"airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"})
      meta << name << "\n";
    meta << "\n";
  }

  data::CifarDataset train(dir.path.string());
  REQUIRE(train.size() == 15);
  CHECK(train.num_classes() == 10);
  REQUIRE(train.class_names().size() == 10);
  CHECK(train.class_names()[9] == "truck");
  data::Example ex;
  for (int i = 0; i < 15; ++i) {
    train.get(i, ex);
    CHECK(ex.label == labels[static_cast<size_t>(i)]);
    check_hwc(ex, i);
  }
  // Record 4 is the second record of data_batch_3.bin (batches hold 1, 2, 3, ... records).
  CHECK_THAT(train.describe(4), Contains("data_batch_3.bin, record 1"));

  data::CifarDataset testset(dir.path.string(), {.train = false});
  REQUIRE(testset.size() == 1);
  testset.get(0, ex);
  CHECK(ex.label == 7);
  check_hwc(ex, 100);

  // One file may be given directly.
  data::CifarDataset one((dir.path / "data_batch_2.bin").string());
  REQUIRE(one.size() == 2);
  one.get(1, ex);
  check_hwc(ex, 2);
}

TEST_CASE("CIFAR-100 uses the fine label by default and the coarse one on request") {
  test::TempDir dir("stoke_test_cifar");
  Bytes bytes;
  append_record(bytes, {3, 77}, 1);
  append_record(bytes, {19, 99}, 2);
  write_file(dir.path / "train.bin", bytes);
  data::CifarDataset fine(dir.path.string(), {.variant = data::CifarVariant::cifar100});
  data::CifarDataset coarse(dir.path.string(),
                            {.variant = data::CifarVariant::cifar100, .coarse_labels = true});
  CHECK(fine.num_classes() == 100);
  CHECK(coarse.num_classes() == 20);
  data::Example ex;
  fine.get(0, ex);
  CHECK(ex.label == 77);
  check_hwc(ex, 1);
  fine.get(1, ex);
  CHECK(ex.label == 99);
  coarse.get(1, ex);
  CHECK(ex.label == 19);
  check_hwc(ex, 2);
  CHECK_THROWS_WITH(data::CifarDataset(dir.path.string(),
                                       {.variant = data::CifarVariant::cifar100, .train = false}),
                    Contains("test.bin' does not exist"));
}

TEST_CASE("CIFAR files of a bad length or with bad labels are refused with the path") {
  test::TempDir dir("stoke_test_cifar");
  Bytes bytes;
  append_record(bytes, {1}, 0);
  bytes.resize(bytes.size() - 10);  // truncated record
  const fs::path path = dir.path / "cut.bin";
  write_file(path, bytes);
  CHECK_THROWS_WITH(data::CifarDataset(path.string()), Contains(path.string()) &&
                                                           Contains("file length 3063 bytes") &&
                                                           Contains("3073-byte record"));
  // The same bytes read as CIFAR-100 records (3074 bytes).
  Bytes two;
  append_record(two, {1}, 0);
  write_file(path, two);
  CHECK_THROWS_WITH(data::CifarDataset(path.string(), {.variant = data::CifarVariant::cifar100}),
                    Contains("file length 3073 bytes") && Contains("3074-byte record"));
  Bytes bad_label;
  append_record(bad_label, {4}, 0);
  append_record(bad_label, {10}, 1);
  write_file(path, bad_label);
  CHECK_THROWS_WITH(data::CifarDataset(path.string()),
                    Contains(path.string()) && Contains("record 1 has label 10, expected < 10"));
  write_file(path, {});
  CHECK_THROWS_WITH(data::CifarDataset(path.string()), Contains("file length 0 bytes"));
  CHECK_THROWS_WITH(data::CifarDataset((dir.path / "nope").string()),
                    Contains("nope' does not exist"));
  CHECK_THROWS_WITH(data::CifarDataset(dir.path.string()),
                    Contains("data_batch_1.bin' does not exist"));
}
