// stoke-train's output files, as the second hostile pass found them (issue 39): a FIFO where an
// output goes is refused at once, naming the flag and the path (it hung without a word); two
// outputs that are one file are refused (--metrics DIR/last.safetensors lost every record); and
// --resume never replaces results it cannot reproduce (with last.safetensors missing or a dangling
// link it started from scratch, dropping the metrics and replacing best.safetensors).
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "support/process.h"
#include "support/temp_dir.h"

using namespace stoke;
namespace fs = std::filesystem;
using Catch::Contains;

namespace {

const std::string kQuick =
    " --model lenet5 --epochs 1 --limit-train 128 --limit-test 64 --no-progress";

// stoke-train `args`, killed after 60 s: a hang fails the test instead of the suite.
test::ProcessResult train(const std::string& args) {
  return test::run_process("exec " + std::string(STOKE_TRAIN_EXE) + " " + args, 60);
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void make_fifo(const fs::path& p) {
  REQUIRE(::mkfifo(p.c_str(), 0600) == 0);
}

}  // namespace

TEST_CASE("stoke-train: an output path that is a FIFO or a directory is refused at once",
          "[nn][train][files]") {
  const test::TempDir tmp("stoke-out-fifo");
  const fs::path fifo = tmp.path / "fifo";
  make_fifo(fifo);
  const std::string f = fifo.string();
  struct Case {
    std::string args, says;
  };
  const auto in_ckpt = [&](const char* name, bool as_fifo) {
    const fs::path d = tmp.path / (std::string("ckpt-") + name);
    fs::create_directories(d);
    if (as_fifo)
      make_fifo(d / name);
    else
      fs::create_directories(d / name / "x");
    return d.string();
  };
  const std::string fifo_metrics_dir = in_ckpt("metrics.jsonl", true);
  const std::string fifo_last_dir = in_ckpt("last.safetensors", true);
  const std::string dir_best_dir = in_ckpt("best.safetensors", false);
  for (const Case& c : {
           Case{"--metrics " + f,
                "--metrics " + f + ": is a FIFO (named pipe), not a regular file"},
           Case{"--profile " + f, "--profile " + f + ": is a FIFO (named pipe)"},
           Case{"--checkpoint " + fifo_metrics_dir, "--checkpoint " + fifo_metrics_dir +
                                                        ": its metrics file " + fifo_metrics_dir +
                                                        "/metrics.jsonl: is a FIFO (named pipe)"},
           Case{"--checkpoint " + fifo_last_dir + " --resume",
                "--checkpoint " + fifo_last_dir + ": its last.safetensors " + fifo_last_dir +
                    "/last.safetensors: is a FIFO (named pipe)"},
           Case{"--checkpoint " + dir_best_dir,
                "its best.safetensors " + dir_best_dir + "/best.safetensors: is a directory"},
           Case{"--metrics " + tmp.path.string(), ": is a directory, not a regular file"},
           Case{"--profile " + tmp.path.string(),
                "--profile " + tmp.path.string() + ": is a directory"},
       }) {
    const test::ProcessResult r = train(c.args + kQuick);
    INFO(c.args << "\n" << r.output);
    CHECK_FALSE(r.timed_out());
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Contains(c.says));
    CHECK_THAT(r.output, !Contains("data:"));  // before any data is read
  }
}

TEST_CASE("stoke-train: two outputs that are one file are refused before anything runs",
          "[nn][train][files]") {
  const test::TempDir tmp("stoke-out-same");
  const std::string dir = (tmp.path / "ckpt").string();
  REQUIRE(train(kQuick + " --checkpoint " + dir).exit_code == 0);
  const std::string last = read_file(dir + "/last.safetensors");
  const std::string metrics = read_file(dir + "/metrics.jsonl");
  // --metrics DIR/last.safetensors: each save replaced the records (and the records would be
  // appended to the checkpoint). With --resume it used to exit 0 having lost every record.
  for (const std::string& extra :
       {std::string(" --resume --epochs 2"), std::string(" --overwrite")}) {
    const test::ProcessResult r =
        train(kQuick + " --checkpoint " + dir + " --metrics " + dir + "/last.safetensors" + extra);
    INFO(extra << "\n" << r.output);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Contains("--checkpoint " + dir + ": its last.safetensors " + dir +
                                  "/last.safetensors is the file of --metrics") &&
                             Contains("give it a file of its own"));
    CHECK(read_file(dir + "/last.safetensors") == last);
    CHECK(read_file(dir + "/metrics.jsonl") == metrics);
  }
  // The same file by another name (a ".." and a symbolic link), and --profile over --metrics.
  fs::create_directory_symlink(dir, tmp.path / "link");
  const test::ProcessResult linked =
      train(kQuick + " --checkpoint " + dir + " --resume --metrics " +
            (tmp.path / "link" / ".." / "ckpt" / "best.safetensors").string());
  CHECK(linked.exit_code == 1);
  CHECK_THAT(linked.output, Contains("is the file of --metrics"));
  const std::string m = (tmp.path / "m.jsonl").string();
  const test::ProcessResult twice = train(kQuick + " --metrics " + m + " --profile " + m);
  CHECK(twice.exit_code == 1);
  CHECK_THAT(twice.output, Contains("--profile " + m + " is the file of --metrics (" + m + ")"));
  CHECK_FALSE(fs::exists(m));
}

