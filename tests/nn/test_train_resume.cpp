// stoke-train end to end: SIGKILL mid-epoch and --resume give the same weights, bit for bit, as an
// uninterrupted run with the same seed (CPU, fixed threads).
#include <sys/wait.h>
#include <catch2/catch.hpp>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>

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
