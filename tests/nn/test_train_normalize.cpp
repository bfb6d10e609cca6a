// stoke-train's normalization: each channel's mean and std of the training split (against an f64
// loop over the same images), or --mean/--std; kept in both checkpoints, kept on --resume (flags
// that contradict the checkpoint refused), and read by stoke-logits.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "../support/process.h"
#include "../support/temp_dir.h"
#include "data/channel_stats.h"
#include "data/idx.h"
#include "data/image_decode.h"
#include "nn/checkpoint/safetensors.h"

using namespace stoke;
namespace fs = std::filesystem;

namespace {

const std::string kData = "/usr/share/datasets/fashion-mnist";
const std::string kQuick =
    " --model lenet5 --epochs 1 --limit-train 128 --limit-test 64 --no-progress";

test::ProcessResult train(const std::string& args) {
  return test::run_process("exec " + std::string(STOKE_TRAIN_EXE) + " " + args, 300);
}

test::ProcessResult logits(const std::string& weights) {
  return test::run_process(
      "exec " + std::string(STOKE_LOGITS_EXE) + " --count 4 --weights " + weights, 120);
}

// The f64 mean and std of x / 255 over the first n training images.
std::pair<double, double> reference_stats(int64_t n) {
  const data::IdxDataset d = data::load_mnist(kData, true, n);
  const uint8_t* p = d.images.data<uint8_t>();
  const int64_t count = d.images.numel();
  double mean = 0, sq = 0;
  for (int64_t i = 0; i < count; ++i) mean += p[i] / 255.0;
  mean /= static_cast<double>(count);
  for (int64_t i = 0; i < count; ++i) sq += (p[i] / 255.0 - mean) * (p[i] / 255.0 - mean);
  return {mean, std::sqrt(sq / static_cast<double>(count))};
}

// dir/<index>.png: a 28x28 image of `channels` channels (HWC bytes), dir created as needed.
void write_png(const fs::path& dir, int index, const std::vector<uint8_t>& px, int channels) {
  fs::create_directories(dir);
  const std::vector<uint8_t> png = data::encode_png(px.data(), 28, 28, channels);
  std::ofstream(dir / (std::to_string(index) + ".png"), std::ios::binary)
      .write(reinterpret_cast<const char*>(png.data()), static_cast<std::streamsize>(png.size()));
}

}  // namespace

