#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "data/idx_dataset.h"
#include "data/image_folder.h"
#include "stoke/stoke.h"

// The test's own PNG/JPEG/BMP writer, so round trips do not go through the library's encoder.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wall"
#pragma GCC diagnostic ignored "-Wextra"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb/stb_image_write.h>
#include "support/temp_dir.h"
#pragma GCC diagnostic pop

using namespace stoke;
using Catch::Contains;
namespace fs = std::filesystem;

namespace {

using Bytes = std::vector<uint8_t>;

Bytes pattern(int h, int w, int c, int seed) {
  Bytes b(static_cast<size_t>(h * w * c));
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(i * 13 + seed * 41);
  return b;
}

void write_png(const fs::path& path, const Bytes& px, int h, int w, int c) {
  fs::create_directories(path.parent_path());
  REQUIRE(stbi_write_png(path.c_str(), w, h, c, px.data(), w * c) != 0);
}

Bytes file_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

void put_file(const fs::path& p, const Bytes& b) {
  fs::create_directories(p.parent_path());
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

}  // namespace

TEST_CASE("ImageFolderDataset orders classes and files by name and round-trips PNG pixels") {
  test::TempDir dir("stoke_test_folder");
  const fs::path root = dir.path;
  // (path, h, w, c, seed); expected order: class "cat" < "dog", files sorted, subdirectories
  // after the class directory's own files (torchvision's sorted(os.walk)).
  struct Img {
    std::string rel;
    int h, w, c, label;
  };
  const std::vector<Img> imgs = {{"cat/a.png", 5, 4, 3, 0},
                                 {"cat/b.png", 2, 7, 4, 0},
                                 {"dog/X.PNG", 6, 6, 1, 1},
                                 {"dog/y.png", 3, 3, 2, 1},
                                 {"dog/sub/z.png", 4, 2, 3, 1}};
  for (size_t i = 0; i < imgs.size(); ++i)
    write_png(root / imgs[i].rel, pattern(imgs[i].h, imgs[i].w, imgs[i].c, int(i)), imgs[i].h,
              imgs[i].w, imgs[i].c);
  put_file(root / "dog" / "notes.txt", {'h', 'i'});  // not an image: skipped
  put_file(root / "top.png", {});                    // not in a class directory: ignored

  data::ImageFolderDataset ds(root.string());
  REQUIRE(ds.size() == 5);
  CHECK(ds.num_classes() == 2);
  CHECK(ds.class_names() == std::vector<std::string>{"cat", "dog"});
  data::Example ex;
  for (size_t i = 0; i < imgs.size(); ++i) {
    INFO(imgs[i].rel);
    CHECK(ds.path(int64_t(i)) == (root / imgs[i].rel).string());
    ds.get(int64_t(i), ex);
    CHECK(ex.label == imgs[i].label);
    CHECK(ex.height == imgs[i].h);
    CHECK(ex.width == imgs[i].w);
    CHECK(ex.channels == imgs[i].c);
    CHECK(ex.pixels == pattern(imgs[i].h, imgs[i].w, imgs[i].c, int(i)));
  }
  CHECK(ds.describe(2) == (root / "dog/X.PNG").string());

  // channels = 1 converts RGB with stb's luma weights; channels = 3 replicates grey.
  data::ImageFolderDataset grey(root.string(), {.channels = 1});
  grey.get(0, ex);
  const Bytes rgb = pattern(5, 4, 3, 0);
  REQUIRE(ex.channels == 1);
  for (int p = 0; p < 20; ++p)
    CHECK(ex.pixels[size_t(p)] ==
          ((rgb[size_t(3 * p)] * 77 + rgb[size_t(3 * p + 1)] * 150 + rgb[size_t(3 * p + 2)] * 29) >>
           8));
  data::ImageFolderDataset color(root.string(), {.channels = 3});
  color.get(2, ex);
  REQUIRE(ex.channels == 3);
  const Bytes g = pattern(6, 6, 1, 2);
  CHECK(ex.pixels[3 * 7] == g[7]);
  CHECK(ex.pixels[3 * 7 + 2] == g[7]);
}

TEST_CASE("ImageFolderDataset decodes JPEG and BMP") {
  test::TempDir dir("stoke_test_folder");
  const int h = 16, w = 16;
  Bytes flat(h * w * 3);
  for (size_t i = 0; i < flat.size(); i += 3) {
    flat[i] = 200;
    flat[i + 1] = 100;
    flat[i + 2] = 50;
  }
  fs::create_directories(dir.path / "a");
  REQUIRE(stbi_write_jpg((dir.path / "a/img.JPG").c_str(), w, h, 3, flat.data(), 95) != 0);
  REQUIRE(stbi_write_bmp((dir.path / "a/img2.bmp").c_str(), w, h, 3, flat.data()) != 0);
  data::ImageFolderDataset ds(dir.path.string());
  REQUIRE(ds.size() == 2);
  data::Example ex;
  // JPEG is lossy: a flat colour comes back within a few levels. stb's writer at quality 95 (no
  // chroma subsampling) rounds Y, Cb, Cr to integers (R = Y + 1.402 Cr: +-1.2 levels), quantizes
  // each flat block's DC in steps of 2 (+-1/8 level), and the decoder's integer IDCT and colour
  // conversion round twice more (+-1 each): about 3.5 levels in all, 4 after rounding.
  ds.get(0, ex);
  REQUIRE(ex.pixels.size() == flat.size());
  int worst = 0;
  for (size_t i = 0; i < flat.size(); ++i)
    worst = std::max(worst, std::abs(int(ex.pixels[i]) - int(flat[i])));
  CHECK(worst <= 4);
  ds.get(1, ex);
  CHECK(ex.pixels == flat);
}

TEST_CASE("ImageFolderDataset reports corrupt, truncated, unsupported and oversized files") {
  test::TempDir dir("stoke_test_folder");
  const fs::path good = dir.path / "c" / "good.png";
  write_png(good, pattern(20, 30, 3, 1), 20, 30, 3);
  const Bytes png = file_bytes(good);
  const fs::path cut = dir.path / "c" / "cut.png";
  put_file(cut, Bytes(png.begin(), png.begin() + static_cast<long>(png.size() / 2)));
  const fs::path header_only = dir.path / "c" / "header.png";
  put_file(header_only, Bytes(png.begin(), png.begin() + 20));
  const fs::path text = dir.path / "c" / "text.png";
  const std::string words = "this is not an image, just text that was renamed";
  put_file(text, Bytes(words.begin(), words.end()));
  const fs::path gif = dir.path / "c" / "z.jpg";  // a GIF header under a .jpg name
  put_file(gif, {'G', 'I', 'F', '8', '9', 'a', 1, 0, 1, 0, 0, 0, 0});

  data::ImageFolderDataset ds(dir.path.string());
  REQUIRE(ds.size() == 5);  // cut, good, header, text, z
  data::Example ex;
  CHECK_THROWS_WITH(ds.get(0, ex),
                    Contains("sample 0") && Contains(cut.string()) && Contains("cannot decode"));
  ds.get(1, ex);
  CHECK(ex.pixels == pattern(20, 30, 3, 1));
  CHECK_THROWS_WITH(ds.get(2, ex), Contains(header_only.string()) && Contains("cannot decode"));
  CHECK_THROWS_WITH(ds.get(3, ex), Contains(text.string()) && Contains("cannot decode") &&
                                       Contains("unknown data starting 74 68 69 73") &&
                                       Contains("not a PNG, JPEG or BMP image"));
  CHECK_THROWS_WITH(ds.get(4, ex), Contains(gif.string()) && Contains("cannot decode") &&
                                       Contains("a GIF, not a PNG, JPEG or BMP image"));

  data::ImageFolderDataset small(dir.path.string(), {.max_width = 29, .max_height = 100});
  CHECK_THROWS_WITH(small.get(1, ex), Contains(good.string()) && Contains("image is 30x20") &&
                                          Contains("larger than the maximum 29x100"));

  fs::remove(cut);
  CHECK_THROWS_WITH(ds.get(0, ex), Contains(cut.string()) && Contains("cannot open"));
}

TEST_CASE("ImageFolderDataset refuses a missing root, no classes and empty classes") {
  test::TempDir dir("stoke_test_folder");
  CHECK_THROWS_WITH(data::ImageFolderDataset((dir.path / "nope").string()),
                    Contains("nope' does not exist"));
  CHECK_THROWS_WITH(data::ImageFolderDataset(dir.path.string()),
                    Contains("has no class directories"));
  write_png(dir.path / "a" / "1.png", pattern(2, 2, 1, 0), 2, 2, 1);
  fs::create_directories(dir.path / "b");
  put_file(dir.path / "b" / "readme.txt", {'x'});
  CHECK_THROWS_WITH(data::ImageFolderDataset(dir.path.string()),
                    Contains((dir.path / "b").string()) && Contains("has no image files"));
  fs::remove_all(dir.path / "b");
  CHECK_THROWS_WITH(data::ImageFolderDataset(dir.path.string(), {.channels = 2}),
                    Contains("expected channels 0 (as stored), 1 or 3, got 2"));
}

TEST_CASE("write_image_folder exports a dataset that reads back with the same pixels and labels") {
  test::TempDir dir("stoke_test_folder");
  const int64_t n = 30, h = 5, w = 3, classes = 12;
  Tensor images = empty({n, h, w}, {.dtype = DType::u8});
  std::vector<int64_t> labels(n);
  for (int64_t i = 0; i < n * h * w; ++i) images.data<uint8_t>()[i] = uint8_t(i * 7);
  for (int64_t i = 0; i < n; ++i) labels[size_t(i)] = (i * 5) % classes;
  data::IdxImageDataset src(images, from_vector(labels, {n}, {.dtype = DType::i64}), "mem");
  REQUIRE(src.num_classes() == classes);

  const fs::path out = dir.path / "png";
  CHECK(data::write_image_folder(src, out.string(), {.limit = 25}) == 25);
  CHECK(fs::exists(out / "00"));  // zero-padded so that name order is label order
  CHECK(fs::exists(out / "11"));
  CHECK(fs::exists(out / "05" / "01.png"));
  data::ImageFolderDataset back(out.string());
  REQUIRE(back.size() == 25);
  REQUIRE(back.num_classes() == classes);
  // Within a class, files keep the dataset's order; classes come in label order.
  std::vector<int64_t> expected;
  for (int64_t c = 0; c < classes; ++c)
    for (int64_t i = 0; i < 25; ++i)
      if (labels[size_t(i)] == c) expected.push_back(i);
  data::Example a, b;
  for (int64_t k = 0; k < 25; ++k) {
    back.get(k, b);
    src.get(expected[size_t(k)], a);
    CHECK(b.label == a.label);
    CHECK(b.pixels == a.pixels);
    CHECK(b.channels == 1);
  }
}

TEST_CASE("write_image_folder uses class names only when reading back keeps the labels") {
  test::TempDir dir("stoke_test_folder");
  Tensor images = zeros({2, 2, 2}, {.dtype = DType::u8});
  Tensor labels = from_vector<int64_t>({0, 1}, {2}, {.dtype = DType::i64});
  data::IdxImageDataset sorted(images, labels, "mem", {"ant", "bee"});
  data::write_image_folder(sorted, (dir.path / "s").string());
  CHECK(data::ImageFolderDataset((dir.path / "s").string()).class_names() ==
        std::vector<std::string>{"ant", "bee"});
  // "zebra" would sort after "ant" and swap the labels; "a/b" is not a directory name.
  for (const auto& names : {std::vector<std::string>{"zebra", "ant"}, {"a/b", "c"}}) {
    data::IdxImageDataset ds(images, labels, "mem", names);
    const fs::path out = dir.path / names[0].substr(0, 1);
    data::write_image_folder(ds, out.string());
    data::ImageFolderDataset back(out.string());
    CHECK(back.class_names() == std::vector<std::string>{"0", "1"});
    data::Example ex;
    back.get(1, ex);
    CHECK(ex.label == 1);
  }
}
