// stoke-train as a careless user drives it: a diverging run stops at the first non-finite loss
// (exit non-zero, a message naming the step, the last finite loss and the last good checkpoint, no
// non-finite model saved, every metrics line valid JSON), and flags are checked before anything
// runs (switch values, ranges, non-finite numbers), each error naming the flag.
#include <sys/wait.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "../../apps/train/progress.h"  // header-only: the RSS reading's rule
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
  CHECK_THAT(r.output, (Catch::Contains("the training loss is nan") ||
                        Catch::Contains("the training loss is inf") ||
                        Catch::Contains("the training loss is -inf")) &&
                           Catch::Contains("the last finite loss was") && Catch::Contains("step "));
  // At lr 1e6 the first step's update already explodes the weights (the next loss is ~1e24): no
  // checkpoint of this run is good, so none is written and none is named (the last one written,
  // whose weights gave the nan, used to be named; test_train_resume.cpp resumes from a good one).
  CHECK_THAT(r.output, Catch::Contains("checkpoint of step 1 not written") &&
                           Catch::Contains("the last good checkpoint is none"));
  CHECK_FALSE(fs::exists(dir / "last.safetensors"));
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
           Bad{"--lr 0", "flag --lr expects a number in (0, inf), got '0'"},
           Bad{"--epochs abc", "flag --epochs expects an integer"},
           Bad{"--amsgrad", "--amsgrad is Adam's: it needs --optimizer adam or adamw, got sgd"},
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
  const Run ams = run_train("--optimizer adamw --amsgrad --lr 1e-3" + quick);
  CHECK(ams.exit_code == 0);
  CHECK_THAT(ams.output, Catch::Contains("| adamw (amsgrad) lr 0.001"));
  // --recipe fast sets defaults; flags given with it win, before or after it (they used to be
  // overwritten: --epochs 1 trained the recipe's 10).
  const std::string limits = " --limit-train 128 --limit-test 128 --no-progress";
  for (const std::string args :
       {"--recipe fast --epochs 1 --lr 0.05", "--epochs 1 --lr 0.05 --recipe=fast"}) {
    INFO(args);
    const Run r = run_train(args + limits);
    CHECK(r.exit_code == 0);
    CHECK_THAT(r.output, Catch::Contains("sgd (nesterov) lr 0.05, batch 128 x 1 accum, 1 epochs"));
    CHECK_THAT(r.output, !Catch::Contains("epoch 2/"));
  }
  const Run fast = run_train("--recipe fast --epochs 1" + limits);
  CHECK_THAT(fast.output, Catch::Contains("model: resnet8_pool, 77754 parameters"));
  CHECK_THAT(fast.output, Catch::Contains("sgd (nesterov) lr 0.1, batch 128 x 1 accum, 1 epochs"));
  CHECK_THAT(run_train("--recipe fast --model lenet5 --epochs 1" + limits).output,
             Catch::Contains("model: lenet5, 61706 parameters"));
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

