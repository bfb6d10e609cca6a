// Which allreduce to run: the engine's own ("native"), stoke's ring, binomial tree or recursive
// halving-doubling, or "auto", which picks one per message size from an alpha-beta-gamma cost
// model whose parameters are measured on this machine by a short calibration, once per
// communicator (docs/allreduce.md, "The tuner").
//
// The model (Hockney's alpha-beta, with gamma for the reduce arithmetic; Thakur, Rabenseifner and
// Gropp 2005) is built from three measured costs: X(m), one exchange step of stoke's send/recv
// moving m bytes each way (alpha + m beta); P(m), one message one way (half a ping-pong: the
// tree's and the fold's steps, where only one side sends); and R(m), reducing m bytes
// (m gamma). With S the segment size, a range of m bytes takes xfer(m) = floor(m/S) X(S) +
// X(m mod S) (the segments, the last one partial), and one(m) the same with P. For n bytes over p
// ranks (L = ceil(log2 p), p' the largest power of two <= p):
//   ring  2(p-1) xfer(n/p) + (p-1) R(n/p)                     = 2(p-1) alpha + 2(p-1)/p n beta
//                                                               + (p-1)/p n gamma in one segment
//   tree  2L one(n) + L R(n)                                  = 2L alpha + 2L n beta + L n gamma
//   rhd   sum over j = 1..log2 p' of 2 xfer(n/2^j) + R(n/2^j) = 2 log2 p' alpha + 2(p'-1)/p' n beta
//         + (p'-1)/p' n gamma, plus 2 one(n) + R(n) when p > p' (the fold)
//   native N(n), measured on the engine's own allreduce (its algorithm is the engine's choice,
//         which the model does not try to know)
// X, P, R and N are measured at a few sizes (8 B to CalibrationOptions::large_bytes) and taken as
// piecewise linear between them: an alpha and a beta per size range, since caches and the
// engine's protocols (MPI's eager and rendezvous sends) change both with the size; past the
// largest size, the last range's slope.
//
// Those composed formulas are the textbook's prediction, which the benchmark prints beside what
// it measures. The choice itself uses each algorithm's own alpha and beta per size range: the
// calibration also times every candidate (ring, tree, rhd and native, each call after a barrier,
// as the benchmark does) at the same sizes, and predict_* use those curves where they exist.
// Measured here, the composed formulas under-predicted stoke's algorithms by 2x to 4x at 64 KiB
// and 16 MiB (per-call costs and cache misses that an isolated exchange in a loop does not have),
// which would pick them where native was faster. Each figure is a median over repetitions on a
// rank, then the largest over ranks, so every rank holds the same model and makes the same choice
// (a rank choosing differently would deadlock the others).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/device.h"
#include "dist/collective_options.h"
#include "dist/communicator.h"

