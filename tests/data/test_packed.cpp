#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "data/cifar.h"
#include "data/idx_dataset.h"
#include "data/image_decode.h"
#include "data/image_folder.h"
#include "data/packed.h"
#include "data/resize.h"
#include "stoke/stoke.h"
#include "support/temp_dir.h"

using namespace stoke;
using Catch::Contains;
namespace fs = std::filesystem;

namespace {

using Bytes = std::vector<uint8_t>;

// n images of h x w, labels i * 3 % classes, with class names.
std::shared_ptr<data::IdxImageDataset> idx_dataset(int64_t n, int64_t h, int64_t w, int64_t classes,
                                                   bool with_names = true) {
  Tensor images = empty({n, h, w}, {.dtype = DType::u8});
  for (int64_t i = 0; i < n * h * w; ++i) images.data<uint8_t>()[i] = uint8_t(i * 13 + i / 7);
  std::vector<int64_t> labels(static_cast<size_t>(n));
  std::vector<std::string> names;
  for (int64_t i = 0; i < n; ++i) labels[size_t(i)] = i * 3 % classes;
  for (int64_t c = 0; c < classes && with_names; ++c) names.push_back("class " + std::to_string(c));
  return std::make_shared<data::IdxImageDataset>(
      images, from_vector(labels, {n}, {.dtype = DType::i64}), "mem", names);
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
    CHECK(x.label == y.label);
    CHECK(x.height == y.height);
    CHECK(x.width == y.width);
    CHECK(x.channels == y.channels);
  }
}

Bytes read_all(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}
void write_all(const std::string& p, const Bytes& b) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}

// A dataset whose samples are whatever the test says.
class ListDataset : public data::Dataset {
 public:
  std::vector<data::Example> items;
  int64_t classes = 2;
  int64_t size() const override { return int64_t(items.size()); }
  void get(int64_t i, data::Example& out) const override { out = items[size_t(i)]; }
  int64_t num_classes() const override { return classes; }
  std::string describe(int64_t i) const override { return "item " + std::to_string(i); }
};

data::Example make_example(int64_t h, int64_t w, int64_t c, int64_t label) {
  data::Example e{
      .pixels = Bytes(size_t(h * w * c)), .height = h, .width = w, .channels = c, .label = label};
  for (size_t k = 0; k < e.pixels.size(); ++k) e.pixels[k] = uint8_t(k * 5 + label);
  return e;
}

}  // namespace

TEST_CASE("pack_dataset round-trips an IDX dataset over several shards") {
  test::TempDir dir("stoke_test_packed");
  auto src = idx_dataset(100, 6, 5, 7);
  const int64_t record = 6 * 5 + 4;
  const auto r = data::pack_dataset(*src, dir.file("p"), {.shard_bytes = record * 16});
  CHECK(r.records == 100);
  CHECK(r.shards == 7);  // 16 records per shard
  int64_t bytes = 0;
  for (const auto& e : fs::directory_iterator(dir.path / "p")) bytes += int64_t(e.file_size());
  CHECK(r.bytes == bytes);
  CHECK(fs::exists(data::packed_shard_path(dir.file("p"), 6)));
  CHECK(int64_t(fs::file_size(data::packed_shard_path(dir.file("p"), 6))) == 64 + 4 * record);

  data::PackedDataset packed(dir.file("p"));
  CHECK(packed.height() == 6);
  CHECK(packed.width() == 5);
  CHECK(packed.channels() == 1);
  check_same(packed, *src);
  CHECK(packed.describe(33) == data::packed_shard_path(dir.file("p"), 2) + ", record 1");
  data::Example ex;
  src->get(57, ex);
  CHECK(std::memcmp(packed.pixels(57), ex.pixels.data(), 30) == 0);
  CHECK(packed.label(57) == ex.label);
  CHECK_THROWS_WITH(packed.get(100, ex), Contains("index 100 out of range [0, 100)"));

  // Repacking into the same directory with bigger shards removes the old pack's extra shards.
  const auto r2 = data::pack_dataset(*src, dir.file("p"), {.threads = 1});
  CHECK(r2.shards == 1);
  CHECK_FALSE(fs::exists(data::packed_shard_path(dir.file("p"), 1)));
  check_same(data::PackedDataset(dir.file("p"), {.verify = false}), *src);
}

