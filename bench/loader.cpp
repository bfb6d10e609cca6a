// stoke-bench-loader: images/s of data::DataLoader on the first N (10,000) Fashion-MNIST training
// images stored as (a) a PNG image folder (read + decode every time), (b) the same files in the
// in-RAM encoded cache (decode only), (c) packed uint8 shards (memory-mapped, one memcpy), each
// with random crop 28 padding 4 + horizontal flip, batch 128, at 0, 1 and 2 workers; then torch's
// DataLoader doing (a) with the same transforms and worker counts (bench/loader_torch.py), and the
// ratios. Also the per-image costs that bound it: read + decode, decode, record copy, transforms.
//
//   build/bench/stoke-bench-loader              # the full comparison (~1 min)
//   build/bench/stoke-bench-loader --quick      # CI smoke run: 512 images, no torch
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "core/parallel.h"
#include "data/cache.h"
#include "data/idx.h"
#include "data/idx_dataset.h"
#include "data/image_folder.h"
#include "data/loader.h"
#include "data/normalize.h"
#include "data/packed.h"

namespace {

using namespace stoke;
using namespace stoke::data;
namespace fs = std::filesystem;

struct Args {
  std::string data = "/usr/share/datasets/fashion-mnist";
  std::string cache = "";  // default: <tmp>/stoke-bench-loader
  int64_t count = 10000;
  std::vector<int64_t> workers = {0, 1, 2};
  int64_t batch = 128;
  int epochs = 3;  // timed epochs per case (median)
  bool peer = true;
};

std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(std::stoll(item));
  return out;
}

// The inputs, built once into the cache directory and reused by later runs.
void prepare_inputs(const Args& a, const fs::path& png, const fs::path& packed) {
  if (fs::exists(png / ".complete") && fs::exists(packed / "pack.index")) return;
  const double t0 = bench::now_ms();
  IdxDataset idx = load_mnist(a.data, true);
  const int64_t n = std::min(a.count, idx.images.size(0));
  const IdxImageDataset ds(idx.images.narrow(0, 0, n), idx.labels.narrow(0, 0, n),
                           a.data + " (train, first " + std::to_string(n) + ")");
  if (!fs::exists(png / ".complete")) {
    fs::remove_all(png);
    write_image_folder(ds, png.string());
    std::ofstream(png / ".complete") << n << "\n";
  }
  if (!fs::exists(packed / "pack.index")) pack_dataset(ds, packed.string());
  std::printf("built the inputs in %s (%.1f s)\n", png.parent_path().c_str(),
              (bench::now_ms() - t0) / 1000);
}

// Mean microseconds per get() over every sample, on this thread, without transforms.
double get_us(const Dataset& ds) {
  Example ex;
  const double t0 = bench::now_ms();
  for (int64_t i = 0; i < ds.size(); ++i) ds.get(i, ex);
  return (bench::now_ms() - t0) * 1000 / static_cast<double>(ds.size());
}

std::shared_ptr<const Transform> crop_flip() {
  return std::make_shared<Compose>(std::vector<std::shared_ptr<const Transform>>{
      std::make_shared<RandomCrop>(RandomCropOptions{.height = 28, .width = 28, .padding = 4}),
      std::make_shared<HorizontalFlip>()});
}

// Mean microseconds of the transforms per image (packed samples, so no decode in the loop).
double transform_us(const Dataset& ds) {
  const auto t = crop_flip();
  Example ex, spare;
  double total = 0;
  for (int64_t i = 0; i < ds.size(); ++i) {
    ds.get(i, ex);
    SampleRng rng(1, 0, i);
    const double t0 = bench::now_ms();
    t->apply(ex, spare, rng);
    total += bench::now_ms() - t0;
  }
  return total * 1000 / static_cast<double>(ds.size());
}

