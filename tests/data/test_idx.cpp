#include <unistd.h>
#include <zlib.h>

#include <array>
#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "data/idx.h"
#include "stoke/stoke.h"
#include "support/temp_dir.h"

using namespace stoke;
using Catch::Contains;
namespace fs = std::filesystem;

namespace {

using Bytes = std::vector<uint8_t>;

void put_be32(Bytes& b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(v >> s));
}

// An IDX file's bytes: magic 00 00 type ndims, big-endian dims, then `data` as given.
Bytes idx_bytes(uint8_t type, const std::vector<uint32_t>& dims, const Bytes& data) {
  Bytes b = {0, 0, type, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) put_be32(b, d);
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

void write_raw(const std::string& path, const Bytes& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(f.good());
}

void write_gz(const std::string& path, const Bytes& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  if (!bytes.empty()) REQUIRE(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) > 0);
  REQUIRE(gzclose(f) == Z_OK);
}

Bytes read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// Deterministic incompressible-ish bytes, so a gzip of them has a substantial deflate body.
Bytes noise(size_t n, uint32_t seed) {
  Bytes b(n);
  for (auto& x : b) {
    seed = seed * 1664525u + 1013904223u;
    x = static_cast<uint8_t>(seed >> 24);
  }
  return b;
}

Bytes tensor_bytes(const Tensor& t) {
  const auto* p = static_cast<const uint8_t*>(t.contiguous().data_ptr());
  return Bytes(p, p + t.numel() * static_cast<int64_t>(t.element_size()));
}

}  // namespace

TEST_CASE("idx: u8 round trip, raw and gzip", "[data][idx]") {
  test::TempDir dir("stoke_test_idx");
  const Bytes data = noise(3 * 4 * 5, 1);
  const Bytes file = idx_bytes(0x08, {3, 4, 5}, data);
  write_raw(dir.file("a.idx"), file);
  write_gz(dir.file("a.idx.gz"), file);
  for (const char* name : {"a.idx", "a.idx.gz"}) {
    INFO(name);
    Tensor t = data::read_idx(dir.file(name));
    CHECK(t.dtype() == DType::u8);
    CHECK(t.shape() == Shape{3, 4, 5});
    CHECK(tensor_bytes(t) == data);
  }
  // 1-D and an empty dim.
  write_gz(dir.file("b.gz"), idx_bytes(0x08, {7}, {1, 2, 3, 4, 5, 6, 7}));
  CHECK(data::read_idx(dir.file("b.gz")).to_vector<int64_t>() ==
        std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7});
  write_raw(dir.file("c.idx"), idx_bytes(0x08, {0, 28}, {}));
  CHECK(data::read_idx(dir.file("c.idx")).shape() == Shape{0, 28});
  // Concatenated gzip members form one stream, as gzip -d reads them.
  write_gz(dir.file("d1.gz"), Bytes(file.begin(), file.begin() + 30));
  write_gz(dir.file("d2.gz"), Bytes(file.begin() + 30, file.end()));
  Bytes cat = read_bytes(dir.file("d1.gz"));
  const Bytes second = read_bytes(dir.file("d2.gz"));
  cat.insert(cat.end(), second.begin(), second.end());
  write_raw(dir.file("d.gz"), cat);
  CHECK(tensor_bytes(data::read_idx(dir.file("d.gz"))) == data);
}