TEST_CASE(
    "stoke-train: batches are normalized with the training split's statistics, kept in the "
    "checkpoints and on --resume, and stoke-logits reads them",
    "[nn][train]") {
  if (!fs::exists(kData)) {
    WARN("skipped: " << kData << " is not installed (Debian's dataset-fashion-mnist)");
    return;
  }
  const test::TempDir tmp("stoke-normalize");
  const std::string dir = (tmp.path / "ckpt").string();
  const auto [mean, std] = reference_stats(128);
  const test::ProcessResult r = train(kQuick + " --checkpoint " + dir);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  char line[160];
  std::snprintf(line, sizeof line,
                "normalize: mean (%.4f), std (%.4f) (of x / 255, per channel) "
                "from 128 training images",
                mean, std);
  CHECK_THAT(r.output, Catch::Contains(line));

  // Both files carry the figures, exactly as float (half an f32 ulp from the f64 loop's).
  for (const char* name : {"best.safetensors", "last.safetensors"}) {
    INFO(name);
    const nn::SafetensorsFile f = nn::load_safetensors(dir + "/" + name);
    const auto m = data::parse_channels(f.metadata.at("normalize_mean"), false, "t", "mean");
    const auto s = data::parse_channels(f.metadata.at("normalize_std"), true, "t", "std");
    REQUIRE(m.size() == 1);
    REQUIRE(s.size() == 1);
    CHECK(std::abs(m[0] - mean) <= 0x1p-24 * mean + 1e-12);
    CHECK(std::abs(s[0] - std) <= 0x1p-24 * std + 1e-12);
  }

  // stoke-logits normalizes with the file's figures: other figures in the metadata give other
  // logits, and a file without them gets Fashion-MNIST's, the same as those figures written out.
  const std::string best = dir + "/best.safetensors";
  const nn::SafetensorsFile file = nn::load_safetensors(best);
  const auto with = [&](const std::string& m, const std::string& s) {
    auto meta = file.metadata;
    meta.erase("normalize_mean");
    meta.erase("normalize_std");
    if (!m.empty()) meta["normalize_mean"] = m;
    if (!s.empty()) meta["normalize_std"] = s;
    const std::string path = (tmp.path / "edited.safetensors").string();
    nn::save_safetensors(path, file.tensors, meta);
    return logits(path);
  };
  const test::ProcessResult own = logits(best);
  REQUIRE(own.exit_code == 0);
  const test::ProcessResult other = with("0.9", "0.1");
  REQUIRE(other.exit_code == 0);
  CHECK(nlohmann::json::parse(own.output)["logits"] !=
        nlohmann::json::parse(other.output)["logits"]);
  const test::ProcessResult none = with("", "");
  const test::ProcessResult fmnist = with("0.286", "0.353");
  REQUIRE(none.exit_code == 0);
  CHECK(none.output == fmnist.output);
  const test::ProcessResult rgb = with("0.4914,0.4822,0.4465", "0.247,0.2435,0.2616");
  CHECK(rgb.exit_code == 1);
  CHECK_THAT(rgb.output, Catch::Contains("trained on 3-channel images"));
  const test::ProcessResult half = with("0.5", "");
  CHECK(half.exit_code == 1);
  CHECK_THAT(half.output, Catch::Contains("only one of normalize_mean and normalize_std"));
  const test::ProcessResult zero = with("0.5", "0");
  CHECK(zero.exit_code == 1);
  CHECK_THAT(zero.output,
             Catch::Contains("metadata 'normalize_std' is '0', expected 1 to 16 positive"));

  // --resume keeps the checkpoint's figures; --mean/--std that contradict them are refused.
  const std::string again = kQuick + " --epochs 2 --checkpoint " + dir + " --resume";
  const test::ProcessResult refused = train(again + " --mean 0.5 --std 0.25");
  CHECK(refused.exit_code == 1);
  CHECK_THAT(refused.output, Catch::Contains("--mean (0.5000) --std (0.2500) differ from the "
                                             "normalization"));
  const test::ProcessResult resumed = train(again);
  INFO(resumed.output);
  CHECK(resumed.exit_code == 0);
  CHECK_THAT(resumed.output, Catch::Contains(line));
}

TEST_CASE("stoke-train: --mean and --std are used as given, and checked against the images",
          "[nn][train]") {
  if (!fs::exists(kData)) {
    WARN("skipped: " << kData << " is not installed (Debian's dataset-fashion-mnist)");
    return;
  }
  const test::TempDir tmp("stoke-normalize-flags");
  const std::string dir = (tmp.path / "ckpt").string();
  const test::ProcessResult r = train(kQuick + " --mean 0.5 --std 0.25 --checkpoint " + dir);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output,
             Catch::Contains("normalize: mean (0.5000), std (0.2500) (of x / 255, per channel) "
                             "from --mean/--std"));
  const nn::SafetensorsFile f = nn::load_safetensors(dir + "/best.safetensors");
  CHECK(f.metadata.at("normalize_mean") == "0.5");
  CHECK(f.metadata.at("normalize_std") == "0.25");

  struct Bad {
    std::string args, message;
  };
  for (const Bad& b : {
           Bad{"--mean 0.5", "--mean and --std go together"},
           Bad{"--std 0.5", "--mean and --std go together"},
           Bad{"--mean 0.5 --std 0", "flag --std is '0', expected 1 to 16 positive numbers"},
           Bad{"--mean 0.5,x --std 1", "flag --mean is '0.5,x', expected 1 to 16 finite numbers"},
           Bad{"--mean 0.1,0.2 --std 0.3,0.4,0.5", "--mean has 2 values and --std 3"},
           Bad{"--mean 0.1,0.2 --std 0.3",
               "--mean has 2 values, but the images of " + kData + " have 1 channels"},
       }) {
    const test::ProcessResult bad = train(kQuick + " " + b.args);
    INFO(b.args << ": " << bad.output);
    CHECK(bad.exit_code == 1);
    CHECK_THAT(bad.output, Catch::Contains(b.message));
  }
}

