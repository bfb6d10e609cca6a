// Rank 0's module buffers (batch norm's running statistics and counters) into every rank's, as
// data-parallel training does before each training forward so that the replicas normalize alike
// (torch's DDP with broadcast_buffers=True). The buffers are packed per dtype and device, so one
// call is one broadcast per group, not one per buffer: a ResNet-18 has 60 buffers (half of them
// i64 batch counters) and 2 groups.
//
//   dist::BufferBroadcast buffers(*model);     // once: groups the module's buffers
//   if (model->is_training()) buffers(comm);   // collective, before each training forward
//
// DistributedDataParallel does this itself; a loop over dist::ZeroOptimizer calls it.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "dist/communicator.h"
#include "nn/module.h"

namespace stoke::dist {

class BufferBroadcast {
 public:
  // Holds the module's buffers (the tensors themselves: a buffer reassigned afterwards is not
  // seen) and one packed staging tensor per dtype and device.
  explicit BufferBroadcast(const nn::Module& module);
  // Collective: every rank's buffers become rank 0's (bit for bit).
  void operator()(Communicator& comm);
  // Broadcasts per call: the distinct (dtype, device) pairs among the buffers.
  size_t groups() const { return groups_.size(); }

 private:
  struct Group {
    std::vector<Tensor> buffers;
    std::vector<int64_t> offsets;
    Tensor flat;
  };
  std::vector<Group> groups_;
};

}  // namespace stoke::dist