TEST_CASE("idx: multi-byte types are big-endian", "[data][idx]") {
  test::TempDir dir("stoke_test_idx");
  const std::vector<int32_t> values = {0, 1, -1, 0x01020304, INT32_MIN, INT32_MAX, -123456};
  Bytes data;
  for (int32_t v : values) put_be32(data, static_cast<uint32_t>(v));
  const Bytes file = idx_bytes(0x0C, {7}, data);
  write_raw(dir.file("i32.idx"), file);
  write_gz(dir.file("i32.idx.gz"), file);
  for (const char* name : {"i32.idx", "i32.idx.gz"}) {
    Tensor t = data::read_idx(dir.file(name));
    CHECK(t.dtype() == DType::i32);
    CHECK(t.shape() == Shape{7});
    const int32_t* p = t.data<int32_t>();
    CHECK(std::vector<int32_t>(p, p + 7) == values);
  }
  // i8 and i16 widen to i32.
  write_raw(dir.file("i8.idx"), idx_bytes(0x09, {3}, {0x7f, 0x80, 0xff}));
  CHECK(data::read_idx(dir.file("i8.idx")).to_vector<int64_t>() ==
        std::vector<int64_t>{127, -128, -1});
  write_raw(dir.file("i16.idx"), idx_bytes(0x0B, {1, 2}, {0x80, 0x00, 0x01, 0x02}));
  Tensor i16 = data::read_idx(dir.file("i16.idx"));
  CHECK(i16.dtype() == DType::i32);
  CHECK(i16.to_vector<int64_t>() == std::vector<int64_t>{-32768, 258});
  // f32 1.5 = 0x3fc00000, f64 -2.25 = 0xc002000000000000.
  write_raw(dir.file("f32.idx"), idx_bytes(0x0D, {1}, {0x3f, 0xc0, 0, 0}));
  Tensor f32 = data::read_idx(dir.file("f32.idx"));
  CHECK(f32.dtype() == DType::f32);
  CHECK(f32.item() == 1.5);
  write_raw(dir.file("f64.idx"), idx_bytes(0x0E, {1, 1}, {0xc0, 0x02, 0, 0, 0, 0, 0, 0}));
  Tensor f64 = data::read_idx(dir.file("f64.idx"));
  CHECK(f64.dtype() == DType::f64);
  CHECK(f64.item() == -2.25);
}

