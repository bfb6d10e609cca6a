#include "distributed.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "core/error.h"
#include "dist/host_staged.h"
#include "dist/launch.h"
#include "stoke/stoke.h"
#if defined(STOKE_HAS_MPI)
#include "dist/mpi.h"
#endif
#if defined(STOKE_HAS_NCCL)
#include "dist/cuda/nccl.h"
#endif

namespace stoke::train {

void Distributed::sum(std::vector<double>& v) const {
  if (!active() || v.empty()) return;
  Tensor t = from_vector<double>(v, {static_cast<int64_t>(v.size())}, {.dtype = DType::f64});
  comm->allreduce(t, dist::ReduceOp::sum);
  v = t.to_vector<double>();
}

void Distributed::attach_device(Device device, const Flags& f) {
  if (!active() || device.is_cpu()) return;
#if defined(STOKE_HAS_NCCL)
  const bool nccl = f.dist_backend != "mpi";
#else
  STOKE_CHECK(f.dist_backend != "nccl", "stoke-train",
              "--dist-backend nccl: this build has no NCCL (install NCCL beside the CUDA toolkit "
              "and configure again), use --dist-backend mpi");
  const bool nccl = false;
#endif
  if (nccl) {
#if defined(STOKE_HAS_NCCL)
    const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(f.dist_timeout * 1000));
    device_comm = dist::NcclCommunicator::bootstrap(*comm, device.index, {.timeout = timeout});
    engine = "NCCL";
#endif
  } else {
    device_comm = std::make_unique<dist::HostStagedCommunicator>(*comm);
    engine = "MPI (staged through host memory)";
  }
}

void Distributed::abort_job(int code) const {
  if (!active()) return;
#if defined(STOKE_HAS_MPI)
  MPI_Abort(MPI_COMM_WORLD, code);
#endif
  std::_Exit(code);
}

Distributed join_job(const Flags& f) {
  Distributed d;
  if (dist::launcher_world_size() <= 1) return d;  // one process: no communicator
#if defined(STOKE_HAS_MPI)
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(f.dist_timeout * 1000));
  auto comm = std::make_unique<dist::MpiCommunicator>(dist::MpiOptions{.timeout = timeout});
  d.rank = comm->rank();
  d.size = comm->size();
  d.local_rank = comm->local_rank();
  // Ranks per machine, for the default thread count: the largest local rank + 1 (machines are
  // assumed alike).
  Tensor local =
      from_vector<double>({static_cast<double>(comm->local_rank())}, {1}, {.dtype = DType::f64});
  comm->allreduce(local, dist::ReduceOp::max);
  d.local_size = static_cast<int>(local.to_vector<double>()[0]) + 1;
  d.comm = std::move(comm);
  return d;
#else
  (void)f;
  STOKE_FAIL("stoke-train",
             "started by an MPI launcher as one of several ranks, but this build has ",
             "no MPI (install libopenmpi-dev and openmpi-bin, then configure again)");
#endif
}

ShardSampler::ShardSampler(int64_t n, int rank, int size)
    : n_(n), count_(n > rank ? (n - rank + size - 1) / size : 0), rank_(rank), size_(size) {
  STOKE_CHECK(size >= 1 && rank >= 0 && rank < size, "ShardSampler",
              "expected 0 <= rank < size, got rank ", rank, " of ", size);
}

std::vector<int64_t> ShardSampler::indices() const {
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(count_));
  for (int64_t i = rank_; i < n_; i += size_) out.push_back(i);
  return out;
}

}  // namespace stoke::train
