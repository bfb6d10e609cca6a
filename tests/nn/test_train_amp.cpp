// stoke-train --amp fp16|bf16 (in its own file: test_train_cli.cpp is near the size limit): short
// runs train (finite, decreasing loss, test accuracy within a few points of the same run in f32),
// fp16 logs the loss scale and skipped steps and keeps the scaler's state in last.safetensors,
// which --resume restores; the checkpoints stay f32; bad values are named. And --augment, folded
// into the normalize pass where the batch is consumed, equals the loader workers' augmentation.
#include <sys/wait.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "nn/checkpoint/safetensors.h"
#include "stoke/stoke.h"

using namespace stoke;
namespace fs = std::filesystem;

namespace {

struct Run {
  int exit_code;
  std::string output;  // stdout and stderr
};

Run run_train(const std::string& args) {
  const std::string cmd = std::string(STOKE_TRAIN_EXE) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  Run r{0, {}};
  std::array<char, 4096> buf{};
  while (fgets(buf.data(), buf.size(), p) != nullptr) r.output += buf.data();
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  return r;
}

std::vector<nlohmann::json> records(const fs::path& path, const std::string& type) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    nlohmann::json j;
    REQUIRE_NOTHROW(j = nlohmann::json::parse(line));
    if (j["type"] == type) out.push_back(j);
  }
  return out;
}

struct AmpRun {
  std::vector<double> losses;  // per step
  double test_acc = 0;         // the last epoch's
  std::vector<nlohmann::json> steps;
  std::string output;
};

const std::string kShort =
    " --model lenet5 --epochs 2 --limit-train 8192 --limit-test 2048 --batch 64 --lr 0.05"
    " --seed 1 --threads 2 --no-progress --log-every 1";

AmpRun train(const std::string& amp, const fs::path& dir) {
  fs::remove_all(dir);
  const Run r = run_train(kShort + amp + " --checkpoint " + dir.string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  AmpRun out;
  out.output = r.output;
  out.steps = records(dir / "metrics.jsonl", "step");
  for (const auto& s : out.steps) out.losses.push_back(s["loss"].get<double>());
  const auto epochs = records(dir / "metrics.jsonl", "epoch");
  REQUIRE(epochs.size() == 2);
  out.test_acc = epochs.back()["test_acc"].get<double>();
  return out;
}

double mean(const std::vector<double>& v, size_t begin, size_t end) {
  double s = 0;
  for (size_t i = begin; i < end; ++i) s += v[i];
  return s / static_cast<double>(end - begin);
}

// The sample variance of v[begin, end).
double variance(const std::vector<double>& v, size_t begin, size_t end) {
  const double m = mean(v, begin, end);
  double s = 0;
  for (size_t i = begin; i < end; ++i) s += (v[i] - m) * (v[i] - m);
  return s / static_cast<double>(end - begin - 1);
}

constexpr double kTestImages = 2048;  // --limit-test in kShort

}  // namespace

TEST_CASE("stoke-train --amp: bf16 and fp16 train as f32 does", "[nn][train][amp]") {
  const fs::path base = fs::temp_directory_path() / ("stoke-amp-" + std::to_string(getpid()));
  const AmpRun f32 = train("", base / "f32");
  for (const char* amp : {"bf16", "fp16"}) {
    INFO("--amp " << amp);
    const fs::path dir = base / amp;
    const AmpRun a = train(std::string(" --amp ") + amp, dir);
    REQUIRE(a.losses.size() == f32.losses.size());
    for (double l : a.losses) CHECK(std::isfinite(l));
    // Decreasing: the last eight steps' mean well below the first eight's (a check that it
    // trains at all, not a tolerance: f32 falls from 2.30 to about 0.25 of that here).
    const size_t n = a.losses.size();
    CHECK(mean(a.losses, n - 8, n) < 0.7 * mean(a.losses, 0, 8));
    // After 256 steps, runs that differ only in rounding are two draws of equally good models,
    // their trajectories long apart: what separates them is the noise of measuring each. The last
    // eight steps' losses are eight batch means, each run's spread over them s (batch-to-batch
    // variation included): the two means of eight within 4 sqrt((s_a^2 + s_f32^2) / 8), four
    // standard deviations of their difference (taken as independent, which the shared batches
    // only make smaller).
    const double loss_bound =
        4 * std::sqrt((variance(a.losses, n - 8, n) + variance(f32.losses, n - 8, n)) / 8);
    INFO("last eight steps' mean loss " << mean(a.losses, n - 8, n) << " against f32's "
                                        << mean(f32.losses, n - 8, n) << ", bound " << loss_bound);
    CHECK(std::abs(mean(a.losses, n - 8, n) - mean(f32.losses, n - 8, n)) < loss_bound);
    // Test accuracy on the same 2,048 images: for two classifiers of equal true accuracy the
    // difference of their measured accuracies has variance P(they disagree) / n, at most
    // (err_a + err_f32) / n; four standard deviations of that, in points (~5.6 at 80% each; it
    // replaces a bound of 6 points fitted to three seeds). err_a + err_f32 overstates how often
    // two such models disagree (most images are right, or wrong, for both), which leaves room for
    // the spread of their true accuracies that training itself adds.
    const double err_sum = (100 - a.test_acc) / 100 + (100 - f32.test_acc) / 100;
    const double acc_bound = 4 * 100 * std::sqrt(err_sum / kTestImages);
    INFO("test accuracy " << a.test_acc << "% against f32's " << f32.test_acc << "%, bound "
                          << acc_bound << " points");
    CHECK(std::abs(a.test_acc - f32.test_acc) < acc_bound);
    // The checkpoints stay f32 (the weights never leave f32; autocast casts copies).
    for (const char* name : {"last.safetensors", "best.safetensors"})
      for (const auto& [key, t] : nn::load_safetensors((dir / name).string()).tensors)
        if (key.rfind("amp_scaler.", 0) != 0 && is_floating(t.dtype())) {
          INFO(name << " " << key);
          CHECK(t.dtype() == DType::f32);
        }
    const auto last = nn::load_safetensors((dir / "last.safetensors").string()).tensors;
    bool has_scale = false;
    double saved_scale = 0;
    for (const auto& [key, t] : last)
      if (key == "amp_scaler.scale") {
        has_scale = true;
        saved_scale = t.item();
      }
    if (std::string(amp) == "bf16") {
      // No scaler: bf16 has f32's range. Nothing scaler-related is logged or saved.
      CHECK_FALSE(has_scale);
      CHECK_FALSE(a.steps.front().contains("loss_scale"));
    } else {
      REQUIRE(has_scale);
      CHECK_THAT(a.output, Catch::Contains("amp: loss scale "));
      const auto& s = a.steps.back();
      REQUIRE(s.contains("loss_scale"));
      REQUIRE(s.contains("skipped_steps"));
      CHECK(s["loss_scale"].get<double>() == saved_scale);
      // Skipped steps only back the scale off from 2^16 (never grown: interval 2000).
      const auto skipped = s["skipped_steps"].get<int64_t>();
      CHECK(saved_scale == std::ldexp(65536.0, -static_cast<int>(skipped)));
    }
  }
  fs::remove_all(base);
}

