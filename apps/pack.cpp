// stoke-pack: converts a dataset (IDX, CIFAR-10/100 binary, image folder) offline into packed
// uint8 shards (data/packed.h) or exports it as a PNG image folder.
//
//   stoke-pack --format idx --input /usr/share/datasets/fashion-mnist --output fmnist-train
//   stoke-pack --format folder --input imgs --output imgs-packed --size 64x64 --center-crop
//   stoke-pack --format idx --input /usr/share/datasets/fashion-mnist --split test
//              --export-png fmnist-png --limit 10000
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>

#include "core/error.h"
#include "core/parallel.h"
#include "data/cifar.h"
#include "data/idx_dataset.h"
#include "data/image_folder.h"
#include "data/packed.h"

namespace {

using namespace stoke;
using namespace stoke::data;

// The numeric flags' ranges: enforced by parse_int and printed by usage() from these constants.
struct IntRange {
  int64_t lo, hi;
};
constexpr IntRange kLimit{0, int64_t{1} << 40};
constexpr IntRange kShardMb{1, int64_t{1} << 20};
constexpr IntRange kChannels{0, 4};
constexpr IntRange kThreads{0, 1024};
// A --size side: a record of 8192 x 8192 x 3 is 192 MiB already (100000x100000 allocated 9.7 GB
// for half a minute before failing).
constexpr IntRange kSide{1, 8192};

std::string range(IntRange r) {
  // Appended piece by piece: GCC 12 warns (-Wrestrict) on "[" + std::to_string(...).
  std::string s = "[";
  s += std::to_string(r.lo);
  s += ", ";
  s += std::to_string(r.hi);
  s += ']';
  return s;
}

std::string usage() {
  return R"(usage: stoke-pack --format idx|cifar10|cifar100|folder --input PATH
                  [--split train|test] (--output DIR | --export-png DIR) [options]

  --format F       idx: MNIST-style IDX files in the directory PATH (gzip or raw)
                   cifar10, cifar100: the binary batches in the directory PATH (or one .bin file)
                   folder: an image folder PATH/<class>/<image>.png|jpg|jpeg|bmp
  --input PATH     the dataset
  --split S        train (default) or test (idx, cifar10, cifar100)
  --output DIR     write packed shards and DIR/pack.index, then verify them
  --export-png DIR write the dataset as PNG files DIR/<class>/<index>.png instead
  --limit N        only the first N samples (both modes; IDX files are read only as far as N
                   samples need), N in )" +
         range(kLimit) + R"( (0: all)
  --size HxW       resize every image to H x W, H and W each in )" +
         range(kSide) + R"(. Without --size the records
                   take the first sample's size, and an image of another size is refused
  --center-crop    with --size: resize keeping the aspect ratio, then center-crop
  --shard-mb N     maximum shard size in MiB, N in )" +
         range(kShardMb) + R"( (64)
  --channels C     folder: decode to C channels, C in )" +
         range(kChannels) + R"( (0, the default: as stored; a pack
                   needs one count)
  --coarse-labels  cifar100: the 20 superclasses instead of the 100 classes
  --threads N      worker threads, N in )" +
         range(kThreads) + R"( (0: STOKE_NUM_THREADS or all cores)
)";
}

// The first `limit` samples of a dataset.
class Prefix : public Dataset {
 public:
  Prefix(std::shared_ptr<const Dataset> inner, int64_t limit)
      : inner_(std::move(inner)), n_(std::min(limit, inner_->size())) {}
  int64_t size() const override { return n_; }
  void get(int64_t index, Example& out) const override {
    STOKE_CHECK(index >= 0 && index < n_, "stoke-pack", "index ", index, " out of range [0, ", n_,
                ")");
    inner_->get(index, out);
  }
  int64_t num_classes() const override { return inner_->num_classes(); }
  std::vector<std::string> class_names() const override { return inner_->class_names(); }
  std::string describe(int64_t index) const override { return inner_->describe(index); }

 private:
  std::shared_ptr<const Dataset> inner_;
  int64_t n_;
};

// An integer flag in its range: the whole value must parse and fit (a number past int64 used to
// be reported as a wrapped negative, and --shard-mb N overflowed N << 20).
int64_t parse_int(const std::string& flag, const std::string& v, IntRange r) {
  int64_t x = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  STOKE_CHECK(ec == std::errc() && end == v.data() + v.size() && x >= r.lo && x <= r.hi,
              "stoke-pack", flag, ": expected an integer in ", range(r), ", got '", v, "'");
  return x;
}

// An output directory: missing (it is created) or a directory; anything else is named at once.
void check_output_dir(const std::string& flag, const std::string& dir) {
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(dir, ec);
  STOKE_CHECK(!std::filesystem::exists(st) || std::filesystem::is_directory(st), "stoke-pack", flag,
              " ", dir, ": exists and is not a directory");
}

