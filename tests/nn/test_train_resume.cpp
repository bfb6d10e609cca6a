// stoke-train end to end: SIGKILL mid-epoch and --resume give the same weights, bit for bit, as an
// uninterrupted run with the same seed (CPU, fixed threads).
#include <sys/wait.h>
#include <catch2/catch.hpp>

#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
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

const char* kData = "/usr/share/datasets/fashion-mnist";

// Runs stoke-train with `args`; returns its wait status.
// `env` is prepended to the command (e.g. "STOKE_TRAIN_TEST_KILL_AT_STEP=13 ").
int run_train(const std::string& args, const std::string& env = "") {
  const std::string cmd = env + std::string(STOKE_TRAIN_EXE) + " " + args + " > /dev/null 2>&1";
  return std::system(cmd.c_str());
}

// Runs stoke-train with `args`; returns its stdout and stderr.
std::string run_train_output(const std::string& args, const std::string& env = "") {
  const std::string cmd = env + std::string(STOKE_TRAIN_EXE) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  char buf[4096];
  while (fgets(buf, sizeof buf, p) != nullptr) out += buf;
  pclose(p);
  return out;
}

// The losses and accuracies of the epoch lines ("epoch 2/2: train loss ... | test loss ... acc
// ...%"), without the timings.
std::vector<std::string> epoch_results(const std::string& output) {
  std::vector<std::string> out;
  size_t at = 0;
  while ((at = output.find("epoch ", at)) != std::string::npos) {
    const size_t eol = output.find('\n', at);
    const std::string line = output.substr(at, eol - at);
    at = eol;
    if (line.find(": train loss ") == std::string::npos) continue;
    const size_t test = line.find(" | test loss ");
    out.push_back(line.substr(0, line.find(" | ", test + 3)));
  }
  return out;
}

nn::NamedTensors model_tensors(const std::string& path) {
  nn::NamedTensors out;
  for (auto& [k, t] : nn::load_safetensors(path).tensors)
    if (k.rfind("optimizer.", 0) != 0) out.emplace_back(k, t);
  return out;
}

}  // namespace

TEST_CASE("stoke-train: SIGKILL mid-epoch then --resume equals an uninterrupted run",
          "[nn][train][resume]") {
  if (!fs::exists(fs::path(kData) / "train-images-idx3-ubyte.gz")) {
    WARN("Fashion-MNIST not installed at " << kData << ": skipped");
    return;
  }
  const fs::path dir = fs::temp_directory_path() / ("stoke_resume_" + std::to_string(getpid()));
  fs::remove_all(dir);
  // 1024 images / batch 64 = 16 steps per epoch; BN model so running stats are part of the state.
  const std::string common =
      "--model resnet8 --limit-train 1024 --limit-test 200 --batch 64 "
      "--epochs 2 --lr 0.05 --seed 7 --threads 2 --no-progress "
      "--schedule cosine --label-smoothing 0.1";
  REQUIRE(run_train(common + " --checkpoint " + (dir / "full").string()) == 0);

  const std::string ckpt = " --checkpoint " + (dir / "killed").string() + " --checkpoint-every 5";
  const int status = run_train(common + ckpt, "STOKE_TRAIN_TEST_KILL_AT_STEP=13 ");
  // Killed by SIGKILL: reported directly, or as exit status 128 + 9 by the shell in between.
  const bool killed = (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) ||
                      (WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGKILL);
  REQUIRE(killed);
  REQUIRE(run_train(common + ckpt + " --resume") == 0);

  const auto a = model_tensors((dir / "full" / "last.safetensors").string());
  const auto b = model_tensors((dir / "killed" / "last.safetensors").string());
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO(a[i].first);
    REQUIRE(a[i].first == b[i].first);
    REQUIRE(a[i].second.dtype() == b[i].second.dtype());
    const Tensor x = a[i].second.contiguous(), y = b[i].second.contiguous();
    // Bit for bit by construction: the same binary and --threads run the same steps on the
    // restored bytes (weights, optimizer and generator state, loader position); every CPU block
    // is equally aligned, so no kernel takes another path.
    REQUIRE(std::memcmp(x.data_ptr(), y.data_ptr(), x.numel() * x.element_size()) == 0);
  }
  fs::remove_all(dir);
}

