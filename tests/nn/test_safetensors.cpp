#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <random>

#include "nn/checkpoint/safetensors.h"
#include "stoke/stoke.h"
#include "support/temp_dir.h"

using namespace stoke;
using namespace stoke::nn;
namespace fs = std::filesystem;
using Catch::Contains;

namespace {

// A fresh directory per test, removed at the end, that lists its entries.
struct TempDir : test::TempDir {
  TempDir() : test::TempDir("stoke_safetensors") {}
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(path)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
};

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// The raw bytes of a tensor in row-major order.
std::string tensor_bytes(const Tensor& t) {
  Tensor c = t.contiguous();
  const auto* p = static_cast<const char*>(c.data_ptr());
  return c.numel() ? std::string(p, p + c.numel() * c.element_size()) : std::string();
}

// A safetensors file: length `n` (the header's size unless overridden), header, data.
std::string make_file(const std::string& header, const std::string& data = "",
                      std::optional<uint64_t> n = std::nullopt) {
  const uint64_t length = n.value_or(header.size());
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(length >> (8 * i));
  return out + header + data;
}

const Tensor& find(const NamedTensors& tensors, const std::string& name) {
  for (const auto& [n, t] : tensors)
    if (n == name) return t;
  FAIL("no tensor named " << name);
  static Tensor none;
  return none;
}

void check_same(const Tensor& got, const Tensor& expected) {
  CHECK(got.dtype() == expected.dtype());
  CHECK(got.shape() == expected.shape());
  CHECK(got.is_contiguous());
  CHECK(tensor_bytes(got) == tensor_bytes(expected));
}

// One tensor of every dtype, with values that exercise signs, extremes and rounding.
NamedTensors every_dtype() {
  return {
      {"w.f32", randn({3, 5})},
      {"w.f64", randn({4, 2}, {.dtype = DType::f64})},
      {"w.f16", randn({7}).to(DType::f16)},
      {"w.bf16", randn({2, 3}).to(DType::bf16)},
      {"i32", from_vector<int32_t>({INT32_MIN, -1, 0, 1, INT32_MAX}, {5}, {.dtype = DType::i32})},
      {"i64", from_vector<int64_t>({INT64_MIN, -7, INT64_MAX}, {3, 1}, {.dtype = DType::i64})},
      {"u8", from_vector<int>({0, 1, 128, 255}, {2, 2}, {.dtype = DType::u8})},
      {"mask", from_vector<int>({1, 0, 0, 1, 1}, {5}, {.dtype = DType::boolean})},
  };
}

// The tensors of tests/fixtures/make_safetensors_fixture.py (TENSORS there).
NamedTensors reference_tensors() {
  return {
      {"f32", from_vector<double>({-1, -0.5, 0, 0.5, 1, 1.5}, {2, 3})},
      {"f64", from_vector<double>({-1.0 / 3.0, 0, 1.0 / 3.0}, {3}, {.dtype = DType::f64})},
      {"f16", from_vector<double>({-2, 0.5, 1 + 0x1p-10, 65504}, {2, 2}, {.dtype = DType::f16})},
      {"bf16", from_vector<double>({1, -3.5, 0x1p-7, 0x1p100}, {4}, {.dtype = DType::bf16})},
      {"i32", from_vector<int32_t>({INT32_MIN, -1, 0, INT32_MAX}, {2, 2}, {.dtype = DType::i32})},
      {"i64", from_vector<int64_t>({INT64_MIN, 1, INT64_MAX}, {3}, {.dtype = DType::i64})},
      {"u8", from_vector<int>({0, 1, 127, 128, 255}, {5}, {.dtype = DType::u8})},
      {"bool", from_vector<int>({1, 0, 1}, {3}, {.dtype = DType::boolean})},
      {"scalar", scalar_tensor(3.25)},
      {"empty", zeros({0, 4})},
  };
}

const std::string kFixture = std::string(STOKE_FIXTURE_DIR) + "/safetensors_reference.safetensors";
const std::string kFixtureScript = std::string(STOKE_FIXTURE_DIR) + "/make_safetensors_fixture.py";

}  // namespace