int run(int argc, char** argv) {
  std::string format, input, split = "train", output, export_dir, size;
  int64_t limit = 0, shard_mb = 64, channels = 0, threads = 0;
  bool center_crop = false, coarse = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      STOKE_CHECK(i + 1 < argc, "stoke-pack", a, " needs a value\n", usage());
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      std::cout << usage();
      return 0;
    } else if (a == "--format") {
      format = value();
    } else if (a == "--input") {
      input = value();
    } else if (a == "--split") {
      split = value();
    } else if (a == "--output") {
      output = value();
    } else if (a == "--export-png") {
      export_dir = value();
    } else if (a == "--limit") {
      limit = parse_int(a, value(), kLimit);
    } else if (a == "--size") {
      size = value();
    } else if (a == "--center-crop") {
      center_crop = true;
    } else if (a == "--shard-mb") {
      shard_mb = parse_int(a, value(), kShardMb);
    } else if (a == "--channels") {
      channels = parse_int(a, value(), kChannels);
    } else if (a == "--coarse-labels") {
      coarse = true;
    } else if (a == "--threads") {
      threads = parse_int(a, value(), kThreads);
    } else {
      STOKE_FAIL("stoke-pack", "unknown flag '", a, "'\n", usage());
    }
  }
  STOKE_CHECK(!format.empty() && !input.empty(), "stoke-pack",
              "--format and --input are required\n", usage());
  STOKE_CHECK(output.empty() != export_dir.empty(), "stoke-pack",
              "expected exactly one of --output and --export-png\n", usage());
  if (!output.empty()) check_output_dir("--output", output);
  if (!export_dir.empty()) check_output_dir("--export-png", export_dir);
  STOKE_CHECK(split == "train" || split == "test", "stoke-pack",
              "--split: expected train or test, got '", split, "'");
  STOKE_CHECK(shard_mb > 0, "stoke-pack", "--shard-mb: expected > 0, got ", shard_mb);
  if (threads > 0) set_num_threads(static_cast<int>(threads));
  const bool train = split == "train";

  std::shared_ptr<const Dataset> ds;
  if (format == "idx") {
    // --limit N: the files are read (and a gzip inflated) only as far as N images need.
    ds = std::make_shared<IdxImageDataset>(input, IdxImageOptions{.train = train, .limit = limit});
  } else if (format == "cifar10" || format == "cifar100") {
    ds = std::make_shared<CifarDataset>(
        input, CifarOptions{
                   .variant = format == "cifar10" ? CifarVariant::cifar10 : CifarVariant::cifar100,
                   .train = train,
                   .coarse_labels = coarse});
  } else if (format == "folder") {
    ds = std::make_shared<ImageFolderDataset>(
        input, ImageFolderOptions{.channels = static_cast<int>(channels)});
  } else {
    STOKE_FAIL("stoke-pack", "--format: expected idx, cifar10, cifar100 or folder, got '", format,
               "'");
  }
  if (limit > 0) ds = std::make_shared<Prefix>(ds, limit);

  const auto start = std::chrono::steady_clock::now();
  if (!export_dir.empty()) {
    const int64_t n = write_image_folder(*ds, export_dir);
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("exported %lld images in %lld classes to %s in %.2f s (%.0f images/s)\n",
                static_cast<long long>(n), static_cast<long long>(ds->num_classes()),
                export_dir.c_str(), s, n / s);
    return 0;
  }

  PackOptions opts{.shard_bytes = shard_mb << 20,
                   .resize_hint =
                       "pass --size HxW to resize every image to one size (with "
                       "--center-crop to keep the aspect ratio)"};
  if (!size.empty()) {
    const size_t x = size.find('x');
    STOKE_CHECK(x != std::string::npos, "stoke-pack", "--size: expected HxW, got '", size, "'");
    opts.height = parse_int("--size (height)", size.substr(0, x), kSide);
    opts.width = parse_int("--size (width)", size.substr(x + 1), kSide);
    opts.fit = center_crop ? Fit::resize_crop : Fit::stretch;
  } else {
    STOKE_CHECK(!center_crop, "stoke-pack", "--center-crop needs --size HxW");
  }
  const PackResult r = pack_dataset(*ds, output, opts);
  const PackedDataset check(output);  // verifies every CRC and label
  std::printf(
      "packed %lld records (%lldx%lldx%lld, %lld classes) into %lld shard%s, %.1f MiB, in %.2f s "
      "(%.0f records/s); verified\n",
      static_cast<long long>(r.records), static_cast<long long>(check.height()),
      static_cast<long long>(check.width()), static_cast<long long>(check.channels()),
      static_cast<long long>(check.num_classes()), static_cast<long long>(r.shards),
      r.shards == 1 ? "" : "s", static_cast<double>(r.bytes) / (1 << 20), r.seconds,
      static_cast<double>(r.records) / r.seconds);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stoke-pack: %s\n", e.what());
    return 1;
  }
}