TEST_CASE("idx: corrupt files name the path and what is wrong", "[data][idx]") {
  test::TempDir dir("stoke_test_idx");
  auto raw = [&](const std::string& name, const Bytes& bytes) {
    write_raw(dir.file(name), bytes);
    return dir.file(name);
  };
  auto gz = [&](const std::string& name, const Bytes& bytes) {
    write_gz(dir.file(name), bytes);
    return dir.file(name);
  };
  const Bytes data60 = noise(60, 2);

  std::string p = dir.file("missing.idx");
  CHECK_THROWS_WITH(data::read_idx(p),
                    Contains(p) && Contains("cannot open file") && Contains("No such file"));
  CHECK_THROWS_WITH(data::read_idx(dir.path.string()), Contains("not a regular file"));

  p = raw("empty.idx", {});
  CHECK_THROWS_WITH(data::read_idx(p), Contains(p) && Contains("too short for an IDX header"));

  Bytes bad = idx_bytes(0x08, {3, 4, 5}, data60);
  bad[0] = 0x01;
  bad[1] = 0xab;
  p = raw("magic.idx", bad);
  CHECK_THROWS_WITH(data::read_idx(p),
                    Contains(p) && Contains("bad magic") && Contains("0x01 0xab"));

  p = raw("type.idx", idx_bytes(0x0A, {60}, data60));
  CHECK_THROWS_WITH(data::read_idx(p),
                    Contains(p) && Contains("unknown IDX element type code 0x0a"));

  p = raw("dims0.idx", idx_bytes(0x08, {}, data60));
  CHECK_THROWS_WITH(data::read_idx(p), Contains(p) && Contains("bad number of dims 0"));
  p = raw("dims9.idx", idx_bytes(0x08, {1, 1, 1, 1, 1, 1, 1, 1, 60}, data60));
  CHECK_THROWS_WITH(data::read_idx(p), Contains(p) && Contains("bad number of dims 9"));
  p = raw("header.idx", Bytes{0, 0, 8, 3, 0, 0, 0, 3, 0, 0});
  CHECK_THROWS_WITH(data::read_idx(p), Contains(p) && Contains("truncated header") &&
                                           Contains("need 16 header bytes, found 10"));

  // Truncated and trailing data, raw and inside a valid gzip stream.
  const Bytes short_file = idx_bytes(0x08, {3, 4, 5}, Bytes(data60.begin(), data60.begin() + 50));
  const Bytes long_file = idx_bytes(0x08, {3, 4, 5}, noise(63, 3));
  p = raw("short.idx", short_file);
  CHECK_THROWS_WITH(data::read_idx(p), Contains(p) && Contains("truncated data") &&
                                           Contains("need 60 data bytes") &&
                                           Contains("only 50 are present"));
  p = gz("short.idx.gz", short_file);
  CHECK_THROWS_WITH(data::read_idx(p), Contains(p) && Contains("truncated data") &&
                                           Contains("need 60 data bytes") &&
                                           Contains("only 50 are present (after decompression)"));
  p = raw("long.idx", long_file);
  CHECK_THROWS_WITH(data::read_idx(p), Contains(p) && Contains("trailing bytes") &&
                                           Contains("60 data bytes") && Contains("3 extra bytes"));
  p = gz("long.idx.gz", long_file);
  CHECK_THROWS_WITH(data::read_idx(p),
                    Contains(p) && Contains("trailing bytes") &&
                        Contains("3 extra bytes follow them (after decompression)"));
  p = raw("i32short.idx", idx_bytes(0x0C, {4}, Bytes(15, 0)));
  CHECK_THROWS_WITH(data::read_idx(p),
                    Contains("need 16 data bytes") && Contains("only 15 are present"));

  // A header declaring 2^48 bytes is caught before allocating, raw or gzipped.
  const Bytes huge = idx_bytes(0x08, {65536, 65536, 65536}, data60);
  p = raw("huge.idx", huge);
  CHECK_THROWS_WITH(data::read_idx(p),
                    Contains("need 281474976710656 data bytes") && Contains("only 60 are present"));
  // Gzipped, without inflating it first: its compressed bytes cannot hold so much (1032:1).
  p = gz("huge.idx.gz", huge);
  CHECK_THROWS_WITH(data::read_idx(p), Contains("need 281474976710656 data bytes") &&
                                           Contains("compressed bytes left can hold at most"));
  p = raw("overflow.idx", idx_bytes(0x0E, {0xffffffffu, 0xffffffffu, 0xffffffffu}, {}));
  CHECK_THROWS_WITH(data::read_idx(p), Contains(p) && Contains("absurd size"));

  // Broken gzip: cut short, a flipped byte in the deflate body, garbage after the stream.
  const Bytes big = idx_bytes(0x08, {100, 100}, noise(10000, 4));
  write_gz(dir.file("good.gz"), big);
  const Bytes good = read_bytes(dir.file("good.gz"));
  REQUIRE(good.size() > 1000);
  p = raw("cut.gz", Bytes(good.begin(), good.begin() + static_cast<long>(good.size() / 2)));
  CHECK_THROWS_WITH(data::read_idx(p), Contains(p) && Contains("corrupt gzip") &&
                                           Contains("truncated compressed stream"));
  p = raw("cut_trailer.gz", Bytes(good.begin(), good.end() - 4));
  CHECK_THROWS_WITH(data::read_idx(p), Contains(p) && Contains("truncated compressed stream"));
  Bytes flipped = good;
  flipped[good.size() / 2] ^= 0x5a;
  flipped[good.size() / 2 + 1] ^= 0xa5;
  p = raw("flipped.gz", flipped);
  CHECK_THROWS_WITH(data::read_idx(p), Contains(p) && Contains("corrupt gzip"));
  Bytes crc = good;
  crc[good.size() - 8] ^= 1;  // the CRC-32 in the trailer
  p = raw("crc.gz", crc);
  CHECK_THROWS_WITH(data::read_idx(p),
                    Contains(p) && Contains("corrupt gzip: incorrect data check"));
  Bytes garbage = good;
  garbage.insert(garbage.end(), {'x', 'y', 'z'});
  p = raw("garbage.gz", garbage);
  CHECK_THROWS_WITH(data::read_idx(p), Contains(p) && Contains("3 bytes of trailing garbage"));
}