namespace {

const std::string kQuick =
    " --model lenet5 --epochs 1 --limit-train 128 --limit-test 64 --no-progress";

// A fresh directory under /tmp for one test, removed again by its destructor.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name)
      : path(fs::temp_directory_path() / (name + "-" + std::to_string(getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_file(const fs::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary) << text;
}

// The metrics records, each parsed (a line that does not parse fails the test).
std::vector<nlohmann::json> records(const fs::path& p) {
  std::vector<nlohmann::json> out;
  std::ifstream in(p);
  for (std::string line; std::getline(in, line);) {
    INFO(p.string() << ": " << line);
    REQUIRE_NOTHROW(out.push_back(nlohmann::json::parse(line)));
  }
  return out;
}

}  // namespace

TEST_CASE("stoke-train: a new run refuses to replace an earlier run's results", "[nn][train]") {
  const TempDir tmp("stoke-overwrite");
  const std::string dir = (tmp.path / "ckpt").string();
  REQUIRE(run_train(kQuick + " --checkpoint " + dir).exit_code == 0);
  const std::string best = read_file(dir + "/best.safetensors");
  const std::string metrics = read_file(dir + "/metrics.jsonl");
  REQUIRE(!best.empty());
  REQUIRE(records(dir + "/metrics.jsonl").size() == 1);

  // Again without --resume or --overwrite: refused before any data is read, nothing touched.
  const Run again = run_train(kQuick + " --checkpoint " + dir + " --seed 3");
  INFO(again.output);
  CHECK(again.exit_code == 2);
  CHECK_THAT(again.output, Catch::Contains("--checkpoint " + dir) &&
                               Catch::Contains("last.safetensors, best.safetensors, "
                                               "metrics.jsonl (1 line)") &&
                               Catch::Contains("--resume") && Catch::Contains("--overwrite"));
  CHECK_THAT(again.output, !Catch::Contains("data:"));
  CHECK(read_file(dir + "/best.safetensors") == best);
  CHECK(read_file(dir + "/metrics.jsonl") == metrics);

  // A checkpoint alone is enough to refuse.
  fs::remove(dir + "/metrics.jsonl");
  fs::remove(dir + "/best.safetensors");
  const Run last_only = run_train(kQuick + " --checkpoint " + dir);
  CHECK(last_only.exit_code == 2);
  CHECK_THAT(last_only.output, Catch::Contains("results: last.safetensors."));

  CHECK(run_train(kQuick + " --checkpoint " + dir + " --resume --overwrite").exit_code == 1);
  // --overwrite starts over: one epoch record, a new best.
  const Run over = run_train(kQuick + " --checkpoint " + dir + " --overwrite --seed 3");
  INFO(over.output);
  CHECK(over.exit_code == 0);
  CHECK(records(dir + "/metrics.jsonl").size() == 1);
  CHECK(fs::exists(dir + "/best.safetensors"));

  // An explicit --metrics file that is not empty: refused, then replaced with --overwrite; an
  // empty one is used as it is.
  const fs::path m = tmp.path / "m.jsonl";
  write_file(m, "{\"type\":\"note\"}\n{\"type\":\"note\"}\n");
  const Run metrics_again = run_train(kQuick + " --metrics " + m.string());
  CHECK(metrics_again.exit_code == 2);
  CHECK_THAT(metrics_again.output, Catch::Contains("--metrics " + m.string() +
                                                   " already exists and is not empty (2 "
                                                   "lines)") &&
                                       Catch::Contains("--overwrite"));
  CHECK(read_file(m).size() == 32);
  CHECK(run_train(kQuick + " --metrics " + m.string() + " --overwrite").exit_code == 0);
  CHECK(records(m).size() == 1);
  write_file(m, "");
  CHECK(run_train(kQuick + " --metrics " + m.string()).exit_code == 0);
  CHECK(records(m).size() == 1);
  CHECK_THAT(run_train("--help").output, Catch::Contains("--overwrite"));
}

TEST_CASE(
    "stoke-train: metrics are written at every record, and --resume appends without duplicates",
    "[nn][train]") {
  const TempDir tmp("stoke-metrics-resume");
  const std::string dir = (tmp.path / "ckpt").string();
  // 256 images in batches of 32: 8 steps an epoch, 16 in all; a checkpoint every 3 steps.
  const std::string args =
      " --model lenet5 --epochs 2 --limit-train 256 --limit-test 64 --batch 32 "
      "--no-progress --log-every 1 --checkpoint-every 3 --checkpoint " +
      dir;
  const Run killed =
      run(("STOKE_TRAIN_TEST_KILL_AT_STEP=5 " + std::string(STOKE_TRAIN_EXE)).c_str(), args);
  CHECK(killed.exit_code != 0);
  // Killed at step 5 with nothing flushed at the kill: every step record is in the file.
  auto before = records(dir + "/metrics.jsonl");
  REQUIRE(before.size() == 5);
  CHECK(before.back()["step"] == 5);

  // Resumed from step 3: the records of steps 4 and 5 are written again, not twice.
  const Run resumed = run_train(args + " --resume");
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  CHECK_THAT(resumed.output,
             Catch::Contains("dropped 2 records") && Catch::Contains("past step 3"));
  std::vector<int64_t> steps, epochs;
  for (const auto& r : records(dir + "/metrics.jsonl")) {
    if (r["type"] == "step") steps.push_back(r["step"]);
    if (r["type"] == "epoch") epochs.push_back(r["epoch"]);
  }
  std::vector<int64_t> want(16);
  for (int64_t i = 0; i < 16; ++i) want[i] = i + 1;
  CHECK(steps == want);
  CHECK(epochs == std::vector<int64_t>{1, 2});

  // A line cut short by a kill mid-write is dropped too; a resume at the end keeps the rest.
  const std::string whole = read_file(dir + "/metrics.jsonl");
  write_file(dir + "/metrics.jsonl", whole + "{\"type\":\"step\",\"ep");
  const Run done = run_train(args + " --resume");
  CHECK(done.exit_code == 0);
  CHECK(read_file(dir + "/metrics.jsonl") == whole);
}

TEST_CASE("stoke-train: a metrics or checkpoint write that fails stops the run", "[nn][train]") {
  const TempDir tmp("stoke-write-errors");
  // A full disk: the first record fails, naming the file and the OS error.
  const Run full = run_train(kQuick + " --metrics /dev/full");
  INFO(full.output);
  CHECK(full.exit_code == 1);
  CHECK_THAT(full.output,
             Catch::Contains("metrics file /dev/full failed: No space left on device"));
  CHECK_THAT(full.output, !Catch::Contains("done:"));
  // A file that cannot be created: refused at start, before the data is read.
  write_file(tmp.path / "file", "x");
  const std::string bad = (tmp.path / "file" / "m.jsonl").string();
  const Run cannot = run_train(kQuick + " --metrics " + bad);
  CHECK(cannot.exit_code == 1);
  CHECK_THAT(cannot.output,
             Catch::Contains("--metrics " + bad + ": cannot open for writing: Not a directory"));
  CHECK_THAT(cannot.output, !Catch::Contains("data:"));
  // A checkpoint that could not be saved (best.safetensors is a directory with a file in it):
  // refused before the data is read, not after the first epoch's training.
  const fs::path dir = tmp.path / "ckpt";
  fs::create_directories(dir / "best.safetensors");
  write_file(dir / "best.safetensors" / "keep", "x");
  const Run save = run_train(kQuick + " --resume --checkpoint " + dir.string());
  INFO(save.output);
  CHECK(save.exit_code == 1);
  CHECK_THAT(save.output,
             Catch::Contains((dir / "best.safetensors").string() + ": is a directory"));
  CHECK_THAT(save.output, !Catch::Contains("data:"));
}

TEST_CASE("stoke-train: the checkpoint directory is checked before anything is loaded",
          "[nn][train]") {
  const TempDir tmp("stoke-ckpt-dir");
  write_file(tmp.path / "file", "x");
  struct Bad {
    std::string dir, says;
  };
  std::vector<Bad> bad = {
      {(tmp.path / "file" / "ckpt").string(), ": cannot create the directory: Not a directory"},
      {(tmp.path / "file").string(), ": exists and is not a directory"},
  };
  // Read-only file systems (root writes through permission bits, not through these).
  if (fs::is_directory("/sys")) bad.push_back({"/sys", ": the directory is not writable"});
  if (fs::is_directory("/proc")) bad.push_back({"/proc", ": the directory is not writable"});
  for (const Bad& b : bad) {
    const Run r = run_train(kQuick + " --checkpoint " + b.dir);
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Catch::Contains("--checkpoint " + b.dir + b.says));
    CHECK_THAT(r.output, !Catch::Contains("data:"));
  }
  // A missing directory is created, parents included.
  const fs::path fresh = tmp.path / "a" / "b";
  CHECK(run_train(kQuick + " --checkpoint " + fresh.string()).exit_code == 0);
  CHECK(fs::exists(fresh / "last.safetensors"));
}

TEST_CASE("stoke-train: temp files of killed saves are removed, a live process's are not",
          "[nn][train]") {
  const TempDir tmp("stoke-stale-tmp");
  long long pid_max = 4194304;  // the kernel's limit when /proc does not say
  std::ifstream("/proc/sys/kernel/pid_max") >> pid_max;
  const fs::path stale = tmp.path / ("last.safetensors.tmp." + std::to_string(pid_max + 1));
  const fs::path live = tmp.path / ("best.safetensors.tmp." + std::to_string(getpid()));
  const fs::path other = tmp.path / "notes.tmp.1";
  for (const fs::path& p : {stale, live, other}) write_file(p, "partial");
  const Run r = run_train(kQuick + " --checkpoint " + tmp.path.string());
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("removed " + stale.string()));
  CHECK(!fs::exists(stale));
  CHECK(fs::exists(live));
  CHECK(fs::exists(other));
  CHECK(fs::exists(tmp.path / "last.safetensors"));
}