TEST_CASE("stoke-train: an RGB image folder and its pack are normalized per channel",
          "[nn][train]") {
  // 12 training and 4 test images, 28x28x3, two classes; each channel in its own range, so that
  // one figure for every channel (what stoke-train did before) is far from each channel's.
  const test::TempDir tmp("stoke-normalize-rgb");
  std::mt19937 gen(5);
  double sum[3] = {}, sq[3] = {};
  std::vector<std::vector<uint8_t>> train_images;
  for (const char* split : {"train", "test"}) {
    for (int i = 0; i < (std::string(split) == "train" ? 12 : 4); ++i) {
      std::vector<uint8_t> px(28 * 28 * 3);
      for (size_t k = 0; k < px.size(); ++k)
        px[k] = static_cast<uint8_t>(60 * (k % 3) + gen() % 120);
      write_png(tmp.path / "folder" / split / (i % 2 ? "b" : "a"), i, px, 3);
      if (std::string(split) == "train") train_images.push_back(px);
    }
  }
  // The f64 reference: two passes over the training pixels.
  const double n = 12.0 * 28 * 28;
  for (const auto& px : train_images)
    for (size_t k = 0; k < px.size(); ++k) sum[k % 3] += px[k] / 255.0;
  for (const auto& px : train_images)
    for (size_t k = 0; k < px.size(); ++k) {
      const double d = px[k] / 255.0 - sum[k % 3] / n;
      sq[k % 3] += d * d;
    }
  char line[200];
  std::snprintf(line, sizeof line,
                "normalize: mean (%.4f, %.4f, %.4f), std (%.4f, %.4f, %.4f) (of x / 255, per "
                "channel) from 12 training images",
                sum[0] / n, sum[1] / n, sum[2] / n, std::sqrt(sq[0] / n), std::sqrt(sq[1] / n),
                std::sqrt(sq[2] / n));
  const std::string common = " --model lenet5 --epochs 1 --batch 4 --no-progress";
  const test::ProcessResult folder =
      train("--data " + (tmp.path / "folder").string() + " --data-format folder" + common);
  INFO(folder.output);
  REQUIRE(folder.exit_code == 0);
  CHECK_THAT(folder.output, Catch::Contains(line));
  // The same images packed by stoke-pack: the same figures.
  for (const char* split : {"train", "test"}) {
    const test::ProcessResult pack =
        test::run_process("exec " + std::string(STOKE_PACK_EXE) + " --format folder --input " +
                              (tmp.path / "folder" / split).string() + " --output " +
                              (tmp.path / "packed" / split).string(),
                          120);
    INFO(pack.output);
    REQUIRE(pack.exit_code == 0);
  }
  const test::ProcessResult packed =
      train("--data " + (tmp.path / "packed").string() + " --data-format packed" + common);
  INFO(packed.output);
  REQUIRE(packed.exit_code == 0);
  CHECK_THAT(packed.output, Catch::Contains(line));
}

TEST_CASE("stoke-train: a constant channel is scaled by 1, said on stdout", "[nn][train]") {
  const test::TempDir tmp("stoke-normalize-constant");
  for (const char* split : {"train", "test"})
    for (int i = 0; i < 4; ++i) {
      const std::vector<uint8_t> px(28 * 28, 51);  // 0.2 after / 255
      write_png(tmp.path / split / (i % 2 ? "b" : "a"), i, px, 1);
    }
  const test::ProcessResult r = train("--data " + tmp.path.string() +
                                      " --data-format folder --model lenet5 --epochs 1 --batch 2 "
                                      "--no-progress");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output,
             Catch::Contains("note: channel 0 of the training images has one value "
                             "(0.2000) in every pixel: its std is 0, so it is scaled by 1"));
  CHECK_THAT(r.output, Catch::Contains("normalize: mean (0.2000), std (1.0000)"));
  CHECK_THAT(r.output, !Catch::Contains("nan"));
}