TEST_CASE("safetensors: every dtype round-trips bit for bit", "[nn][safetensors]") {
  TempDir dir;
  const NamedTensors tensors = every_dtype();
  save_safetensors(dir.file("all.safetensors"), tensors);
  const SafetensorsFile loaded = load_safetensors(dir.file("all.safetensors"));
  REQUIRE(loaded.tensors.size() == tensors.size());
  CHECK(loaded.metadata.empty());
  for (const auto& [name, t] : tensors) {
    INFO(name);
    check_same(find(loaded.tensors, name), t);
  }
  // Data order is the reference library's: descending alignment (I64 F64 F32 I32 BF16 F16 U8
  // BOOL), then name.
  std::vector<std::string> order;
  for (const auto& [name, t] : loaded.tensors) order.push_back(name);
  CHECK(order ==
        std::vector<std::string>{"i64", "w.f64", "w.f32", "i32", "w.bf16", "w.f16", "u8", "mask"});
}

TEST_CASE("safetensors: 0-dim, empty and non-contiguous tensors", "[nn][safetensors]") {
  TempDir dir;
  Tensor base = arange(12).view({3, 4});
  Tensor leaf = randn({2, 2}).set_requires_grad(true);
  const NamedTensors tensors = {
      {"scalar", scalar_tensor(-2.5, {.dtype = DType::f64})},
      {"empty", zeros({0, 3})},
      {"empty1d", zeros({0}, {.dtype = DType::i64})},
      {"transposed", base.t()},
      {"strided", base.slice(1, 0, 4, 2)},
      {"offset_row", base.select(0, 2)},
      {"expanded", arange(3).view({3, 1}).expand({3, 4})},
      {"leaf", leaf},
  };
  save_safetensors(dir.file("v.safetensors"), tensors);
  const SafetensorsFile loaded = load_safetensors(dir.file("v.safetensors"));
  REQUIRE(loaded.tensors.size() == tensors.size());
  for (const auto& [name, t] : tensors) {
    INFO(name);
    check_same(find(loaded.tensors, name), t);
  }
  CHECK(find(loaded.tensors, "scalar").dim() == 0);
  CHECK(find(loaded.tensors, "scalar").item() == -2.5);
  CHECK(find(loaded.tensors, "transposed").to_vector<float>() ==
        std::vector<float>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11});
  CHECK_FALSE(find(loaded.tensors, "leaf").requires_grad());
  // The empty tensors own no bytes: the data section is exactly the other tensors' bytes.
  const std::string bytes = read_bytes(dir.file("v.safetensors"));
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  CHECK(bytes.size() - 8 - n == 8 + (12 + 6 + 4 + 12 + 4) * 4);
}

TEST_CASE("safetensors: metadata round-trips, and only the checksum is written when empty",
          "[nn][safetensors]") {
  TempDir dir;
  const std::map<std::string, std::string> metadata = {
      {"format", "pt"},
      {"epoch", "12"},
      {"quotes \"and\" \\backslashes\\", "tab\tnewline\ncontrol\x01"},
      {"unicode", "\xc3\xa9t\xc3\xa9 \xe2\x9c\x93"},
      {"", ""},
  };
  save_safetensors(dir.file("m.safetensors"), {{"x", ones({2})}}, metadata);
  const SafetensorsFile loaded = load_safetensors(dir.file("m.safetensors"));
  CHECK(loaded.metadata == metadata);
  CHECK(read_bytes(dir.file("m.safetensors")).substr(8, 17) == "{\"__metadata__\":{");

  save_safetensors(dir.file("none.safetensors"), {{"x", ones({2})}});
  CHECK(read_bytes(dir.file("none.safetensors")).substr(8, 31) ==
        "{\"__metadata__\":{\"stoke.crc32\":");
  CHECK(load_safetensors(dir.file("none.safetensors")).metadata.empty());

  // A file with no tensors at all is valid.
  save_safetensors(dir.file("nothing.safetensors"), {}, {{"k", "v"}});
  const SafetensorsFile nothing = load_safetensors(dir.file("nothing.safetensors"));
  CHECK(nothing.tensors.empty());
  CHECK(nothing.metadata.at("k") == "v");

  CHECK_THROWS_WITH(save_safetensors(dir.file("bad.safetensors"), {}, {{"k", "\xff"}}),
                    Contains("not valid UTF-8"));
}