TEST_CASE("stoke-train: --resume checks the checkpoint's position metadata", "[nn][train]") {
  const TempDir tmp("stoke-resume-meta");
  const std::string dir = tmp.path.string();
  REQUIRE(run_train(kQuick + " --checkpoint " + dir).exit_code == 0);
  const std::string last = dir + "/last.safetensors";
  const nn::SafetensorsFile good = nn::load_safetensors(last);
  struct Bad {
    std::string key, value, message;
  };
  // "-5" used to train 7 epochs; "1x" and "nan" parsed as 1 and NaN; a non-number aborted with
  // stoll's bare message.
  for (const Bad& b : {Bad{"epoch", "-5", "'epoch' is '-5', expected an integer in [0, "},
                       Bad{"epoch", "1x", "'epoch' is '1x', expected an integer"},
                       Bad{"global_step", "many", "'global_step' is 'many', expected an integer"},
                       Bad{"epoch_correct", "99999",
                           "'epoch_correct' is '99999', expected an "
                           "integer in [0, "},
                       Bad{"best_loss", "nan", "'best_loss' is 'nan', expected a finite number"},
                       Bad{"epoch", "7",
                           "the checkpoint is at epoch 7, past --epochs 1: pass "
                           "--epochs 8 or more"}}) {
    auto meta = good.metadata;
    meta[b.key] = b.value;
    nn::save_safetensors(last, good.tensors, meta);
    const Run r = run_train(kQuick + " --checkpoint " + dir + " --resume");
    INFO(b.key << "=" << b.value << ": " << r.output);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Catch::Contains(last) && Catch::Contains(b.message));
  }
  nn::save_safetensors(last, good.tensors, good.metadata);
  CHECK(run_train(kQuick + " --checkpoint " + dir + " --resume").exit_code == 0);
}