TEST_CASE("pack_dataset round-trips CIFAR and an image folder") {
  test::TempDir dir("stoke_test_packed");
  Bytes batch;
  for (int r = 0; r < 9; ++r) {
    batch.push_back(uint8_t(r));
    for (int k = 0; k < 3072; ++k) batch.push_back(uint8_t(k * 7 + r));
  }
  write_all(dir.file("data.bin"), batch);
  data::CifarDataset cifar(dir.file("data.bin"));
  data::pack_dataset(cifar, dir.file("cifar"));
  check_same(data::PackedDataset(dir.file("cifar")), cifar);

  for (int i = 0; i < 5; ++i) {
    const data::Example e = make_example(4, 3, 3, i % 2);
    const Bytes png = data::encode_png(e.pixels.data(), 4, 3, 3);
    fs::create_directories(dir.path / "img" / (i % 2 ? "b" : "a"));
    data::write_file_atomic(
        dir.file("img/" + std::string(i % 2 ? "b/" : "a/") + std::to_string(i) + ".png"),
        png.data(), png.size());
  }
  data::ImageFolderDataset folder(dir.file("img"));
  data::pack_dataset(folder, dir.file("folder"));
  data::PackedDataset packed(dir.file("folder"));
  check_same(packed, folder);
  CHECK(packed.class_names() == std::vector<std::string>{"a", "b"});
}

TEST_CASE("pack_dataset fits differing sizes by resize or center crop") {
  test::TempDir dir("stoke_test_packed");
  ListDataset ds;
  ds.items = {make_example(4, 4, 3, 0), make_example(8, 6, 3, 1), make_example(3, 9, 3, 1)};
  CHECK_THROWS_WITH(data::pack_dataset(ds, dir.file("x")),
                    Contains("item 1: a 8x6 image, but the records are 4x4 (the first sample's "
                             "size) and no resize was asked for"));
  data::pack_dataset(ds, dir.file("s"), {.height = 4, .width = 4, .fit = data::Fit::stretch});
  data::pack_dataset(ds, dir.file("c"), {.height = 4, .width = 4, .fit = data::Fit::resize_crop});
  data::PackedDataset s(dir.file("s")), c(dir.file("c"));
  data::Example got;
  std::vector<uint8_t> ref;
  for (int64_t i = 0; i < 3; ++i) {
    const data::Example& e = ds.items[size_t(i)];
    s.get(i, got);
    CHECK(got.height == 4);
    data::fit_image(e.pixels.data(), e.height, e.width, 3, 4, 4, data::Fit::stretch, ref);
    CHECK(got.pixels == ref);
    c.get(i, got);
    data::fit_image(e.pixels.data(), e.height, e.width, 3, 4, 4, data::Fit::resize_crop, ref);
    CHECK(got.pixels == ref);
    CHECK(got.label == e.label);
  }
  // The first sample, already 4x4, is stored unchanged by both.
  s.get(0, got);
  CHECK(got.pixels == ds.items[0].pixels);
  CHECK_THROWS_WITH(
      data::pack_dataset(ds, dir.file("k"), {.height = 5, .width = 5, .fit = data::Fit::crop}),
      Contains("item 0") && Contains("center crop to 5x5 needs an image at least that big"));
}

TEST_CASE("bilinear resize uses half-pixel centers and center crop copies exact bytes") {
  const Bytes row = {0, 100};
  Bytes out;
  data::fit_image(row.data(), 1, 2, 1, 1, 4, data::Fit::stretch, out);
  CHECK(out == Bytes{0, 25, 75, 100});  // PyTorch bilinear, align_corners=False
  const Bytes sq = {10, 20, 30, 40};    // 2x2 -> 1x1 averages the four
  data::fit_image(sq.data(), 2, 2, 1, 1, 1, data::Fit::stretch, out);
  CHECK(out == Bytes{25});
  Bytes img(5 * 4);
  for (size_t k = 0; k < img.size(); ++k) img[k] = uint8_t(k);
  data::fit_image(img.data(), 5, 4, 1, 3, 2, data::Fit::crop, out);
  CHECK(out == Bytes{5, 6, 9, 10, 13, 14});
  // resize_crop of a 1x4 image to 2x2: the height limits, so it becomes 2x8 (aspect kept) and
  // columns 3-4 are kept, which sample the source at x = 1.25 and 1.75.
  const Bytes wide = {0, 40, 80, 120};
  data::fit_image(wide.data(), 1, 4, 1, 2, 2, data::Fit::resize_crop, out);
  CHECK(out == Bytes{50, 70, 50, 70});
}

