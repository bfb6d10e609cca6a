// stoke-train as a careless user drives it: a diverging run stops at the first non-finite loss
// (exit non-zero, a message naming the step, the last finite loss and the last good checkpoint, no
// non-finite model saved, every metrics line valid JSON), and flags are checked before anything
// runs (switch values, ranges, non-finite numbers), each error naming the flag.
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

Run run(const char* exe, const std::string& args) {
  const std::string cmd = std::string(exe) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  Run r{0, {}};
  std::array<char, 4096> buf{};
  while (fgets(buf.data(), buf.size(), p) != nullptr) r.output += buf.data();
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  return r;
}

Run run_train(const std::string& args) {
  return run(STOKE_TRAIN_EXE, args);
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

TEST_CASE("stoke-train: flag values are checked and named", "[nn][train]") {
  struct Bad {
    const char* args;
    const char* says;
  };
  for (const Bad& b : {
           Bad{"--nesterov=maybe", "flag --nesterov is a switch"},
           Bad{"--limit-train -5", "flag --limit-train expects an integer in [0, "},
           Bad{"--batch 9223372036854775807", "flag --batch expects an integer in [1, "},
           Bad{"--batch 99999999999999999999", "flag --batch expects an integer"},
           Bad{"--accum 9223372036854775807", "flag --accum expects an integer"},
           Bad{"--warmup -9223372036854775807", "flag --warmup expects an integer in [0, "},
           Bad{"--step-size 9223372036854775807", "flag --step-size expects an integer"},
           Bad{"--milestones 1,x", "flag --milestones expects an integer"},
           Bad{"--threads 100000", "flag --threads expects an integer in [0, 1024]"},
           Bad{"--workers 100000", "flag --workers expects an integer in [0, 256]"},
           Bad{"--lr inf", "flag --lr expects a finite number, got 'inf'"},
           Bad{"--gamma nan", "flag --gamma expects a finite number, got 'nan'"},
           Bad{"--lr 0", "--lr must be positive"},
           Bad{"--epochs abc", "flag --epochs expects an integer"},
       }) {
    INFO(b.args);
    const Run r = run_train(b.args);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Catch::Contains(b.says));
  }
  // --nesterov=false turns Nesterov off (it used to turn it on); the run line says which.
  const std::string quick = " --epochs 1 --limit-train 128 --limit-test 128 --no-progress";
  const Run off = run_train("--nesterov=false" + quick);
  CHECK(off.exit_code == 0);
  CHECK_THAT(off.output, Catch::Contains("| sgd lr"));
  const Run on = run_train("--nesterov" + quick);
  CHECK(on.exit_code == 0);
  CHECK_THAT(on.output, Catch::Contains("| sgd (nesterov) lr"));
  CHECK_THAT(run_train("--nesterov=true" + quick).output, Catch::Contains("sgd (nesterov)"));
}

TEST_CASE("stoke-logits: bad flags explain instead of aborting, and logits of a trained model",
          "[nn][train]") {
  for (const char* args :
       {"--count abc", "--count 99999999999999999999", "--count 0", "--count", "", "--bogus 1"}) {
    INFO(args);
    const Run r = run(STOKE_LOGITS_EXE, args);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains("stoke-logits:"));
  }
  const Run help = run(STOKE_LOGITS_EXE, "--help");
  CHECK(help.exit_code == 0);
  CHECK_THAT(help.output, Catch::StartsWith("usage: stoke-logits"));
  // A checkpoint from a short run: 4 images give 4 x 10 finite logits in one JSON line.
  const fs::path dir = fs::temp_directory_path() / ("stoke-logits-" + std::to_string(getpid()));
  fs::remove_all(dir);
  REQUIRE(run_train("--epochs 1 --limit-train 256 --limit-test 128 --no-progress --checkpoint " +
                    dir.string())
              .exit_code == 0);
  const Run r =
      run(STOKE_LOGITS_EXE, "--weights " + (dir / "best.safetensors").string() + " --count 4");
  REQUIRE(r.exit_code == 0);
  const auto j = nlohmann::json::parse(r.output);
  CHECK(j["count"] == 4);
  CHECK(j["logits"].size() == 40);
  fs::remove_all(dir);
}