TEST_CASE("safetensors: deterministic bytes and the reference layout", "[nn][safetensors]") {
  TempDir dir;
  NamedTensors tensors = every_dtype();
  save_safetensors(dir.file("a.safetensors"), tensors, {{"format", "pt"}});
  save_safetensors(dir.file("b.safetensors"), tensors, {{"format", "pt"}});
  std::reverse(tensors.begin(), tensors.end());  // input order does not change the file
  save_safetensors(dir.file("c.safetensors"), tensors, {{"format", "pt"}});
  const std::string a = read_bytes(dir.file("a.safetensors"));
  CHECK(a == read_bytes(dir.file("b.safetensors")));
  CHECK(a == read_bytes(dir.file("c.safetensors")));

  uint64_t n = 0;
  std::memcpy(&n, a.data(), 8);
  CHECK(n % 8 == 0);  // padded, so the data section starts 8-byte aligned
  const std::string header = a.substr(8, n);
  CHECK(header.find("\"i64\":{\"dtype\":\"I64\",\"shape\":[3,1],\"data_offsets\":[0,24]}") !=
        std::string::npos);
  CHECK(header.find_last_not_of(' ') == header.rfind('}'));
}

TEST_CASE("safetensors: the reference fixture loads and is reproduced byte for byte",
          "[nn][safetensors]") {
  const SafetensorsFile loaded = load_safetensors(kFixture);
  const NamedTensors expected = reference_tensors();
  REQUIRE(loaded.tensors.size() == expected.size());
  for (const auto& [name, t] : expected) {
    INFO(name);
    check_same(find(loaded.tensors, name), t);
  }
  CHECK(loaded.metadata == std::map<std::string, std::string>{{"format", "pt"}});

  TempDir dir;
  save_safetensors(dir.file("ours.safetensors"), expected, {{"format", "pt"}});
  CHECK(read_bytes(dir.file("ours.safetensors")) == read_bytes(kFixture));
}

TEST_CASE("safetensors: Python reads our file (safetensors.torch when installed)",
          "[nn][safetensors][python]") {
  const char* python = "/usr/bin/python3";
  if (::access(python, X_OK) != 0) {
    WARN("skipped: " << python << " not found");
    return;
  }
  TempDir dir;
  save_safetensors(dir.file("ours.safetensors"), reference_tensors(), {{"format", "pt"}});
  // The script checks with a pure-Python reader and, when importable, safetensors.torch.load_file.
  const std::string cmd = std::string(python) + " '" + kFixtureScript + "' --check '" +
                          dir.file("ours.safetensors") + "' > '" + dir.file("log.txt") + "' 2>&1";
  const int rc = std::system(cmd.c_str());
  INFO(read_bytes(dir.file("log.txt")));
  CHECK(rc == 0);
}

TEST_CASE("safetensors: writes are atomic", "[nn][safetensors]") {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  save_safetensors(path, {{"a", ones({3})}});
  CHECK(dir.entries() == std::vector<std::string>{"model.safetensors"});  // no temp file left
  save_safetensors(path, {{"b", zeros({2})}});                            // replaces the old file
  CHECK(dir.entries() == std::vector<std::string>{"model.safetensors"});
  CHECK(load_safetensors(path).tensors.at(0).first == "b");

  SECTION("a missing directory: error with the path and strerror, no file") {
    const std::string missing = dir.file("no/such/dir/model.safetensors");
    CHECK_THROWS_WITH(save_safetensors(missing, {{"a", ones({3})}}),
                      Contains(missing) && Contains("No such file or directory"));
    CHECK(dir.entries() == std::vector<std::string>{"model.safetensors"});
  }
  SECTION("rename fails (the target is a directory): temp file removed, target untouched") {
    fs::create_directory(dir.file("taken"));
    CHECK_THROWS_WITH(save_safetensors(dir.file("taken"), {{"a", ones({3})}}),
                      Contains("taken") && Contains("renaming"));
    CHECK(dir.entries() == std::vector<std::string>{"model.safetensors", "taken"});
    CHECK(fs::is_empty(dir.file("taken")));
  }
  SECTION("an unwritable directory (permissions do not bind root)") {
    if (::geteuid() == 0) return;
    const std::string ro = dir.file("ro");
    fs::create_directory(ro);
    fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec);
    CHECK_THROWS_WITH(save_safetensors(ro + "/m.safetensors", {{"a", ones({3})}}),
                      Contains("Permission denied"));
    fs::permissions(ro, fs::perms::owner_all);
    CHECK(fs::is_empty(ro));
  }
}