TEST_CASE("pack_dataset refuses bad labels and mixed channel counts") {
  test::TempDir dir("stoke_test_packed");
  ListDataset ds;
  ds.items = {make_example(2, 2, 3, 0), make_example(2, 2, 1, 1)};
  CHECK_THROWS_WITH(data::pack_dataset(ds, dir.file("a")),
                    Contains("item 1: 1 channels, but the pack has 3"));
  ds.items = {make_example(2, 2, 3, 0), make_example(2, 2, 3, 2)};
  CHECK_THROWS_WITH(data::pack_dataset(ds, dir.file("b")),
                    Contains("item 1: label 2 out of range [0, 2)"));
  ds.items.clear();
  CHECK_THROWS_WITH(data::pack_dataset(ds, dir.file("c")), Contains("the dataset is empty"));
}

TEST_CASE("PackedDataset reports corrupt packs with the file and what was wrong") {
  test::TempDir dir("stoke_test_packed");
  auto src = idx_dataset(40, 4, 4, 5);
  const std::string p = dir.file("p");
  data::pack_dataset(*src, p, {.shard_bytes = 20 * 10});  // 10 records per shard, 4 shards
  const std::string index = data::packed_index_path(p);
  const std::string shard = data::packed_shard_path(p, 1);
  const Bytes index_bytes = read_all(index), shard_bytes = read_all(shard);

  CHECK_THROWS_WITH(data::PackedDataset(dir.file("none")), Contains("pack.index' does not exist"));

  Bytes b = index_bytes;
  b[0] = 'X';
  write_all(index, b);
  CHECK_THROWS_WITH(data::PackedDataset(p), Contains(index) && Contains("bad magic"));
  b = index_bytes;
  b[8] = 2;  // version
  write_all(index, b);
  CHECK_THROWS_WITH(data::PackedDataset(p), Contains(index) && Contains("unsupported version 2"));
  b = index_bytes;
  b[12] ^= 1;  // height, without fixing the index CRC
  write_all(index, b);
  CHECK_THROWS_WITH(data::PackedDataset(p), Contains(index) && Contains("index CRC mismatch"));
  b.assign(index_bytes.begin(), index_bytes.end() - 9);
  write_all(index, b);
  CHECK_THROWS_WITH(data::PackedDataset(p), Contains(index));
  write_all(index, index_bytes);

  b = shard_bytes;
  b[1] = 'X';
  write_all(shard, b);
  CHECK_THROWS_WITH(data::PackedDataset(p), Contains(shard) && Contains("bad magic"));
  b = shard_bytes;
  b[8] = 9;
  write_all(shard, b);
  CHECK_THROWS_WITH(data::PackedDataset(p), Contains(shard) && Contains("unsupported version 9"));
  b.assign(shard_bytes.begin(), shard_bytes.end() - 7);
  write_all(shard, b);
  CHECK_THROWS_WITH(data::PackedDataset(p, {.verify = false}),
                    Contains(shard) && Contains("truncated shard: 257 bytes, expected 264"));
  b = shard_bytes;
  b.push_back(0);
  write_all(shard, b);
  CHECK_THROWS_WITH(data::PackedDataset(p), Contains(shard) && Contains("oversized shard"));
  write_all(shard, read_all(data::packed_shard_path(p, 2)));  // a valid shard, wrong place
  CHECK_THROWS_WITH(data::PackedDataset(p), Contains(shard) && Contains("header disagrees"));

  // A flipped pixel: caught by the CRC when verifying (the default), not without.
  b = shard_bytes;
  b[64 + 5] ^= 0x40;
  write_all(shard, b);
  CHECK_THROWS_WITH(data::PackedDataset(p), Contains(shard) && Contains("CRC mismatch"));
  data::PackedDataset unverified(p, {.verify = false});
  data::Example ex;
  unverified.get(10, ex);
  data::Example ref;
  src->get(10, ref);
  CHECK(ex.pixels[5] == (ref.pixels[5] ^ 0x40));  // the corrupt byte is served as is

  // An out-of-range label (record 3 of shard 1 = sample 13): found by get() without verifying.
  b = shard_bytes;
  b[64 + 3 * 20 + 16] = 99;
  write_all(shard, b);
  data::PackedDataset bad_label(p, {.verify = false, .access = data::Access::random});
  CHECK_THROWS_WITH(bad_label.get(13, ex),
                    Contains(shard) && Contains("record 3: label 99 out of range [0, 5)"));
  bad_label.get(12, ex);  // the neighbours are fine

  write_all(shard, shard_bytes);
  check_same(data::PackedDataset(p, {.access = data::Access::sequential}), *src);
}

