// stoke-report's reader of a stoke-train metrics file (JSONL, apps/train/metrics_records.h):
// the series its charts draw. The file is read as what stoke-train writes, and anything else is
// an error naming the file and the line: a line that is not a JSON object, a record without a
// string "type", a value of the wrong JSON type (a string where a number belongs). A null value
// (what stoke-train writes for a non-finite number) or an absent one gives no point; records of a
// type this reader does not know (a newer stoke-train's) are skipped. fuzz/fuzz_report.cpp runs it
// on arbitrary bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace stoke::report {

using Points = std::vector<std::pair<double, double>>;

struct MetricsSeries {
  Points step_loss, lr, wait_ms;  // per step record, against the optimizer step
  Points eval_loss, eval_acc;     // per eval record, against the optimizer step
  Points epoch_train_loss, epoch_test_loss, epoch_train_acc, epoch_test_acc;  // per epoch
  // The last profile record's step breakdown (ms per step, in the order written) and its steps.
  std::vector<std::pair<std::string, double>> phases;
  int64_t profiled_steps = 0;
  // Its communication per step (ms): the collectives' time and the part the step waited for;
  // both absent (nullopt) when no collective ran in a profiled step.
  std::optional<double> comm_ms, exposed_comm_ms;
  int64_t missing = 0;  // values that were null or absent: no point drawn for them
};

// Parses the text of a metrics file; `path` names it in errors. Throws stoke::Error.
MetricsSeries parse_metrics(const std::string& text, const std::string& path);

// Reads the metrics file at `path` (a FIFO or a directory is refused at once: core/files.h) and
// parses it. `what` names where the path came from ("--metrics").
MetricsSeries read_metrics(const std::string& path, const std::string& what);

}  // namespace stoke::report