TEST_CASE("stoke-train: bad flags and --device cuda without a GPU explain and stop",
          "[nn][train]") {
  CHECK(WEXITSTATUS(run_train("--bogus")) == 1);
  CHECK(WEXITSTATUS(run_train("--epochs x")) == 1);
  CHECK(WEXITSTATUS(run_train("--device cuda")) == 2);
  CHECK(WEXITSTATUS(run_train("--device gpu")) == 1);
  CHECK(WEXITSTATUS(run_train("--device cuda:x")) == 1);
  CHECK(WEXITSTATUS(run_train("--device cuda:")) == 1);
  // Asked to, it falls back to the CPU and trains.
  CHECK(WEXITSTATUS(
            run_train("--device cuda --allow-cpu-fallback --tf32 --epochs 1 --limit-train 256 "
                      "--limit-test 256 --no-progress")) == 0);
}

TEST_CASE(
    "stoke-train: a run killed mid-epoch and resumed reports the same epoch loss, bit for bit",
    "[nn][train][resume]") {
  if (!fs::exists(fs::path(kData) / "train-images-idx3-ubyte.gz")) {
    WARN("Fashion-MNIST not installed at " << kData << ": skipped");
    return;
  }
  const fs::path dir =
      fs::temp_directory_path() / ("stoke_resume_loss_" + std::to_string(getpid()));
  fs::remove_all(dir);
  // 256 images / batch 32 = 8 steps an epoch; killed at step 13 after the checkpoint of step 12:
  // the resumed run starts in epoch 2 with the checkpoint's sum of its first 4 batches' losses
  // (and epoch 1's best accuracy and loss), which used to come back with 6 decimals.
  const std::string common =
      "--model lenet5 --limit-train 256 --limit-test 96 --batch 32 --epochs 2 --lr 0.05 "
      "--seed 5 --threads 2 --no-progress --checkpoint-every 3 --checkpoint ";
  const std::string full = run_train_output(common + (dir / "full").string());
  const std::string killed = (dir / "killed").string();
  run_train_output(common + killed, "STOKE_TRAIN_TEST_KILL_AT_STEP=13 ");
  const std::string resumed = run_train_output(common + killed + " --resume");
  INFO(full << "\n---\n" << resumed);
  REQUIRE(resumed.find("resumed from") != std::string::npos);

  // The epoch lines as printed: the resumed run prints epoch 2 only.
  const auto full_lines = epoch_results(full), resumed_lines = epoch_results(resumed);
  REQUIRE(full_lines.size() == 2);
  REQUIRE(resumed_lines.size() == 1);
  CHECK(resumed_lines[0] == full_lines[1]);

  // The metrics' epoch records: every value but the timings and the memory, as doubles.
  const auto epoch_records = [](const fs::path& p) {
    std::vector<nlohmann::json> out;
    std::ifstream in(p);
    for (std::string line; std::getline(in, line);) {
      auto r = nlohmann::json::parse(line);
      if (r["type"] == "epoch") out.push_back(r);
    }
    return out;
  };
  const auto a = epoch_records(dir / "full" / "metrics.jsonl");
  const auto b = epoch_records(dir / "killed" / "metrics.jsonl");
  REQUIRE(a.size() == 2);
  REQUIRE(b.size() == 2);
  for (size_t i = 0; i < 2; ++i) {
    for (const char* key : {"epoch", "step", "train_loss", "train_acc", "test_loss", "test_acc"}) {
      INFO("epoch " << i + 1 << " " << key);
      CHECK(a[i][key] == b[i][key]);
    }
  }
  CHECK(a[1]["train_loss"].get<double>() == b[1]["train_loss"].get<double>());

  // The final checkpoints' positions (best accuracy and loss included) are the same text.
  CHECK(nn::load_safetensors((dir / "full" / "last.safetensors").string()).metadata ==
        nn::load_safetensors((dir / "killed" / "last.safetensors").string()).metadata);
  fs::remove_all(dir);
}