TEST_CASE("stoke-train --amp fp16: --resume restores the loss scaler", "[nn][train][amp]") {
  const fs::path dir = fs::temp_directory_path() / ("stoke-amp-resume-" + std::to_string(getpid()));
  fs::remove_all(dir);
  const std::string args =
      " --model lenet5 --limit-train 512 --limit-test 256 --batch 64"
      " --seed 1 --threads 2 --no-progress --log-every 1 --amp fp16"
      " --checkpoint " +
      dir.string();
  REQUIRE(run_train(args + " --epochs 1").exit_code == 0);
  // Plant a scale the run could not have reached by itself, and a growth tracker one step short
  // of the interval: the resumed run must start from both.
  const std::string last = (dir / "last.safetensors").string();
  nn::SafetensorsFile file = nn::load_safetensors(last);
  for (auto& [key, t] : file.tensors) {
    if (key == "amp_scaler.scale") t = full({}, 1024.0, {.dtype = DType::f64});
    if (key == "amp_scaler._growth_tracker") t = full({}, 1999.0, {.dtype = DType::i64});
  }
  nn::save_safetensors(last, file.tensors, file.metadata);
  const Run r = run_train(args + " --epochs 2 --resume");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("resumed from"));
  const auto steps = records(dir / "metrics.jsonl", "step");
  REQUIRE(steps.size() == 16);  // 8 steps per epoch
  const auto& first_resumed = steps[8];
  // One finite step after the planted tracker completes the interval: the scale doubles (a
  // skipped step would halve it instead, and say so).
  const double scale = first_resumed["loss_scale"].get<double>();
  const int64_t skipped =
      first_resumed["skipped_steps"].get<int64_t>() - steps[7]["skipped_steps"].get<int64_t>();
  CHECK(scale == (skipped == 0 ? 2048.0 : 512.0));
  fs::remove_all(dir);
}

TEST_CASE("stoke-train --amp: bad values are named", "[nn][train][amp]") {
  for (const char* bad : {"fp32", "f16", "FP16", ""}) {
    INFO("--amp '" << bad << "'");
    const Run r = run_train(std::string("--amp '") + bad + "' --epochs 1 --limit-train 64");
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Catch::Contains("--amp expects fp16 or bf16") &&
                             Catch::Contains("got '" + std::string(bad) + "'"));
  }
  const Run missing = run_train("--amp");
  CHECK(missing.exit_code == 1);
  CHECK_THAT(missing.output, Catch::Contains("flag --amp needs a value"));
}

TEST_CASE("stoke-train --augment: folded into normalize or on the workers, the same run",
          "[nn][train][augment]") {
  const fs::path base = fs::temp_directory_path() / ("stoke-augment-" + std::to_string(getpid()));
  const std::string args =
      " --model lenet5 --epochs 2 --limit-train 512 --limit-test 256 --batch 64 --seed 3"
      " --threads 2 --no-progress --log-every 1";
  std::vector<std::vector<double>> losses;
  for (const char* how : {"", " --augment", " --augment --augment-on workers"}) {
    INFO("flags:" << how);
    // Built by appending: GCC 12 warns falsely on "m" + std::string.
    std::string name = std::to_string(losses.size());
    name += ".jsonl";
    const fs::path m = base / name;
    fs::create_directories(base);
    const Run r = run_train(args + how + " --metrics " + m.string());
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    losses.emplace_back();
    for (const auto& s : records(m, "step")) losses.back().push_back(s["loss"].get<double>());
    REQUIRE(losses.back().size() == 16);
  }
  // The crops drawn at the consumer are the workers' (same seed, epoch and sample): equal losses
  // to the last bit, over two epochs (different crops each epoch); and augmentation did happen.
  // Bit for bit by construction: both paths select the same bytes and normalize each with the
  // same fl(fl(x * scale) + bias) (tests/data/test_normalize.cpp says how), so the same model
  // steps see the same batches.
  CHECK(losses[1] == losses[2]);
  CHECK(losses[1] != losses[0]);
  CHECK_THAT(run_train("--augment-on gpu --epochs 1").output,
             Catch::Contains("unknown augment-on 'gpu' (known: device, workers)"));
  fs::remove_all(base);
}
