// Shared by bench/allreduce.cpp (measurement, tables, the MPI engine), bench/allreduce_nccl.cpp
// (the NCCL engine) and bench/allreduce_model.cpp (the alpha-beta model fitted to the measured
// ring and its projections to many ranks).
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "dist/communicator.h"
#include "dist/tuner.h"

namespace stoke::bench {

struct AllreduceArgs {
  int64_t min_bytes = 8;
  int64_t max_bytes = int64_t{256} << 20;
  int step_factor = 4;
  DType dtype = DType::f32;
  int iters = 200;  // the most timed iterations per point; exactly this many with --iters
  bool iters_given = false;
  int warmup = 3;
  // Without --iters, a point's timed iterations stop near this many seconds (at least 5 of
  // them): 20 iterations of 256 MiB at 4 ranks on 2 cores would take minutes.
  double budget_s = 2.0;
  int64_t segment_bytes = int64_t{1} << 20;  // the algorithms' pipelining unit
  bool check_args = true;                    // MpiOptions::check_args for the native collectives
  bool quick = false;
  std::string engine = "mpi";  // mpi | nccl
  int gpus = 0;                // nccl outside mpirun: GPUs (threads) to use; 0 = all
  // The algorithms measured, in this order: native, ring, ring_blocking (the ring without
  // pipelining), tree, rhd, auto.
  std::vector<std::string> algos = {"native", "ring", "ring_blocking", "tree", "rhd", "auto"};
};

// One row of the table: an algorithm at one size.
struct AllreduceRow {
  std::string algo;  // native, ring, ring_blocking, tree, rhd, auto
  int64_t bytes = 0, count = 0;
  double seconds = 0;  // median over iterations of the slowest rank
  int iters = 0;
  int64_t wrong = 0;     // summed over ranks
  int64_t messages = 0;  // point-to-point messages one allreduce sends, most over the ranks
  std::string chosen;    // auto: the algorithm the tuner picked
};

// The tuner's report (bench/allreduce_tuner.cpp): auto against the best and against native per
// size and the goal's verdict, the pipelined ring against the blocking one, and the measured
// crossovers of each pair of algorithms against the model's; returns its JSON object.
std::string print_tuner_report(std::ostream& os, const std::vector<AllreduceRow>& rows,
                               const dist::AllreduceModel& model, int ranks);
// The calibrated model as a JSON object.
std::string model_json(const dist::AllreduceModel& model);

// One rank's view of the job: its communicator, where its tensors live, the engine's name for the
// header, and what makes a timed collective finished on this rank (a device's calls return once
// queued: synchronize its stream; null on the CPU).
struct AllreduceJob {
  dist::Communicator* comm = nullptr;
  Device device = Device::cpu();
  std::string engine;
  std::function<void()> sync;
};

// The measurement on one rank (rank 0 prints); returns the exit code (1 when any #wrong).
int run_allreduce_bench(const AllreduceJob& job, const AllreduceArgs& a);

#if defined(STOKE_BENCH_NCCL)
// --engine nccl: under mpirun one process per GPU (NCCL's id sent over MPI), else one thread per
// GPU of this process; runs run_allreduce_bench on each rank.
int run_allreduce_bench_nccl(const AllreduceArgs& a);
#endif

// One measured allreduce: `bytes` reduced over the job's ranks in `seconds` (median over the
// iterations of the slowest rank's time).
struct AllreducePoint {
  int64_t bytes = 0;
  double seconds = 0;
};

// T(S) = steps * alpha + bytes_moved * beta fitted to the ring's points, where a ring of n ranks
// takes steps = 2(n-1) and every rank sends bytes_moved = 2(n-1)/n * S.
struct RingFit {
  bool ok = false;
  std::string why;     // when !ok: why there is no fit (one rank, too few points, ...)
  double alpha_s = 0;  // latency per step
  double beta_s = 0;   // seconds per byte moved (1 / bandwidth)
  int points = 0;
  double max_rel_err = 0;  // largest |model - measured| / measured over the points
};

// Weighted least squares on relative residuals (each point's weight 1/T^2), so that 8 B and
// 256 MiB count alike; an unweighted fit would be all large sizes and put alpha anywhere.
RingFit fit_ring(const std::vector<AllreducePoint>& ring, int ranks);

struct ProjectionOptions {
  double bytes = 100e6;           // a 100 MB gradient (ResNet-50's is ~100 MB in f32)
  double alpha_assumed_s = 5e-6;  // per-step latency assumed for a GPU collective library
  int min_ranks = 8, max_ranks = 1024;
  std::string measured_over = "MPI over shared memory, stoke's send/recv";  // the fit's engine
};

// A text table with every column right-aligned (bench::Table left-aligns its first two columns,
// which here are numbers too): a header, a rule, the rows.
void print_table(std::ostream& os, const std::vector<std::string>& header,
                 const std::vector<std::vector<std::string>>& rows, const std::string& indent = "");

// Prints the fit (measured) and the ring and tree times it projects for ranks = 8 ... 1024 at
// NVLink and InfiniBand bandwidths (projected), to `os`; returns the "model" JSON object.
std::string print_model(std::ostream& os, const RingFit& fit, int ranks,
                        const ProjectionOptions& options = {});

}  // namespace stoke::bench