TEST_CASE("stoke-pack: integer flags are bounded and named before any work", "[nn][pack]") {
  struct Bad {
    std::string args, message;
  };
  const std::string in = " --format idx --input /usr/share/datasets/fashion-mnist --output /tmp/x";
  for (const Bad& b :
       {Bad{in + " --size 100000x100000",
            "--size (height): expected an integer in [1, 8192], got '100000'"},
        Bad{in + " --size 32x0", "--size (width): expected an integer in [1, 8192], got '0'"},
        Bad{in + " --shard-mb 8796093022208",
            "--shard-mb: expected an integer in [1, 1048576], got '8796093022208'"},
        Bad{in + " --limit 99999999999999999999",
            "--limit: expected an integer in [0, 1099511627776], got '99999999999999999999'"},
        Bad{in + " --threads 12x", "--threads: expected an integer in [0, 1024], got '12x'"},
        Bad{in + " --limit -3", "--limit: expected an integer in [0, "}}) {
    const auto start = std::chrono::steady_clock::now();
    const Run r = run(STOKE_PACK_EXE, b.args);
    INFO(b.args << ": " << r.output);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Catch::Contains(b.message));
    // Refused at once, not after allocating or reading the dataset.
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  }
}

namespace {

// Raw IDX files of `n` black h x w images (labels 0..9 in turn) as `prefix`-images-idx3-ubyte and
// `prefix`-labels-idx1-ubyte in `dir`.
void write_idx_split(const fs::path& dir, const std::string& prefix, int n, int h, int w) {
  const auto be32 = [](std::string& s, uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) s += static_cast<char>((v >> shift) & 0xff);
  };
  std::string images, labels;
  be32(images, 0x803);
  be32(images, static_cast<uint32_t>(n));
  be32(images, static_cast<uint32_t>(h));
  be32(images, static_cast<uint32_t>(w));
  images.append(static_cast<size_t>(n) * h * w, '\0');
  be32(labels, 0x801);
  be32(labels, static_cast<uint32_t>(n));
  for (int i = 0; i < n; ++i) labels += static_cast<char>(i % 10);
  write_file(dir / (prefix + "-images-idx3-ubyte"), images);
  write_file(dir / (prefix + "-labels-idx1-ubyte"), labels);
}

}  // namespace

TEST_CASE("stoke-train: data that does not fit the model or the other split fails before training",
          "[nn][train]") {
  const fs::path dir = fs::temp_directory_path() / ("stoke-fit-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string common = "--model lenet5 --epochs 1 --threads 1 --no-progress --data " +
                             dir.string() + " --data-format idx";
  // A 32x32 test set for a 28x28 training set: named before the first step, not after an epoch.
  write_idx_split(dir, "train", 64, 28, 28);
  write_idx_split(dir, "t10k", 16, 32, 32);
  Run r = run_train(common);
  INFO(r.output);
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.output, Catch::Contains("the test data") && Catch::Contains("32x32x1") &&
                           Catch::Contains("28x28x1") && Catch::Contains("t10k-images-idx3-ubyte"));
  CHECK_THAT(r.output, !Catch::Contains("epoch 1"));
  // Images too small for ResNet-9's pooling (it builds for any size, and would fail at its first
  // batch): the model, the image size and the layer's own message are named.
  write_idx_split(dir, "train", 16, 4, 4);
  write_idx_split(dir, "t10k", 8, 4, 4);
  r = run_train("--model resnet9 --epochs 1 --threads 1 --no-progress --data " + dir.string() +
                " --data-format idx");
  INFO(r.output);
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.output, Catch::Contains("model resnet9 does not take the data's 4x4x1 images") &&
                           Catch::Contains("max_pool2d"));
  fs::remove_all(dir);
}

