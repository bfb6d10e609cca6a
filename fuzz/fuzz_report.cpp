// libFuzzer harness: stoke-report's reader of stoke-train metrics files
// (apps/report/metrics_reader.cpp, compiled in from the program's own source). The input is
// the file's text; a stoke::Error is the expected outcome for bad input, anything else (an
// uncaught nlohmann exception, as `"loss":null` and `"step":"x"` used to raise, a crash, a
// sanitizer report) is a finding. What parses must give finite points only.
#include <cmath>
#include <cstdlib>
#include <string>

#include "apps/report/metrics_reader.h"
#include "core/error.h"
#include "fuzz/fuzz_util.h"

namespace {

void check_finite(const stoke::report::Points& points) {
  for (const auto& [x, y] : points)
    if (!std::isfinite(x) || !std::isfinite(y)) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = stoke::fuzz::write_input("metrics.jsonl", data, size);
  stoke::report::MetricsSeries m;
  try {
    m = stoke::report::read_metrics(path, "--metrics");
  } catch (const stoke::Error&) {
    return 0;
  }
  for (const auto* p :
       {&m.step_loss, &m.lr, &m.wait_ms, &m.eval_loss, &m.eval_acc, &m.epoch_train_loss,
        &m.epoch_test_loss, &m.epoch_train_acc, &m.epoch_test_acc})
    check_finite(*p);
  for (const auto& [name, ms] : m.phases)
    if (!std::isfinite(ms)) std::abort();
  return 0;
}
