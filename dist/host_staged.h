// A communicator for device tensors over an engine that moves host memory (MPI, the in-process
// one): each call copies its device tensors to the host, runs the engine's call, and copies the
// result back. PyTorch's gloo backend does the same for CUDA tensors. It is the data-parallel path
// for a build without NCCL (and for stoke-train on cuda/emu under mpirun, where the emulator's
// NCCL, ranks as threads of one process, cannot reach other processes); with NCCL, use
// dist::NcclCommunicator, which keeps the data on the GPU.
//
//   dist::MpiCommunicator mpi;
//   dist::HostStagedCommunicator comm(mpi);  // takes cpu and cuda tensors
//   comm.allreduce(grad_on_gpu, dist::ReduceOp::avg);
//
// Host tensors pass straight through. Each staged call waits for the device (the copy to the host
// does), so this costs a synchronization per call and two copies of the data.
#pragma once

#include <vector>

#include "dist/communicator.h"

namespace stoke::dist {

class HostStagedCommunicator final : public Communicator {
 public:
  // `host` must outlive this communicator, and is driven through it alone while it is in use.
  explicit HostStagedCommunicator(Communicator& host) : host_(host) {}
  ~HostStagedCommunicator() override;

  int rank() const override { return host_.rank(); }
  int size() const override { return host_.size(); }
  int local_rank() const override { return host_.local_rank(); }
  Communicator& host() const { return host_; }

 protected:
  STOKE_COMMUNICATOR_ENGINE_OVERRIDES

 private:
  Communicator& host_;
  struct Staged {
    int64_t id;
    Request host_request;
    Tensor t, host;  // the caller's tensor and its host copy (the same tensor on the host)
    bool recv;
  };
  std::vector<Staged> staged_;
  int64_t next_id_ = 0;
};

}  // namespace stoke::dist