TEST_CASE("safetensors: save rejects bad input", "[nn][safetensors]") {
  TempDir dir;
  const std::string path = dir.file("x.safetensors");
  CHECK_THROWS_WITH(save_safetensors(path, {{"a", ones({1})}, {"a", ones({2})}}),
                    Contains(path) && Contains("duplicate tensor name 'a'"));
  CHECK_THROWS_WITH(save_safetensors(path, {{"__metadata__", ones({1})}}), Contains("reserved"));
  CHECK_THROWS_WITH(save_safetensors(path, {{"u", Tensor()}}), Contains("'u' is undefined"));
  CHECK(dir.entries().empty());
}

TEST_CASE("safetensors: malformed files give errors naming the path and the problem",
          "[nn][safetensors]") {
  TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  const auto load_bytes = [&](const std::string& bytes) {
    write_bytes(path, bytes);
    return load_safetensors(path);
  };
  const auto fails_with = [&](const std::string& bytes, const std::string& problem) {
    INFO("expected error: " << problem);
    CHECK_THROWS_WITH(load_bytes(bytes), Contains(path) && Contains(problem));
  };
  const auto entry = [](const std::string& body) { return "{\"t\":{" + body + "}}"; };
  const std::string f32x2 = R"("dtype":"F32","shape":[2],)";

  // Sanity: the builder makes valid files.
  CHECK(load_bytes(make_file(entry(f32x2 + R"("data_offsets":[0,8])"), std::string(8, '\0')))
            .tensors.size() == 1);

  fails_with("", "shorter than the 8-byte header length");
  fails_with("1234567", "shorter than the 8-byte header length");
  fails_with(make_file("{}", "", 100), "header length 100 is larger than the file");
  fails_with(make_file("{}", "", 200'000'000), "exceeds the 100 MB limit");
  fails_with(make_file("{}", "", ~uint64_t{0}), "exceeds the 100 MB limit");
  fails_with(make_file("{\"t\": "), "header is not valid JSON: [json.exception.parse_error");
  fails_with(make_file(""), "header is not valid JSON");
  fails_with(make_file("{\"a\":\"\xff\"}"), "header is not valid JSON");
  fails_with(make_file("[1, 2]"), "header is not a JSON object (got array)");
  fails_with(make_file("7"), "header is not a JSON object (got number)");
  fails_with(make_file("{\"t\":5}"), "tensor 't': expected an object");
  fails_with(make_file(entry(R"("shape":[2],"data_offsets":[0,8])")), "missing \"dtype\"");
  fails_with(make_file(entry(R"("dtype":"F32","data_offsets":[0,8])")), "missing \"shape\"");
  fails_with(make_file(entry(R"("dtype":"F32","shape":[2])")), "missing \"data_offsets\"");
  fails_with(make_file(entry(R"("dtype":7,"shape":[2],"data_offsets":[0,8])")),
             "\"dtype\" must be a string, got number");
  fails_with(make_file(entry(R"("dtype":"F32","shape":{},"data_offsets":[0,8])")),
             "\"shape\" must be an array, got object");
  fails_with(make_file(entry(R"("dtype":"Q4","shape":[2],"data_offsets":[0,8])")),
             "unknown dtype \"Q4\"");
  fails_with(make_file(entry(R"("dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2])")),
             "unknown dtype \"F8_E4M3\"");
  fails_with(make_file(entry(R"("dtype":"F32","shape":[-2],"data_offsets":[0,8])")),
             "shape dims must be non-negative integers, got -2");
  fails_with(make_file(entry(R"("dtype":"F32","shape":[2.5],"data_offsets":[0,8])")),
             "shape dims must be non-negative integers, got 2.5");
  fails_with(make_file(entry(R"("dtype":"F32","shape":["2"],"data_offsets":[0,8])")),
             "shape dims must be non-negative integers");
  fails_with(
      make_file(entry(R"("dtype":"U8","shape":[18446744073709551615],"data_offsets":[0,1])")),
      "is too large");
  fails_with(
      make_file(entry(R"("dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,1])")),
      "has too many elements");
  fails_with(
      make_file(entry(R"("dtype":"I64","shape":[4611686018427387904],"data_offsets":[0,8])")),
      "has too many elements");
  fails_with(make_file(entry(f32x2 + R"("data_offsets":"0,8")")),
             "must be two non-negative integers");
  fails_with(make_file(entry(f32x2 + R"("data_offsets":[0])")), "must be two non-negative");
  fails_with(make_file(entry(f32x2 + R"("data_offsets":[0,8,8])")), "must be two non-negative");
  fails_with(make_file(entry(f32x2 + R"("data_offsets":[-8,0])")), "must be two non-negative");
  fails_with(make_file(entry(f32x2 + R"("data_offsets":[0,8.0])")), "must be two non-negative");
  fails_with(make_file(entry(f32x2 + R"("data_offsets":[0,1e30])")), "must be two non-negative");
  fails_with(make_file(entry(f32x2 + R"("data_offsets":[8,0])"), std::string(8, '\0')),
             "data_offsets [8, 0] has begin > end");
  fails_with(make_file(entry(f32x2 + R"("data_offsets":[0,8])"), std::string(7, '\0')),
             "end beyond the data section (7 bytes)");
  fails_with(make_file(entry(f32x2 + R"("data_offsets":[8,16])"), std::string(8, '\0')),
             "end beyond the data section");
  fails_with(make_file(entry(f32x2 + R"("data_offsets":[0,12])"), std::string(12, '\0')),
             "span 12 bytes, but shape [2] of F32 needs 8");
  fails_with(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                       R"("b":{"dtype":"U8","shape":[4],"data_offsets":[6,10]}})",
                       std::string(10, '\0')),
             "tensors 'a' and 'b' overlap");
  fails_with(make_file(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                       R"("b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})",
                       std::string(16, '\0')),
             "overlap");
  fails_with(make_file(R"({"__metadata__":[1]})"), "\"__metadata__\" must be an object");
  fails_with(make_file(R"({"__metadata__":{"epoch":12}})"),
             "metadata value of 'epoch' must be a string, got number");
  fails_with(make_file(R"({"a":{"dtype":"F32","shape":[],"data_offsets":[0,4]},)"
                       R"("a":{"dtype":"F32","shape":[],"data_offsets":[4,8]}})",
                       std::string(8, '\0')),
             "duplicate key \"a\"");
  fails_with(make_file(std::string(100000, '[') + std::string(100000, ']')), "nested deeper");
  fails_with(make_file("{\"t\":" + std::string(100000, '[') + std::string(100000, ']') + "}"),
             "nested deeper");
  fails_with(make_file(entry(R"("dtype":"F32","shape":[[2]],"data_offsets":[0,8])")),
             "nested deeper");

  // Loading a missing file or a directory.
  CHECK_THROWS_WITH(load_safetensors(dir.file("missing")),
                    Contains("missing") && Contains("No such file"));
  CHECK_THROWS_WITH(load_safetensors(dir.path.string()), Contains("not a regular file"));
}