// The augmentation of one batch both ways, per image, best of 5: (w) the workers' way, crop_flip()
// on each image then normalize() of the batch (the transforms would run on the loader's worker
// threads, the normalize on the consumer); (f) the consumer's way, the same crops drawn
// (draw_crops) and folded into the normalize pass (crop_flip_normalize, over the thread pool).
// The same batch comes out of both (tests/data/test_normalize.cpp).
struct AugmentCost {
  double workers_transform_us = 0, workers_normalize_us = 0, fused_us = 0;
};
AugmentCost augment_cost(const Dataset& ds, int64_t batch) {
  const int64_t n = std::min(batch, ds.size());
  Example ex, spare;
  ds.get(0, ex);
  const int64_t h = ex.height, w = ex.width, c = ex.channels;
  Tensor raw = empty({n, h, w, c}, {.dtype = DType::u8}), aug = empty_like(raw);
  Tensor idx = empty({n}, {.dtype = DType::i64});
  for (int64_t i = 0; i < n; ++i) {
    ds.get(i, ex);
    std::copy(ex.pixels.begin(), ex.pixels.end(), raw.data<uint8_t>() + i * h * w * c);
    idx.data<int64_t>()[i] = i;
  }
  const auto t = crop_flip();
  const NormalizeOptions norm{.mean = {0.5f}, .std = {0.25f}};
  AugmentCost best{1e30, 1e30, 1e30};
  for (int rep = 0; rep < 5; ++rep) {
    double t0 = bench::now_ms();
    for (int64_t i = 0; i < n; ++i) {
      const uint8_t* src = raw.data<uint8_t>() + i * h * w * c;
      ex.height = h;
      ex.width = w;
      ex.channels = c;
      ex.pixels.assign(src, src + h * w * c);
      SampleRng rng(1, 0, i);
      t->apply(ex, spare, rng);
      std::copy(ex.pixels.begin(), ex.pixels.end(), aug.data<uint8_t>() + i * h * w * c);
    }
    const double t1 = bench::now_ms();
    const Tensor a = normalize(aug, norm);
    const double t2 = bench::now_ms();
    const Tensor crops = draw_crops(idx, h, w, {.padding = 4}, 1, 0);
    const Tensor f = crop_flip_normalize(raw, crops, norm);
    const double t3 = bench::now_ms();
    best.workers_transform_us = std::min(best.workers_transform_us, (t1 - t0) * 1000 / n);
    best.workers_normalize_us = std::min(best.workers_normalize_us, (t2 - t1) * 1000 / n);
    best.fused_us = std::min(best.fused_us, (t3 - t2) * 1000 / n);
    if (a.to_vector<float>() != f.to_vector<float>())
      throw std::runtime_error("stoke-bench-loader: the two augmentation paths differ");
  }
  return best;
}

struct Measured {
  double images_per_s = 0;
  double wait_fraction = 0;  // consumer time inside next() / epoch time (1 with 0 workers)
};

// Median images/s over `epochs` full epochs (workers start inside the timed region, as a
// training loop sees them at each epoch).
Measured run_loader(std::shared_ptr<const Dataset> ds, const Args& a, int64_t workers) {
  DataLoader loader(ds, {.batch_size = a.batch,
                         .seed = 1,
                         .workers = workers,
                         .prefetch = 2,
                         .transform = crop_flip()});
  std::vector<double> rates, waits;
  int64_t checksum = 0;
  for (int e = 0; e < a.epochs; ++e) {
    loader.set_epoch(e);
    loader.reset_stats();
    const double t0 = bench::now_ms();
    int64_t n = 0;
    while (auto b = loader.next()) {
      n += b->labels.numel();
      checksum += b->images.data<uint8_t>()[0];  // touch the batch
    }
    const double s = (bench::now_ms() - t0) / 1000;
    rates.push_back(static_cast<double>(n) / s);
    waits.push_back(loader.stats().wait_seconds / s);
  }
  if (checksum < 0) std::puts("");  // keeps the touch observable
  return {bench::median(rates), bench::median(waits)};
}

