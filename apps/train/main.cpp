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
#include <string>
#include <vector>

#include "distributed.h"
#include "flags.h"
#include "run_dir.h"
#include "setup.h"
#include "stoke/stoke.h"
#include "trainer.h"

namespace stoke::train {
namespace {

// In a job every rank must take the same way at a decision point: the first nonzero status of
// any rank (2 where this rank was fine), or 0.
int agree(const Distributed& dist, int status) {
  std::vector<double> v{status != 0 ? 1.0 : 0.0};
  dist.sum(v);
  if (v[0] == 0) return 0;
  return status != 0 ? status : 2;
}

int run(Flags f, Distributed& dist) {
  if (!dist.root()) {
    // Only rank 0 reports; the other ranks' errors still reach stderr, with their rank.
    std::fflush(stdout);
    if (!std::freopen("/dev/null", "w", stdout))
      std::fprintf(stderr, "stoke-train: rank %d: stdout\n", dist.rank);
    f.progress = false;
  }
  // One GPU per rank: --device cuda means the local rank's (cuda:I names one for every rank).
  if (dist.active() && f.device == "cuda") f.device = "cuda:" + std::to_string(dist.local_rank);
  std::optional<Device> device = select_device(f);
  if (const int status = agree(dist, device ? 0 : 2)) return status;
  // NCCL's setup is collective: a rank that fails in it ends the job (main's catch), as the
  // others would wait for it.
  dist.attach_device(*device, f);
  if (f.tf32) set_allow_tf32(true);
  if (f.threads > 0)
    set_num_threads(f.threads);
  else if (dist.local_size > 1)
    set_num_threads(std::max(1, num_threads() / dist.local_size));  // the cores, shared
  manual_seed(f.seed);

  // The run's files, before any data is read: an earlier run's results are not replaced without
  // --overwrite, the checkpoint directory must be writable, the metrics file must open. Rank 0
  // alone writes them; the job stops together if it cannot.
  if (f.metrics.empty() && !f.checkpoint.empty())
    f.metrics = (std::filesystem::path(f.checkpoint) / "metrics.jsonl").string();
  int status = 0;
  std::string error;
  MetricsLog metrics;
  if (dist.root()) {
    try {
      check_run_outputs(f);
      if (auto refusal = earlier_results(f); refusal || (refusal = resume_refusal(f))) {
        error = *refusal;
        status = 2;
      } else {
        prepare_checkpoint_dir(f);
        if (!f.metrics.empty()) metrics.open(f.metrics, f.resume, metrics_origin(f));
        prepare_profile_output(f);
      }
    } catch (const std::exception& e) {
      error = e.what();
      status = 1;
    }
  }
  if (!error.empty()) std::fprintf(stderr, "%s\n", error.c_str());
  if ((status = agree(dist, status))) return status;
  if (dist.active())
    std::printf(
        "dist: %d ranks (%d on this machine) over %s, %s %s, timeout %g s, %d threads per "
        "rank; batch %lld per rank (%lld in all)\n",
        dist.size, dist.local_size, dist.engine.c_str(),
        f.zero ? ("ZeRO-" + std::to_string(f.zero) + ", collectives").c_str() : "allreduce",
        f.allreduce.c_str(), f.dist_timeout, num_threads(), static_cast<long long>(f.batch),
        static_cast<long long>(f.batch * dist.size));

  // Setting up (the model's upload, a resumed checkpoint) waits for the device on purpose: only
  // the training steps are held to STOKE_SYNC_DEBUG.
  std::optional<Trainer> trainer;
  {
    const ExpectedSync setting_up("setting up the run");
    trainer.emplace(f, *device, metrics, dist);
    trainer->resume();
  }
  const RunTotals totals = trainer->fit();
  metrics.close();
  std::vector<double> images{static_cast<double>(totals.images)};
  dist.sum(images);
  std::printf("done: best test acc %.2f%% | total %.1f s | %.0f img/s training\n", totals.best_acc,
              totals.seconds, images[0] / std::max(totals.train_seconds, 1e-9));
  return 0;
}

}  // namespace
}  // namespace stoke::train

int main(int argc, char** argv) {
  stoke::train::Distributed dist;
  try {
    const stoke::train::Flags flags = stoke::train::parse_flags(argc, argv);
    dist = stoke::train::join_job(flags);
    if (const std::string only = stoke::train::distributed_only_flags(flags);
        !only.empty() && !dist.active()) {
      std::fprintf(stderr,
                   "stoke-train: %s: only under mpirun, in a job of 2 or more ranks, does this "
                   "mean something; this is one process, where it would be ignored. Drop it, or "
                   "start the run with mpirun -np N.\n",
                   only.c_str());
      return 2;
    }
    return stoke::train::run(flags, dist);
  } catch (const std::exception& e) {
    if (dist.active()) {
      // One rank's failure ends the job at once: the others would wait in the next collective.
      std::fprintf(stderr, "stoke-train: rank %d of %d: %s\n", dist.rank, dist.size, e.what());
      dist.abort_job(1);
    }
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