TEST_CASE("safetensors: lenient where the format allows", "[nn][safetensors]") {
  TempDir dir;
  const std::string path = dir.file("ok.safetensors");
  // Empty tensors own no bytes (at the offset where the data before them ends, as the reference
  // library places them), unknown entry fields are ignored, and BOOL bytes other than 0/1 read as
  // true.
  write_bytes(path, make_file(R"({"z":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},)"
                              R"("m":{"dtype":"BOOL","shape":[4],"data_offsets":[0,4],"x":1}})",
                              std::string("\x00\x02\xff\x01", 4)));
  const SafetensorsFile f = load_safetensors(path);
  REQUIRE(f.tensors.size() == 2);
  CHECK(tensor_bytes(find(f.tensors, "m")) == std::string("\x00\x01\x01\x01", 4));
  CHECK(find(f.tensors, "z").numel() == 0);
}

TEST_CASE("safetensors: truncated and corrupted files never crash", "[nn][safetensors][fuzz]") {
  TempDir dir;
  const std::string good = dir.file("good.safetensors");
  NamedTensors tensors = every_dtype();
  tensors.push_back({"scalar", scalar_tensor(1)});
  tensors.push_back({"empty", zeros({0, 2})});
  save_safetensors(good, tensors, {{"format", "pt"}});
  const std::string bytes = read_bytes(good);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);

  int loaded = 0, rejected = 0;
  const auto attempt = [&](const std::string& variant) {
    // A new file each time: ext4 flushes a file truncated and rewritten in place on close, which
    // would make this loop disk-bound.
    const std::string path = dir.file("fuzz" + std::to_string(loaded + rejected));
    write_bytes(path, variant);
    try {
      const SafetensorsFile f = load_safetensors(path);
      for (const auto& [name, t] : f.tensors)
        REQUIRE(t.numel() * t.element_size() <= variant.size());
      ++loaded;
    } catch (const stoke::Error&) {
      ++rejected;
    }
    fs::remove(path);
  };
  // Every truncation fails (the last tensor's data, BOOL, is never empty).
  for (size_t len = 0; len < bytes.size(); ++len) attempt(bytes.substr(0, len));
  CHECK(loaded == 0);
  CHECK(rejected == static_cast<int>(bytes.size()));

  // Flipped bytes in the length field and header (fixed seed): load or a stoke::Error.
  std::mt19937 rng(20261121);
  std::uniform_int_distribution<size_t> where(0, static_cast<size_t>(8 + n - 1));
  std::uniform_int_distribution<int> flips(1, 3), bit(0, 7);
  for (int i = 0; i < 400; ++i) {
    std::string variant = bytes;
    for (int k = flips(rng); k > 0; --k) variant[where(rng)] ^= static_cast<char>(1 << bit(rng));
    attempt(variant);
  }
  CHECK(loaded + rejected == static_cast<int>(bytes.size()) + 400);
  CHECK(rejected > 0);
}