TEST_CASE("crc32_parallel equals zlib's crc32 over one buffer") {
  Bytes big((size_t(3) << 20) + 12345);
  for (size_t i = 0; i < big.size(); ++i) big[i] = uint8_t(i * 2654435761u >> 24);
  CHECK(data::crc32_parallel(big.data(), big.size()) ==
        uint32_t(crc32(0L, big.data(), uInt(big.size()))));
  CHECK(data::crc32_parallel(big.data(), 100) == uint32_t(crc32(0L, big.data(), 100)));
}

TEST_CASE("PackedDataset checks a well-formed index's values: implausible sizes, labels") {
  test::TempDir dir("stoke_test_packed");
  auto src = idx_dataset(12, 3, 3, 5, false);  // labels 0, 3, 1, 4, 2, ...; no class names
  const std::string p = dir.file("p");
  data::pack_dataset(*src, p);
  const std::string index = data::packed_index_path(p);
  const Bytes good = read_all(index);
  // Rewrites one u32 of the index and its trailing CRC, as a crafted or buggy writer would.
  auto patch = [&](size_t offset, uint32_t value) {
    Bytes b = good;
    for (int k = 0; k < 4; ++k) b[offset + size_t(k)] = uint8_t(value >> (8 * k));
    const uint32_t crc = uint32_t(crc32(0L, b.data(), uInt(b.size() - 4)));
    for (int k = 0; k < 4; ++k) b[b.size() - 4 + size_t(k)] = uint8_t(crc >> (8 * k));
    write_all(index, b);
  };
  patch(12, 0xFFFFFFFFu);  // height
  CHECK_THROWS_WITH(data::PackedDataset(p), Contains(index) && Contains("implausible header"));
  patch(12, 4);  // height 4 no longer matches record_bytes
  CHECK_THROWS_WITH(data::PackedDataset(p), Contains(index) && Contains("inconsistent header"));
  patch(24, 4);  // num_classes 4: label 4 (sample 3) is now out of range, found when verifying
  CHECK_THROWS_WITH(data::PackedDataset(p), Contains(data::packed_shard_path(p, 0)) &&
                                                Contains("record 3: label 4 out of range [0, 4)"));
  write_all(index, good);
  check_same(data::PackedDataset(p), *src);
}

TEST_CASE("PackedDataset: a shard truncated while mapped ends the job naming the file") {
#if defined(__SANITIZE_THREAD__)
  WARN("skipped under ThreadSanitizer, which defers signals and does not support this fork");
  return;
#endif
  test::TempDir dir("stoke_test_packed");
  auto src = idx_dataset(64, 32, 32, 5);
  const std::string p = dir.file("p");
  data::pack_dataset(*src, p, {.shard_bytes = (32 * 32 + 4) * 64});  // one 16-page shard
  const std::string shard = data::packed_shard_path(p, 0);
  int out[2];
  REQUIRE(::pipe(out) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {  // the child reads the pack while "another process" truncates it
    ::dup2(out[1], STDERR_FILENO);
    ::close(out[0]);
    try {
      data::PackedDataset packed(p, {.verify = false});  // no thread pool in a forked child
      if (::truncate(shard.c_str(), 4096) != 0) ::_exit(3);
      data::Example ex;
      for (int64_t i = 0; i < packed.size(); ++i) packed.get(i, ex);
    } catch (...) {
      ::_exit(4);
    }
    ::_exit(0);  // read past the file's new end without a fault: the test fails
  }
  ::close(out[1]);
  std::string err;
  char buf[512];
  for (ssize_t n; (n = ::read(out[0], buf, sizeof buf)) > 0;) err.append(buf, size_t(n));
  ::close(out[0]);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  INFO(err);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 1);
  CHECK_THAT(err, Contains(shard) && Contains("shrank") && Contains("SIGBUS"));
}