namespace stoke::dist {

enum class AllreduceAlgorithm { native, ring, tree, rhd, automatic };
// "native", "ring", "tree", "rhd", "auto".
const char* allreduce_algorithm_name(AllreduceAlgorithm algorithm);
// The names above; anything else is an error naming `what` (e.g. "--allreduce").
AllreduceAlgorithm parse_allreduce_algorithm(const std::string& name, const std::string& what);

// Seconds as a function of bytes: linear through (bytes, seconds) points taken in ascending
// order, extended past the last point with the last range's slope and below the first with the
// first range's (never below zero). line(alpha, beta) is alpha + n beta everywhere.
struct CostCurve {
  std::vector<std::pair<double, double>> points;
  double at(double bytes) const;
  static CostCurve line(double alpha_s, double beta_s);
  double alpha_s() const;  // the cost of the smallest message: at(first point)
  double beta_s() const;   // seconds per byte of the last range
};

struct AllreduceModel {
  int ranks = 1;
  bool on_cpu = true;  // calibrated with cpu tensors (else on the communicator's device)
  int64_t segment_bytes = int64_t{1} << 20;  // the algorithms' segment the costs assume
  CostCurve exchange;                        // X(m): one step of stoke's send/recv, both ways
  CostCurve oneway;                          // P(m): one message, one way
  CostCurve reduce;                          // R(m): reducing m bytes
  CostCurve native_allreduce, native_reduce_scatter, native_allgather;
  // Each candidate's own time by size, where the calibration measured it: the allreduce's
  // (native, ring, tree, rhd), and the reduce-scatter's and allgather's (native, ring, rhd) when
  // CalibrationOptions::scatter_gather. predict_* use these before the composed formulas.
  std::map<AllreduceAlgorithm, CostCurve> measured_allreduce, measured_reduce_scatter,
      measured_allgather;
  double calibration_s = 0;  // how long the calibration took (the slowest rank's wall time)
  // allreduce_choices(*this, 1 GiB), filled at the end of the calibration: choose_allreduce looks
  // a size up in it (a scan of a few entries) instead of predicting four curves on every call,
  // which cost auto ~0.2 us (10%) against native on an 8 B allreduce.
  std::vector<std::pair<int64_t, AllreduceAlgorithm>> allreduce_table;
};

// What the model predicts, in seconds, for n bytes (the tensor's; for reduce_scatter the input's,
// for allgather the output's): the algorithm's measured curve where the calibration timed it,
// else the composed formula (textbook_* below). AllreduceAlgorithm::automatic: the chosen one's.
double predict_allreduce(const AllreduceModel& m, AllreduceAlgorithm a, int64_t bytes);
double predict_reduce_scatter(const AllreduceModel& m, AllreduceAlgorithm a, int64_t bytes);
double predict_allgather(const AllreduceModel& m, AllreduceAlgorithm a, int64_t bytes);
// The cheapest by the model: native, ring, tree or rhd for allreduce; native, ring or rhd for the
// other two (a tree has no reduce-scatter). Ties go to the earlier in that order. For allreduce,
// the model's allreduce_table when it covers `bytes`.
AllreduceAlgorithm choose_allreduce(const AllreduceModel& m, int64_t bytes);
// The composed formulas alone (the textbook's alpha-beta-gamma prediction from X, P and R).
double textbook_allreduce(const AllreduceModel& m, AllreduceAlgorithm a, int64_t bytes);
AllreduceAlgorithm choose_reduce_scatter(const AllreduceModel& m, int64_t bytes);
AllreduceAlgorithm choose_allgather(const AllreduceModel& m, int64_t bytes);
// The allreduce chosen from 1 B up to max_bytes, as ranges: (first size, algorithm), the sizes
// scanned in steps of a factor 2 and each change refined to the byte by bisection.
std::vector<std::pair<int64_t, AllreduceAlgorithm>> allreduce_choices(const AllreduceModel& m,
                                                                      int64_t max_bytes);
// A few lines: the measured parameters and the choice by size.
std::string describe(const AllreduceModel& m);

struct CalibrationOptions {
  // The sizes timed: 8 B, 4 KiB, 64 KiB, 256 KiB, 1 MiB, 4 MiB, 16 MiB, 64 MiB, those up to
  // large_bytes (and it).
  int64_t large_bytes = int64_t{16} << 20;
  int reps = 7;                              // timed repetitions per measurement, after two untimed
  int64_t segment_bytes = int64_t{1} << 20;  // the segment of the algorithms the model is for
  // Time the candidates' reduce-scatters and allgathers too (ZeRO's collectives).
  bool scatter_gather = false;
};

// Measures the model now. Collective: every rank calls it at the same point of its issue order.
// Tensors live on `device` (the communicator's: cpu for MPI and in-process, the GPU for NCCL).
AllreduceModel calibrate_allreduce_model(Communicator& comm, Device device = Device::cpu(),
                                         const CalibrationOptions& options = {});
// The model cached on the communicator, calibrated on first use (collective then, as above; later
// calls are local). A model measured on another kind of device (cpu vs cuda), or without the
// reduce-scatters and allgathers asked for, is measured again.
std::shared_ptr<const AllreduceModel> allreduce_model(Communicator& comm,
                                                      Device device = Device::cpu(),
                                                      const CalibrationOptions& options = {});

// The collectives by algorithm: native is the communicator's own, automatic asks
// allreduce_model(comm, the tensor's device) and the choose_* above. Issue-ordered like any call.
void allreduce(Communicator& comm, Tensor& t, ReduceOp op, AllreduceAlgorithm algorithm,
               const CollectiveOptions& options = {});
// tree is refused (no tree form): native, ring, rhd or automatic.
void reduce_scatter(Communicator& comm, const Tensor& input, Tensor& output, ReduceOp op,
                    AllreduceAlgorithm algorithm, const CollectiveOptions& options = {});
void allgather(Communicator& comm, const Tensor& input, Tensor& output,
               AllreduceAlgorithm algorithm, const CollectiveOptions& options = {});

}  // namespace stoke::dist