TEST_CASE("safetensors: the checksum catches corrupt data, shapes, names and metadata",
          "[nn][safetensors]") {
  TempDir dir;
  const std::string good = dir.file("good.safetensors");
  NamedTensors tensors = every_dtype();
  tensors.push_back({"twinA", ones({2, 3})});
  tensors.push_back({"twinB", zeros({2, 3})});
  save_safetensors(good, tensors, {{"epoch", "7"}});
  const std::string bytes = read_bytes(good);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  const std::string header = bytes.substr(8, n);

  // A loaded file saves again byte for byte: the key is verified, then left out of the metadata.
  const SafetensorsFile loaded = load_safetensors(good);
  CHECK(loaded.metadata == std::map<std::string, std::string>{{"epoch", "7"}});
  save_safetensors(dir.file("again.safetensors"), loaded.tensors, loaded.metadata);
  CHECK(read_bytes(dir.file("again.safetensors")) == bytes);

  const auto rejected_with = [&](const std::string& variant, const std::string& what) {
    const std::string path = dir.file("variant.safetensors");
    write_bytes(path, variant);
    CHECK_THROWS_WITH(load_safetensors(path), Contains(path) && Contains(what));
  };
  // Every single-bit flip in the data section (one bit per byte, rotating) fails the tensor's
  // checksum, named. BOOL bytes are read as 0/1, so only their low bit is a change.
  int flipped = 0;
  for (size_t i = 8 + n; i < bytes.size(); ++i) {
    std::string variant = bytes;
    variant[i] ^= static_cast<char>(1 << (i % 8));
    const std::string path = dir.file("flip.safetensors");
    write_bytes(path, variant);
    try {
      load_safetensors(path);
    } catch (const stoke::Error& e) {
      CHECK_THAT(e.what(), Contains("fails its checksum") && Contains("the file is corrupt"));
      ++flipped;
    }
  }
  const int bool_bytes = 5;  // every_dtype's BOOL tensor: bits 1-7 of its bytes are not data
  CHECK(flipped >= static_cast<int>(bytes.size() - 8 - n) - bool_bytes);

  // Names swapped between two tensors of one shape and dtype: both keep valid offsets.
  const auto renamed = [](std::string h, const std::string& from, const std::string& to) {
    const size_t at = h.find(from);
    REQUIRE(at != std::string::npos);
    return h.replace(at, from.size(), to);
  };
  const std::string swapped =
      renamed(renamed(renamed(header, "\"twinA\"", "\"twinX\""), "\"twinB\"", "\"twinA\""),
              "\"twinX\"", "\"twinB\"");
  rejected_with(bytes.substr(0, 8) + swapped + bytes.substr(8 + n), "fails its checksum");
  // A changed shape (same byte count) and an edited metadata value.
  std::string reshaped = header;
  const size_t twin = reshaped.find("\"twinA\":{\"dtype\":\"F32\",\"shape\":[2,3]");
  REQUIRE(twin != std::string::npos);
  reshaped.replace(reshaped.find("[2,3]", twin), 5, "[3,2]");
  rejected_with(bytes.substr(0, 8) + reshaped + bytes.substr(8 + n), "'twinA' fails its checksum");
  std::string edited = header;
  edited.replace(edited.find("\"epoch\":\"7\""), 11, "\"epoch\":\"9\"");
  rejected_with(bytes.substr(0, 8) + edited + bytes.substr(8 + n), "metadata fails its checksum");

  // The key is the writer's: a caller cannot pass one.
  CHECK_THROWS_WITH(save_safetensors(dir.file("r.safetensors"), {}, {{"stoke.crc32", "{}"}}),
                    Contains("reserved"));
}