TEST_CASE("stoke-train --resume without state to resume never replaces earlier results",
          "[nn][train][files][resume]") {
  const test::TempDir tmp("stoke-resume-nothing");
  const std::string dir = (tmp.path / "ckpt").string();
  const std::string args = kQuick + " --epochs 2 --checkpoint " + dir + " --resume";
  REQUIRE(train(kQuick + " --checkpoint " + dir).exit_code == 0);
  const std::string best = read_file(dir + "/best.safetensors");
  const std::string metrics = read_file(dir + "/metrics.jsonl");
  const fs::path last = fs::path(dir) / "last.safetensors";
  const fs::path moved = tmp.path / "last.moved";
  fs::rename(last, moved);

  // Missing: refused (exit 2) naming what would be lost; nothing is touched.
  const test::ProcessResult missing = train(args);
  INFO(missing.output);
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.output, Contains("--resume: there is no " + last.string()) &&
                                 Contains("best.safetensors, " + dir + "/metrics.jsonl (1 line)") &&
                                 Contains("--overwrite"));
  CHECK_THAT(missing.output, !Contains("data:"));
  // A dangling symbolic link: refused, naming its target.
  fs::create_symlink(tmp.path / "gone.safetensors", last);
  const test::ProcessResult dangling = train(args);
  INFO(dangling.output);
  CHECK(dangling.exit_code == 2);
  CHECK_THAT(dangling.output, Contains(last.string() + " is a dangling symbolic link (to " +
                                       (tmp.path / "gone.safetensors").string()));
  CHECK(read_file(dir + "/best.safetensors") == best);
  CHECK(read_file(dir + "/metrics.jsonl") == metrics);

  // The link repaired: it resumes (epoch 2 of 2).
  fs::remove(last);
  fs::rename(moved, last);
  const test::ProcessResult resumed = train(args);
  CHECK(resumed.exit_code == 0);
  CHECK_THAT(resumed.output, Contains("resumed from") && Contains("epoch 2/2"));
  // A directory with no earlier results starts from scratch, as a restart script that always
  // passes --resume expects.
  const std::string fresh = (tmp.path / "fresh").string();
  const test::ProcessResult first = train(kQuick + " --checkpoint " + fresh + " --resume");
  CHECK(first.exit_code == 0);
  CHECK_THAT(first.output, Contains("no earlier results: starting from scratch"));
}

TEST_CASE("stoke-train --resume refuses a metrics file that is not stoke-train's records",
          "[nn][train][files][resume]") {
  const test::TempDir tmp("stoke-resume-metrics");
  const std::string dir = (tmp.path / "ckpt").string();
  REQUIRE(train(kQuick + " --checkpoint " + dir).exit_code == 0);
  const std::string good = read_file(dir + "/metrics.jsonl");
  struct Bad {
    std::string line, says;
  };
  for (const Bad& b : {
           Bad{"not json", "line 2, is not JSON"},
           Bad{"[1,2]", "line 2, is a JSON array, not an object"},
           Bad{R"({"step":3})", "line 2, has no string \"type\""},
           Bad{R"({"type":"step","step":"3"})", "line 2, has a \"step\" that is not an integer"},
           Bad{R"({"type":"epoch","epoch":1.5})", "line 2, has a \"epoch\" that is not an integer"},
       }) {
    std::ofstream(dir + "/metrics.jsonl", std::ios::binary) << good << b.line << "\n";
    const test::ProcessResult r = train(kQuick + " --epochs 2 --resume --checkpoint " + dir);
    INFO(b.line << "\n" << r.output);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Contains("the metrics file " + dir + "/metrics.jsonl, " + b.says));
  }
  // A last line cut short by a kill (no newline) is still dropped, not refused.
  std::ofstream(dir + "/metrics.jsonl", std::ios::binary) << good << "{\"type\":\"st";
  CHECK(train(kQuick + " --epochs 2 --resume --checkpoint " + dir).exit_code == 0);
}