TEST_CASE("idx: load_mnist from a directory of raw and gzipped files", "[data][idx]") {
  test::TempDir dir("stoke_test_idx");
  const Bytes pixels = noise(4 * 2 * 3, 5);
  write_raw(dir.file("train-images-idx3-ubyte"), idx_bytes(0x08, {4, 2, 3}, pixels));
  write_gz(dir.file("train-labels-idx1-ubyte.gz"), idx_bytes(0x08, {4}, {9, 0, 255, 3}));
  data::IdxDataset ds = data::load_mnist(dir.path.string(), true);
  CHECK(ds.images.dtype() == DType::u8);
  CHECK(ds.images.shape() == Shape{4, 2, 3});
  CHECK(tensor_bytes(ds.images) == pixels);
  CHECK(ds.labels.dtype() == DType::i64);
  CHECK(ds.labels.to_vector<int64_t>() == std::vector<int64_t>{9, 0, 255, 3});

  // Counts must match.
  write_gz(dir.file("t10k-images-idx3-ubyte.gz"), idx_bytes(0x08, {4, 2, 3}, pixels));
  write_raw(dir.file("t10k-labels-idx1-ubyte"), idx_bytes(0x08, {3}, {1, 2, 3}));
  CHECK_THROWS_WITH(data::load_mnist(dir.path.string(), false),
                    Contains("t10k-images-idx3-ubyte.gz' has 4 images") &&
                        Contains("t10k-labels-idx1-ubyte' has 3 labels"));
  // i32 labels must lie in [0, 255].
  Bytes labels;
  for (uint32_t v : {1u, 300u, 2u, 3u}) put_be32(labels, v);
  write_raw(dir.file("t10k-labels-idx1-ubyte"), idx_bytes(0x0C, {4}, labels));
  CHECK_THROWS_WITH(data::load_mnist(dir.path.string(), false),
                    Contains("label 300 at index 1 is outside [0, 255]"));
  // Images must be 3-D u8.
  write_raw(dir.file("train-images-idx3-ubyte"), idx_bytes(0x08, {4, 6}, pixels));
  CHECK_THROWS_WITH(data::load_mnist(dir.path.string(), true),
                    Contains("expected u8 images (N, H, W), got u8 [4, 6]"));
  const std::string nowhere = dir.file("nowhere");
  CHECK_THROWS_WITH(data::load_mnist(nowhere, true),
                    Contains("found neither") && Contains("train-images-idx3-ubyte.gz"));
}

TEST_CASE("idx: Fashion-MNIST", "[data][idx][mnist]") {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  if (!fs::is_directory(dir)) {
    WARN("skipped: " << dir << " not found (Debian package dataset-fashion-mnist)");
    return;
  }
  for (bool train : {true, false}) {
    INFO((train ? "train" : "t10k"));
    data::IdxDataset ds = data::load_mnist(dir, train);
    const int64_t n = train ? 60000 : 10000;
    CHECK(ds.images.dtype() == DType::u8);
    CHECK(ds.images.shape() == Shape{n, 28, 28});
    CHECK(ds.labels.dtype() == DType::i64);
    REQUIRE(ds.labels.shape() == Shape{n});
    std::array<int64_t, 10> histogram{};
    const int64_t* l = ds.labels.data<int64_t>();
    int64_t out_of_range = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (l[i] < 0 || l[i] >= 10) {
        ++out_of_range;
        continue;
      }
      ++histogram[l[i]];
    }
    CHECK(out_of_range == 0);
    for (int64_t c : histogram) CHECK(c == n / 10);
    // Real images: mostly black background, some bright pixels.
    const uint8_t* px = ds.images.data<uint8_t>();
    int64_t zeros = 0, bright = 0;
    for (int64_t i = 0; i < 784 * 100; ++i) {
      zeros += px[i] == 0;
      bright += px[i] > 200;
    }
    CHECK(zeros > 784 * 100 / 5);
    CHECK(bright > 784 * 100 / 50);
  }
}