TEST_CASE("safetensors: the data section is covered exactly by the tensors' offsets",
          "[nn][safetensors]") {
  TempDir dir;
  const std::string path = dir.file("cover.safetensors");
  const auto fails_with = [&](const std::string& bytes, const std::string& problem) {
    write_bytes(path, bytes);
    INFO("expected error: " << problem);
    CHECK_THROWS_WITH(load_safetensors(path), Contains(path) && Contains(problem));
  };
  const std::string two = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                          R"("b":{"dtype":"U8","shape":[4],"data_offsets":[8,12]}})";
  write_bytes(path, make_file(two, std::string(12, '\0')));
  CHECK(load_safetensors(path).tensors.size() == 2);
  // The reference library's rules (safetensors/src/tensor.rs, Metadata::validate and
  // read_metadata): sorted by offsets, each tensor begins where the previous ended, the first at
  // 0, and the last ends at the end of the file.
  fails_with(make_file(two, std::string(13, '\0')),
             "1 trailing bytes after the last tensor's data (the tensors cover 12 of the data "
             "section's 13 bytes)");
  fails_with(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                       R"("b":{"dtype":"U8","shape":[4],"data_offsets":[10,14]}})",
                       std::string(14, '\0')),
             "2 bytes of the data section before tensor 'b' (data_offsets [10, 14]) belong to no "
             "tensor: 'a' ends at 8");
  fails_with(
      make_file(R"({"b":{"dtype":"U8","shape":[4],"data_offsets":[3,7]}})", std::string(7, '\0')),
      "the first tensor must begin at 0");
  fails_with(make_file(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                       R"("z":{"dtype":"F32","shape":[0],"data_offsets":[2,2]}})",
                       std::string(4, '\0')),
             "tensors 'a' and 'z' overlap");
  fails_with(make_file("{}", std::string(3, 'x')), "3 trailing bytes");

  // The round-1 hole: bytes inserted into the name of the checksum's own key with the header
  // length left as it was. The header's padding absorbs them, so the JSON still parses, the
  // renamed key turns the check off, and every tensor would be read from 3 bytes too early.
  std::string bytes;
  uint64_t n = 0;
  for (std::string epoch = "7";; epoch += "0") {  // a metadata length with >= 3 padding spaces
    save_safetensors(path, {{"w", randn({4})}, {"v", randn({3})}}, {{"epoch", epoch}});
    bytes = read_bytes(path);
    std::memcpy(&n, bytes.data(), 8);
    if (bytes.substr(8 + n - 3, 3) == "   ") break;
  }
  const size_t key = bytes.find("stoke.crc32");
  REQUIRE(key != std::string::npos);
  std::string shifted = bytes;
  shifted.insert(key + 5, "abc");  // "stokeabc.crc32": the length field still says n
  fails_with(shifted, "3 trailing bytes after the last tensor's data");
  // The same key renamed without a shift: the data still reads right, but a reader of files only
  // stoke writes (stoke-train's --resume) refuses a file whose checksum key is gone.
  std::string renamed = bytes;
  renamed.replace(key, 11, "stoke.crc99");
  write_bytes(path, renamed);
  CHECK(load_safetensors(path).tensors.size() == 2);
  CHECK_THROWS_WITH(load_safetensors(path, {.require_checksum = true}),
                    Contains(path) && Contains("no \"stoke.crc32\" in the metadata"));
  write_bytes(path, bytes);
  CHECK(load_safetensors(path, {.require_checksum = true}).tensors.size() == 2);
}
