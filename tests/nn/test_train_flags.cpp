// stoke-train's flags as the second hostile pass used them (issue 39): every numeric flag has a
// range that --help states and the parser enforces with a message naming the flag, the value and
// the range (--dist-timeout 1e10 fired a false timeout, 1e300 overflowed a cast, 1e-4 turned the
// watchdog off; --gamma -1 made the learning rate negative), and the flags that mean something
// only under mpirun are refused in one process (--zero, --allreduce and --dist-timeout were
// ignored without a word).
#include <catch2/catch.hpp>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "support/process.h"

using namespace stoke;
using Catch::Contains;

namespace {

test::ProcessResult train(const std::string& args) {
  return test::run_process("exec " + std::string(STOKE_TRAIN_EXE) + " " + args, 60);
}

// The line of `help` that documents `flag` (its first line starting with it), and the lines that
// continue it (indented past the flag column).
std::string help_entry(const std::string& help, const std::string& flag) {
  const size_t at = help.find("\n  " + flag + " ");
  if (at == std::string::npos) return "";
  size_t end = help.find('\n', at + 1);
  while (end != std::string::npos && help.compare(end + 1, 26, std::string(26, ' ')) == 0)
    end = help.find('\n', end + 1);
  return help.substr(at + 1, end - at - 1);
}

}  // namespace

TEST_CASE("stoke-train: every numeric flag's range is in --help and enforced, naming all three",
          "[nn][train][flags]") {
  const test::ProcessResult help = train("--help");
  REQUIRE(help.exit_code == 0);
  // Each numeric flag with a value outside its range (and one inside, for the real ones): the
  // error's range must be the one --help states for that flag.
  struct Case {
    std::string flag, bad, range;
  };
  for (const Case& c : {
           Case{"--workers", "257", "[0, 256]"},
           Case{"--prefetch", "0", "[1, 1024]"},
           Case{"--epochs", "0", "[1, 1048576]"},
           Case{"--batch", "1048577", "[1, 1048576]"},
           Case{"--lr", "-0.1", "(0, inf)"},
           Case{"--seed", "-1", "[0, 9223372036854775807]"},
           Case{"--threads", "1025", "[0, 1024]"},
           Case{"--momentum", "1.5", "[0, 1]"},
           Case{"--weight-decay", "-1e-4", "[0, inf)"},
           Case{"--step-size", "0", "[1, 1048576]"},
           Case{"--milestones", "0", "[1, 1048576]"},
           Case{"--gamma", "-1", "(0, 1]"},
           Case{"--gamma", "0", "(0, 1]"},
           Case{"--gamma", "1.5", "(0, 1]"},
           Case{"--warmup", "-1", "[0, 2147483648]"},
           Case{"--label-smoothing", "1.5", "[0, 1]"},
           Case{"--clip-grad", "-1", "[0, inf)"},
           Case{"--accum", "0", "[1, 1048576]"},
           Case{"--patience", "-1", "[0, 2147483648]"},
           Case{"--checkpoint-every", "-1", "[0, 2147483648]"},
           Case{"--eval-every", "-2", "[0, 2147483648]"},
           Case{"--log-every", "-3", "[0, 2147483648]"},
           Case{"--limit-train", "-5", "[0, 2147483648]"},
           Case{"--limit-test", "2147483649", "[0, 2147483648]"},
           Case{"--dist-timeout", "1e10", "[0.1, 1e+06]"},
           Case{"--dist-timeout", "1e300", "[0.1, 1e+06]"},
           Case{"--dist-timeout", "1e-4", "[0.1, 1e+06]"},
           Case{"--dist-timeout", "0", "[0.1, 1e+06]"},
           Case{"--zero", "4", "[1, 3]"},
           Case{"--profile-steps", "-1:5", "[0, 2147483648]"},
       }) {
    INFO(c.flag << " " << c.bad);
    const test::ProcessResult r = train(c.flag + " " + c.bad);
    CHECK(r.exit_code == 1);
    const bool integer = c.range.find('.') == std::string::npos &&
                         c.range.find("inf") == std::string::npos && c.flag != "--momentum" &&
                         c.flag != "--gamma" && c.flag != "--label-smoothing";
    CHECK_THAT(r.output, Contains("flag " + c.flag + " expects " +
                                  (integer ? "an integer" : "a number") + " in " + c.range +
                                  ", got '" + (c.flag == "--profile-steps" ? "-1" : c.bad) + "'"));
    // --profile-steps is documented within --profile's entry.
    const std::string entry =
        help_entry(help.output, c.flag == "--profile-steps" ? "--profile" : c.flag);
    INFO(entry);
    CHECK_THAT(entry, Contains(c.range));
  }
  // The bounds themselves are taken.
  const std::string quick = " --epochs 1 --limit-train 64 --limit-test 64 --no-progress";
  CHECK(train("--schedule step --gamma 1 --momentum 0 --label-smoothing 1 --clip-grad 0" + quick)
            .exit_code == 0);
}

TEST_CASE("stoke-train: schedule values are checked against their schedule", "[nn][train][flags]") {
  struct Bad {
    std::string args, says;
  };
  for (const Bad& b : {
           Bad{"--gamma 0.5", "--gamma is --schedule step's and multistep's, got --schedule none"},
           Bad{"--schedule cosine --step-size 2", "--step-size is --schedule step's"},
           Bad{"--schedule step --milestones 2", "--milestones is --schedule multistep's"},
           Bad{"--schedule multistep", "--schedule multistep needs --milestones"},
           Bad{"--schedule multistep --milestones 3,2", "expects increasing epochs, got '3,2'"},
           Bad{"--master-weights --amp fp16",
               "--master-weights keeps f32 master weights in "
               "ZeRO's shards for half parameters: it needs --zero"},
           Bad{"--master-weights --zero 2", "it needs --zero 1|2|3 and --amp fp16|bf16"},
           Bad{"--schedule multistep --milestones 2,2", "expects increasing epochs"},
       }) {
    const test::ProcessResult r = train(b.args + " --data /nonexistent");
    INFO(b.args << "\n" << r.output);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Contains(b.says));
  }
}

TEST_CASE("stoke-train: flags that mean something only under mpirun are refused in one process",
          "[nn][train][flags]") {
  const std::string quick = " --epochs 1 --limit-train 64 --limit-test 64 --no-progress";
  for (const std::string flags :
       {"--zero 1", "--allreduce ring", "--allreduce native", "--dist-timeout 30",
        "--dist-backend mpi", "--zero 2 --dist-timeout 5",
        "--zero 3 --amp bf16 --master-weights"}) {
    const test::ProcessResult r = train(flags + quick);
    INFO(flags << "\n" << r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Contains("only under mpirun, in a job of 2 or more ranks") &&
                             Contains("mpirun -np N"));
    CHECK_THAT(r.output, !Contains("data:"));
  }
  const test::ProcessResult both = train("--zero 2 --dist-timeout 5" + quick);
  CHECK_THAT(both.output, Contains("stoke-train: --dist-timeout, --zero: only under mpirun"));
  const test::ProcessResult masters = train("--zero 3 --amp bf16 --master-weights" + quick);
  CHECK_THAT(masters.output, Contains("stoke-train: --zero, --master-weights: only under mpirun"));
  const test::ProcessResult help = train("--help");
  CHECK_THAT(help.output, Contains("These flags mean nothing in one process, and are refused"));
}