TEST_CASE("stoke-train: --no-decay-norm-bias trains with two parameter groups", "[nn][train]") {
  const Run r = run_train(
      "--model resnet8 --epochs 1 --limit-train 256 --limit-test 64 --batch 64 --threads 1 "
      "--no-progress --weight-decay 0.05 --no-decay-norm-bias --schedule cosine");
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("done: best test acc"));
  CHECK_THAT(run_train("--no-decay-norm-bias=maybe").output,
             Catch::Contains("--no-decay-norm-bias"));
}

TEST_CASE("stoke-train: model, optimizer, schedule and device names are checked before the data",
          "[nn][train]") {
  const std::string missing = " --data /nonexistent/stoke-train-data";
  struct Bad {
    const char* args;
    const char* says;
  };
  for (const Bad& b : {
           Bad{"--optimizer sgdd",
               "unknown optimizer 'sgdd' (known: sgd, adam, adamw, rmsprop, adagrad)"},
           Bad{"--schedule cos",
               "unknown schedule 'cos' (known: none, step, multistep, cosine, onecycle)"},
           Bad{"--model lenet", "unknown model 'lenet' (known: lenet5, "},
           Bad{"--device gpu", "unknown device 'gpu' (cpu or cuda[:i])"},
           Bad{"--device cuda:x", "unknown device 'cuda:x' (cpu or cuda[:i])"},
       }) {
    const Run r = run_train(b.args + missing);
    INFO(b.args << ": " << r.output);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Catch::Contains(b.says));
    CHECK_THAT(r.output, !Catch::Contains("nonexistent") && !Catch::Contains("data:"));
  }
  // The names themselves are still taken.
  CHECK(run_train(kQuick + " --optimizer adamw --schedule onecycle").exit_code == 0);
}

TEST_CASE("stoke-train: the epoch's RSS peak is never below its current RSS", "[nn][train]") {
  // The two counters are read apart; the reading raises the peak to the current size.
  const train::RssMib low = train::rss_reading(104.4, 103.2);
  CHECK(low.current == 104.4);
  CHECK(low.peak == 104.4);
  const train::RssMib high = train::rss_reading(80.0, 120.5);
  CHECK(high.current == 80.0);
  CHECK(high.peak == 120.5);
  // And so in the epoch records (and the epoch line printed from them).
  const TempDir tmp("stoke-rss");
  const fs::path m = tmp.path / "m.jsonl";
  REQUIRE(run_train(kQuick + " --metrics " + m.string()).exit_code == 0);
  const auto rs = records(m);
  REQUIRE(rs.size() == 1);
  CHECK(rs[0]["rss_mib"].get<double>() <= rs[0]["peak_rss_mib"].get<double>());
}

TEST_CASE("stoke-train: the epoch line and record give the model's FLOPs per image and the MFU",
          "[nn][train]") {
  const TempDir tmp("stoke-mfu");
  const fs::path m = tmp.path / "m.jsonl";
  const Run r = run_train(kQuick + " --metrics " + m.string());
  REQUIRE(r.exit_code == 0);
  const auto rs = records(m);
  REQUIRE(rs.size() == 1);
  // LeNet-5 on 1x28x28, closed form (2 FLOPs per multiply-add): forward conv1 28*28*6*25,
  // conv2 10*10*16*6*25, fc 400*120 + 120*84 + 84*10 multiply-adds; backward twice that, less
  // conv1's input gradient (the image needs none).
  const double conv1 = 2.0 * 28 * 28 * 6 * 25, conv2 = 2.0 * 10 * 10 * 16 * 6 * 25,
               fc = 2.0 * (400 * 120 + 120 * 84 + 84 * 10);
  CHECK(rs[0]["flops_per_image"].get<double>() == 3 * (conv1 + conv2 + fc) - conv1);
  const double peak = rs[0]["peak_gflops"].get<double>();
  CHECK(peak > 0);
  CHECK(rs[0]["peak_dtype"].get<std::string>() == "f32");
  // The MFU is images/s x FLOPs over the peak (one process): the same three doubles, rounded
  // once more by the division and by JSON's 17 digits.
  const double want =
      rs[0]["images_per_s"].get<double>() * rs[0]["flops_per_image"].get<double>() / (peak * 1e9);
  CHECK(rs[0]["mfu"].get<double>() == Approx(want).epsilon(1e-12));
  CHECK_THAT(r.output, Catch::Contains("| MFU ") && Catch::Contains("(0.00226 GFLOP/img, peak "));
}