TEST_CASE("idx: a gzip bomb is refused before it is inflated into memory", "[data][idx]") {
  test::TempDir dir("stoke_test_idx_bomb");
  // 10 MB of zeros compress to ~10 KB: the header's size is honest, the memory is what is limited.
  const Bytes zeros(size_t{1000} * 100 * 100, 0);
  write_gz(dir.file("bomb.gz"), idx_bytes(0x08, {1000, 100, 100}, zeros));
  CHECK(read_bytes(dir.file("bomb.gz")).size() < 100000);
  CHECK_THROWS_WITH(data::read_idx(dir.file("bomb.gz"), {.max_bytes = 1 << 20}),
                    Catch::Contains("bomb.gz") &&
                        Catch::Contains("the header declares dims [1000, 100, 100] of u8, which "
                                        "need 10000000 bytes of memory (after decompression), "
                                        "more than the 1048576 bytes allowed"));
  // Widening i8 to i32 counts both copies: 4 + 1 bytes per element.
  write_gz(dir.file("i8.gz"), idx_bytes(0x09, {1000, 10}, Bytes(10000, 1)));
  CHECK_THROWS_WITH(data::read_idx(dir.file("i8.gz"), {.max_bytes = 49999}),
                    Catch::Contains("need 50000 bytes"));
  CHECK(data::read_idx(dir.file("i8.gz"), {.max_bytes = 50000}).numel() == 10000);
  // Within the limit (and by default, within the memory available) it loads.
  CHECK(data::read_idx(dir.file("bomb.gz"), {.max_bytes = 10000000}).numel() == 10000000);
  CHECK(data::read_idx(dir.file("bomb.gz")).numel() == 10000000);
}

TEST_CASE("idx: max_items reads only the first entries, and a short stream fails early",
          "[data][idx]") {
  test::TempDir dir("stoke_test_idx_limit");
  const Bytes px = noise(100 * 3 * 4, 7);
  for (const bool gz : {false, true}) {
    INFO((gz ? "gzip" : "raw"));
    const std::string path = dir.file(gz ? "i.gz" : "i");
    (gz ? write_gz : write_raw)(path, idx_bytes(0x08, {100, 3, 4}, px));
    const Tensor some = data::read_idx(path, {.max_items = 10});
    CHECK(some.shape() == Shape{10, 3, 4});
    CHECK(tensor_bytes(some) == Bytes(px.begin(), px.begin() + 120));
    CHECK(data::read_idx(path, {.max_items = 1000}).shape() == Shape{100, 3, 4});
    CHECK(data::read_idx_shape(path) == Shape{100, 3, 4});
    // The memory limit counts what is read, not what the header declares.
    CHECK(data::read_idx(path, {.max_bytes = 120, .max_items = 10}).numel() == 120);
    // Fewer entries than the limit needs: named, with what the stream holds. A raw file's size is
    // checked against its header at no cost, limit or not; a gzip stream is inflated only as far
    // as the limit needs.
    const std::string short_path = dir.file(gz ? "s.gz" : "s");
    (gz ? write_gz : write_raw)(short_path,
                                idx_bytes(0x08, {100, 3, 4}, Bytes(px.begin(), px.begin() + 60)));
    for (const int64_t limit : {2, 10}) {
      INFO("limit " << limit);
      if (gz && limit == 2) {
        CHECK(data::read_idx(short_path, {.max_items = 2}).numel() == 24);
      } else if (gz) {
        CHECK_THROWS_WITH(data::read_idx(short_path, {.max_items = limit}),
                          Contains("the first 10 entries of the header's dims [100, 3, 4] need "
                                   "120 data bytes") &&
                              Contains("only 60 are present"));
      } else {
        CHECK_THROWS_WITH(data::read_idx(short_path, {.max_items = limit}),
                          Contains("need 1200 data bytes") && Contains("only 60 are present"));
      }
    }
  }
  // A gzip stream declaring more than its compressed bytes can hold (deflate's 1032:1) fails
  // before inflating anything.
  write_gz(dir.file("liar.gz"), idx_bytes(0x08, {100000, 100, 100}, Bytes(1000, 0)));
  CHECK_THROWS_WITH(
      data::read_idx(dir.file("liar.gz")),
      Contains("compressed bytes left can hold at most") && Contains("need 1000000000 data bytes"));
  // load_mnist compares the counts both headers declare, even when it reads fewer.
  write_raw(dir.file("train-images-idx3-ubyte"), idx_bytes(0x08, {100, 3, 4}, px));
  Bytes labels(100, 1);
  write_raw(dir.file("train-labels-idx1-ubyte"), idx_bytes(0x08, {100}, labels));
  CHECK(data::load_mnist(dir.path.string(), true, 10).images.size(0) == 10);
  write_raw(dir.file("train-labels-idx1-ubyte"), idx_bytes(0x08, {99}, Bytes(99, 1)));
  CHECK_THROWS_WITH(data::load_mnist(dir.path.string(), true, 10),
                    Contains("has 100 images but") && Contains("has 99 labels"));
}
