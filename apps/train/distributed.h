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
  // For a model on a GPU: NCCL, or `comm` staged through the host (attach_device); else null.
  std::unique_ptr<dist::Communicator> device_comm;
  std::string engine = "MPI";  // what averages the gradients, for the run line
  int rank = 0, size = 1, local_rank = 0, local_size = 1;  // local_*: on this machine
  bool active() const { return size > 1; }
  bool root() const { return rank == 0; }
  // The communicator that averages the model's gradients.
  dist::Communicator& gradient_comm() const { return device_comm ? *device_comm : *comm; }
  // In a job whose model lives on `device` (cuda): the device communicator --dist-backend asks
  // for. Collective. An error when the build lacks the backend asked for.
  void attach_device(Device device, const Flags& f);
  // v summed elementwise over the ranks (in f64); unchanged in a single process.
  void sum(std::vector<double>& v) const;
  // Ends every rank of the job with `code` (MPI_Abort), so that no rank waits for one that failed;
  // returns in a single process.
  void abort_job(int code) const;
};

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