// torch's images/s per worker count on the PNG folder (empty when the peer is unavailable).
std::vector<double> run_torch(const Args& a, const fs::path& png) {
  std::ostringstream cmd, workers;
  for (size_t i = 0; i < a.workers.size(); ++i) workers << (i ? "," : "") << a.workers[i];
  cmd << "/usr/bin/python3 " << STOKE_BENCH_SOURCE_DIR << "/loader_torch.py --root " << png
      << " --workers " << workers.str() << " --batch " << a.batch << " --epochs 1 2>&1";
  FILE* p = popen(cmd.str().c_str(), "r");
  if (!p) return {};
  std::string out;
  char line[4096];
  while (std::fgets(line, sizeof line, p)) out += line;
  if (pclose(p) != 0) {
    std::fprintf(stderr, "torch peer failed:\n%s\n", out.c_str());
    return {};
  }
  std::vector<double> rates;
  size_t pos = 0;
  while ((pos = out.find("\"images_per_s\":", pos)) != std::string::npos) {
    rates.push_back(bench::json_number(out.substr(pos), "images_per_s"));
    pos += 10;
  }
  return rates;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto next = [&] {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", arg.c_str());
        std::exit(2);
      }
      return std::string(argv[++i]);
    };
    if (arg == "--data") {
      a.data = next();
    } else if (arg == "--cache") {
      a.cache = next();
    } else if (arg == "--count") {
      a.count = std::stoll(next());
    } else if (arg == "--workers") {
      a.workers = parse_list(next());
    } else if (arg == "--batch") {
      a.batch = std::stoll(next());
    } else if (arg == "--epochs") {
      a.epochs = std::stoi(next());
    } else if (arg == "--no-peer") {
      a.peer = false;
    } else if (arg == "--quick") {
      a.count = 512;
      a.epochs = 1;
      a.workers = {0, 1};
      a.peer = false;
    } else {
      std::fprintf(stderr,
                   "usage: stoke-bench-loader [--data DIR] [--cache DIR] [--count N] "
                   "[--workers 0,1,2] [--batch N] [--epochs N] [--no-peer] [--quick]\n");
      return arg == "--help" ? 0 : 2;
    }
  }
  try {
    const fs::path root =
        a.cache.empty() ? fs::temp_directory_path() / "stoke-bench-loader" : fs::path(a.cache);
    const std::string tag = std::to_string(a.count);
    const fs::path png = root / ("png-" + tag), packed = root / ("packed-" + tag);
    prepare_inputs(a, png, packed);

    auto folder = std::make_shared<const ImageFolderDataset>(png.string());
    auto encoded = std::make_shared<const EncodedCache>(folder);
    auto pack = std::make_shared<const PackedDataset>(packed.string());
    const double read_decode = get_us(*folder), decode = get_us(*encoded), copy = get_us(*pack);
    const double transforms = transform_us(*pack);
    std::printf(
        "%lld images, batch %lld, random crop 28 pad 4 + flip | per image on one thread: "
        "read+decode %.1f us, decode from RAM %.1f us, packed record copy %.2f us, "
        "transforms %.2f us\n",
        static_cast<long long>(folder->size()), static_cast<long long>(a.batch), read_decode,
        decode, copy, transforms);
    const AugmentCost aug = augment_cost(*pack, a.batch);
    std::printf(
        "augment + normalize to f32 NCHW, per image (same batch out): workers' transforms %.3f us "
        "(1 thread) + consumer normalize %.3f us (%d threads) vs fused on the consumer %.3f us "
        "(%d threads): %.2fx less consumer+worker time\n",
        aug.workers_transform_us, aug.workers_normalize_us, num_threads(), aug.fused_us,
        num_threads(), (aug.workers_transform_us + aug.workers_normalize_us) / aug.fused_us);

    struct Row {
      std::string format;
      int64_t workers;
      Measured m;
    };
    std::vector<Row> rows;
    const std::vector<std::pair<std::string, std::shared_ptr<const Dataset>>> formats = {
        {"(a) png folder", folder}, {"(b) encoded cache", encoded}, {"(c) packed", pack}};
    for (const auto& [name, ds] : formats)
      for (int64_t w : a.workers) rows.push_back({name, w, run_loader(ds, a, w)});
    const std::vector<double> torch = a.peer ? run_torch(a, png) : std::vector<double>{};

    bench::Table table({"format", "workers", "stoke img/s", "consumer wait", "torch img/s (a)",
                        "stoke/torch", "(c)/(a)"});
    std::vector<std::string> json_rows;
    for (const Row& r : rows) {
      size_t wi = 0;
      while (wi < a.workers.size() && a.workers[wi] != r.workers) ++wi;
      const double t = wi < torch.size() ? torch[wi] : std::nan("");
      const double a_rate = rows[wi].m.images_per_s;  // (a) comes first, same worker order
      const bool is_a = r.format[1] == 'a';
      const double ratio_torch = t > 0 ? r.m.images_per_s / t : std::nan("");
      table.add({r.format, std::to_string(r.workers), bench::fmt(r.m.images_per_s, 0),
                 bench::fmt(100 * r.m.wait_fraction, 1) + "%", is_a ? bench::fmt(t, 0) : "",
                 bench::fmt(ratio_torch, 2),
                 r.format[1] == 'c' ? bench::fmt(r.m.images_per_s / a_rate, 2) : ""});
      json_rows.push_back(bench::JsonObject()
                              .add("format", r.format.substr(4))
                              .add("workers", static_cast<int>(r.workers))
                              .add("images_per_s", r.m.images_per_s)
                              .add("torch_png_images_per_s", t)
                              .add("ratio_vs_torch_png", ratio_torch)
                              .str());
    }
    table.print(std::cout);
    std::cout << bench::JsonObject()
                     .add("bench", "loader")
                     .add("images", static_cast<int>(folder->size()))
                     .add("batch", static_cast<int>(a.batch))
                     .add("read_decode_us", read_decode)
                     .add("decode_us", decode)
                     .add("packed_copy_us", copy)
                     .add("transforms_us", transforms)
                     .add("augment_workers_transform_us", aug.workers_transform_us)
                     .add("augment_workers_normalize_us", aug.workers_normalize_us)
                     .add("augment_fused_us", aug.fused_us)
                     .raw("rows", bench::json_array(json_rows))
                     .str()
              << std::endl;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
