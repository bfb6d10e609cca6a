// stoke-train: trains a reference CNN on Fashion-MNIST (or MNIST) from the IDX files, packed
// shards or image folders, with the habits of a good training loop built in: a threaded data
// loader (uint8 batches, normalized here in one fused pass), progress bar with the data wait,
// evaluation in eval mode under no-grad, per-epoch summary, JSONL metrics, best and last
// checkpoints, exact mid-epoch resume, gradient accumulation, early stopping.
//
// This file is the run's outline; setup.cpp makes its parts, trainer.cpp trains, evaluate.cpp
// evaluates, checkpoints.cpp and metrics_records.cpp write its results.
//
// It is written against stoke's user API (stoke/stoke.h: stoke::, stoke::nn, stoke::data); the
// one ops:: call left is the device check in setup.cpp, which stoke:: has no equivalent of.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "flags.h"
#include "run_dir.h"
#include "setup.h"
#include "stoke/stoke.h"
#include "trainer.h"

namespace stoke::train {
namespace {

int run(Flags f) {
  if (f.recipe == "fast") apply_fast_recipe(f);
  const std::optional<Device> device = select_device(f);
  if (!device) return 2;
  if (f.tf32) set_allow_tf32(true);
  if (f.threads > 0) set_num_threads(f.threads);
  manual_seed(f.seed);

  // The run's files, before any data is read: an earlier run's results are not replaced without
  // --overwrite, the checkpoint directory must be writable, the metrics file must open.
  if (f.metrics.empty() && !f.checkpoint.empty())
    f.metrics = (std::filesystem::path(f.checkpoint) / "metrics.jsonl").string();
  if (const auto refusal = earlier_results(f)) {
    std::fprintf(stderr, "%s\n", refusal->c_str());
    return 2;
  }
  prepare_checkpoint_dir(f);
  MetricsLog metrics;
  if (!f.metrics.empty()) metrics.open(f.metrics, f.resume);

  Trainer trainer(f, *device, metrics);
  trainer.resume();
  const RunTotals totals = trainer.fit();
  metrics.close();
  std::printf("done: best test acc %.2f%% | total %.1f s | %.0f img/s training\n", totals.best_acc,
              totals.seconds,
              static_cast<double>(totals.images) / std::max(totals.train_seconds, 1e-9));
  return 0;
}

}  // namespace
}  // namespace stoke::train

int main(int argc, char** argv) {
  try {
    return stoke::train::run(stoke::train::parse_flags(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