TEST_CASE("stoke-train: with more than 5 classes the test also reports top-5 accuracy",
          "[nn][train]") {
  const TempDir tmp("stoke-top5");
  const fs::path m = tmp.path / "m.jsonl";
  const Run r = run_train(kQuick + " --metrics " + m.string());
  REQUIRE(r.exit_code == 0);
  const auto rs = records(m);
  REQUIRE(rs.size() == 1);
  // Fashion-MNIST's 10 classes: top-5 holds top-1, and 5 guesses of 10 beat one.
  const double acc = rs[0]["test_acc"].get<double>(), acc5 = rs[0]["test_acc5"].get<double>();
  CHECK(acc5 >= acc);
  CHECK(acc5 <= 100.0);
  char shown[64];
  std::snprintf(shown, sizeof shown, "acc %.2f%% (top-5 %.2f%%) | ", acc, acc5);
  CHECK_THAT(r.output, Catch::Contains(shown));
}

TEST_CASE("stoke-train --profile: a Chrome trace of the chosen steps and a summary that adds up",
          "[nn][train][profiler]") {
  const fs::path trace = fs::temp_directory_path() / ("stoke-profile-" + std::to_string(getpid()));
  const Run r = run_train(
      "--model lenet5 --epochs 1 --limit-train 1280 --limit-test 128 --batch 64 --threads 2 "
      "--workers 1 --no-progress --profile-steps 3:13 --profile " +
      trace.string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("profile: wrote " + trace.string()) &&
                           Catch::Contains("profile: 10 steps") &&
                           Catch::Contains("step breakdown") && Catch::Contains("conv2d") &&
                           Catch::Contains("% peak"));
  // The phases cover the step: what is in none of them is under 5 % of the step time.
  const auto other = r.output.find("(other)");
  REQUIRE(other != std::string::npos);
  double other_ms = -1, other_pct = -1;
  REQUIRE(std::sscanf(r.output.c_str() + other, "(other) %lf %lf", &other_ms, &other_pct) == 2);
  CHECK(other_pct < 5.0);

  std::ifstream in(trace);
  const nlohmann::json json = nlohmann::json::parse(in);
  std::map<int, std::vector<std::string>> open;
  std::map<std::string, int> begun;
  std::set<std::string> tracks;
  for (const auto& e : json["traceEvents"]) {
    const int tid = e["tid"];
    if (e["ph"] == "M") {
      tracks.insert(e["args"]["name"].get<std::string>());
    } else if (e["ph"] == "B") {
      open[tid].push_back(e["name"]);
      ++begun[e["name"].get<std::string>()];
    } else {
      REQUIRE_FALSE(open[tid].empty());
      open[tid].pop_back();
    }
  }
  for (const auto& [tid, stack] : open) CHECK(stack.empty());
  CHECK(begun["step"] == 10);
  // Every autograd node is recorded: LeNet-5's two convolutions' backward in each step. (The
  // summary lists the top 25 by self time, where a node, whose op is its child, may not rank.)
  CHECK(begun["Conv2dBackward"] == 20);
  for (const char* phase : {"data wait", "h2d", "forward", "backward", "optimizer"})
    CHECK(begun[phase] == 10);
  CHECK(tracks.count("training") == 1);
  CHECK(tracks.count("loader worker 0") == 1);
  fs::remove(trace);

  CHECK_THAT(run_train("--profile-steps 5 --profile x.json").output,
             Catch::Contains("--profile-steps expects A:B"));
  CHECK_THAT(run_train("--profile-steps 5:3 --profile x.json").output,
             Catch::Contains("--profile-steps expects A < B"));
  CHECK_THAT(run_train("--profile-device").output,
             Catch::Contains("--profile-device needs --profile FILE"));
  CHECK_THAT(run_train("--profile-device --profile x.json").output,
             Catch::Contains("--profile-device times ops on the GPU: it needs --device cuda"));
}
