// Shared by bench/allreduce.cpp (measurement, tables) and bench/allreduce_model.cpp (the alpha-beta
// model fitted to the measured ring and its projections to many ranks).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace stoke::bench {

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
