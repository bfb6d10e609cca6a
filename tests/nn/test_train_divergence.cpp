// stoke-train stops at the first non-finite loss instead of training on NaN to the end: exit
// non-zero, a message naming the step, the last finite loss and the last good checkpoint, no
// non-finite model saved and every metrics line valid JSON.
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

}  // namespace

TEST_CASE("stoke-train: a diverging run stops at the first non-finite loss", "[nn][train]") {
  const fs::path dir = fs::temp_directory_path() / ("stoke-diverge-" + std::to_string(getpid()));
  fs::remove_all(dir);
  const Run r = run_train(
      "--model lenet5 --lr 1e6 --epochs 2 --limit-train 1024 --limit-test 256 "
      "--batch 64 --threads 1 --no-progress --log-every 1 --checkpoint-every 1 --checkpoint " +
      dir.string());
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK_THAT(
      r.output,
      (Catch::Contains("the training loss is nan") || Catch::Contains("the training loss is inf") ||
       Catch::Contains("the training loss is -inf")) &&
          Catch::Contains("the last finite loss was") &&
          Catch::Contains("last good checkpoint is " + (dir / "last.safetensors").string()) &&
          Catch::Contains("step "));
  CHECK_THAT(r.output, !Catch::Contains("done: best test acc"));
  // What was saved is finite, and every metrics line parses.
  for (const char* name : {"last.safetensors", "best.safetensors"}) {
    if (!fs::exists(dir / name)) continue;
    for (const auto& [key, t] : nn::load_safetensors((dir / name).string()).tensors) {
      if (!is_floating(t.dtype())) continue;
      for (double v : t.to_vector<double>()) REQUIRE(std::isfinite(v));
    }
  }
  std::ifstream metrics(dir / "metrics.jsonl");
  int lines = 0;
  for (std::string line; std::getline(metrics, line); ++lines)
    CHECK_NOTHROW(nlohmann::json::parse(line));
  CHECK(lines > 0);
  fs::remove_all(dir);
}