TEST_CASE("stoke-train: the last good checkpoint named at a divergence resumes",
          "[nn][train][resume]") {
  // A checkpoint after every step of a run whose learning rate warms up to 30: its losses go 2.3,
  // 2.3, 2.3, 2.8, 7.4, 62, 1.7e3, 2.3e7, 4e29, nan, every weight finite until the end. A
  // checkpoint is good when the loss its weights give is finite and no worse than both a uniform
  // guess and ten times the run's lowest: the ones of steps 5 to 9 are not written, so the one
  // named (step 4) can be resumed from with a sane --lr. stoke-train used to name the checkpoint of
  // step 9, whose weights give nan at once.
  const fs::path dir =
      fs::temp_directory_path() / ("stoke_resume_good_" + std::to_string(getpid()));
  fs::remove_all(dir);
  const std::string common =
      "--model lenet5 --limit-train 512 --limit-test 64 --batch 32 --epochs 1 --seed 2 "
      "--threads 2 --no-progress --log-every 1 --checkpoint-every 1 --checkpoint " +
      dir.string();
  const std::string diverged = run_train_output(common + " --lr 30 --warmup 10");
  INFO(diverged);
  const size_t stop = diverged.find("the training loss is nan");
  REQUIRE(stop != std::string::npos);
  const size_t bad_at = diverged.find("(step ", stop);
  REQUIRE(bad_at != std::string::npos);
  const long long bad_step = std::atoll(diverged.c_str() + bad_at + 6);
  // The file named holds finite weights, of a step before the one whose weights gave the nan,
  // and the message says which.
  const std::string last_path = (dir / "last.safetensors").string();
  CHECK_THAT(diverged.substr(stop), Catch::Contains("the last good checkpoint is " + last_path));
  const nn::SafetensorsFile last = nn::load_safetensors(last_path);
  const long long good_step = std::atoll(last.metadata.at("global_step").c_str());
  CHECK_THAT(diverged.substr(stop),
             Catch::Contains(last_path + " (step " + std::to_string(good_step) + ")"));
  CHECK(good_step < bad_step - 1);
  for (const auto& [k, t] : last.tensors) {
    if (!is_floating(t.dtype())) continue;
    for (const double v : t.to_vector<double>()) REQUIRE(std::isfinite(v));
  }
  // Resumed with a learning rate that does not diverge, it trains to the end of the epoch.
  const std::string resumed = run_train_output(common + " --lr 0.01 --resume");
  INFO(resumed);
  CHECK_THAT(resumed, Catch::Contains("resumed from") && Catch::Contains("done: best test acc"));
  CHECK_THAT(resumed, !Catch::Contains("the training loss is"));
  fs::remove_all(dir);
}

TEST_CASE("stoke-train: a checkpoint of an older stoke-train (position in batches) still resumes",
          "[nn][train][resume]") {
  const fs::path dir = fs::temp_directory_path() / ("stoke_resume_v1_" + std::to_string(getpid()));
  fs::remove_all(dir);
  const std::string common =
      "--model lenet5 --limit-train 256 --limit-test 64 --batch 32 --threads 2 --no-progress "
      "--checkpoint " +
      dir.string();
  REQUIRE(run_train(common + " --epochs 1") == 0);
  const std::string last = (dir / "last.safetensors").string();
  nn::SafetensorsFile f = nn::load_safetensors(last);
  // As stoke-train/1 wrote it: the batch index of its own run, no "sample".
  f.metadata["format"] = "stoke-train/1";
  f.metadata.erase("sample");
  f.metadata["batch"] = "3";
  nn::save_safetensors(last, f.tensors, f.metadata);
  const std::string resumed = run_train_output(common + " --epochs 2 --resume");
  INFO(resumed);
  CHECK_THAT(resumed, Catch::Contains("is of an older stoke-train (stoke-train/1)") &&
                          Catch::Contains("batch 3 is taken as sample 96") &&
                          Catch::Contains("at epoch 2, sample 96 of 256") &&
                          Catch::Contains("done: best test acc"));
  // An unknown format is named.
  f.metadata["format"] = "stoke-train/9";
  nn::save_safetensors(last, f.tensors, f.metadata);
  CHECK_THAT(run_train_output(common + " --epochs 2 --resume"),
             Catch::Contains("'format' is 'stoke-train/9', expected stoke-train/2"));
  fs::remove_all(dir);
}
