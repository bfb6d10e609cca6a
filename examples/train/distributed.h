// stoke-train under mpirun: one process per rank, each training on its shard of the data with the
// model wrapped in dist::DistributedDataParallel. Rank 0 alone prints, writes metrics and saves
// checkpoints; every rank reads them on --resume. Without an MPI launcher it is one process and
// nothing here communicates.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "data/sampler.h"
#include "dist/communicator.h"
#include "flags.h"

namespace stoke::train {

struct Distributed {
  std::unique_ptr<dist::Communicator> comm;  // null in a single process
  int rank = 0, size = 1, local_size = 1;    // local_size: ranks on this machine
  bool active() const { return size > 1; }
  bool root() const { return rank == 0; }
  // v summed elementwise over the ranks (in f64); unchanged in a single process.
  void sum(std::vector<double>& v) const;
  // Ends every rank of the job with `code` (MPI_Abort), so that no rank waits for one that failed;
  // returns in a single process.
  void abort_job(int code) const;
};

// Whether an MPI launcher (mpirun, srun with PMI/PMIx) started this process as one of several.
bool launched_as_mpi_job();

// Joins the job the launcher started (a dist::MpiCommunicator with --dist-timeout), or a single
// process. An error when launched as a job by a build without MPI.
Distributed join_job(const Flags& f);

// The test split's shard of rank `rank` of `size`: positions rank, rank + size, ... (no padding:
// every image is evaluated once; shards differ in size by at most one).
class ShardSampler : public data::Sampler {
 public:
  ShardSampler(int64_t n, int rank, int size);
  int64_t size() const override { return count_; }
  std::vector<int64_t> indices() const override;

 private:
  int64_t n_, count_;
  int rank_, size_;
};

}  // namespace stoke::train
