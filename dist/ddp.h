// Data-parallel training (docs/design.md, "DistributedDataParallel"): PyTorch's
// DistributedDataParallel over any stoke Communicator. Every rank holds a replica of the module and
// runs forward and backward on its own slice of the batch; the gradients are averaged across ranks
// during backward, so after loss.backward() every rank holds the same averaged gradients and the
// optimizers step identically.
//
//   dist::DistributedDataParallel ddp(model, comm);
//   Tensor loss = cross_entropy(ddp(x), y);  // forward through the wrapper, not the module
//   loss.backward();                           // gradients averaged when this returns
//   optimizer.step();
//
// How: the gradients are packed into buckets (first 1 MiB, then 25 MiB, in reverse registration
// order, which is roughly the order backward produces them; after the first iteration rebuilt in
// the order they really became ready). A post-accumulate hook on each parameter copies its gradient
// into its bucket; when a bucket is full its allreduce starts on the communicator's worker thread
// while backward goes on (buckets start in order, the same on every rank), and the last gradient's
// hook waits for them all and writes the averages back into the parameters' .grad.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "dist/ring.h"
#include "dist/tuner.h"
#include "nn/module.h"

namespace stoke::dist {

struct DdpOptions {
  double bucket_cap_mb = 25.0;       // MiB per bucket
  double first_bucket_cap_mb = 1.0;  // the first bucket, small so that communication starts early
  // Parameters that get no gradient in an iteration are allowed (found by walking the graph from
  // the forward's output); without it such a parameter is an error at the next forward.
  bool find_unused_parameters = false;
  // Rank 0's buffers (batch-norm statistics) are broadcast before each forward in training mode,
  // as PyTorch does, so that every replica normalizes alike.
  bool broadcast_buffers = true;
  // Which allreduce averages the buckets (dist/tuner.h): the engine's own, stoke's ring, tree or
  // halving-doubling, or automatic: chosen per bucket size by the tuner's model, which the
  // constructor calibrates (a collective) unless the communicator has one.
  AllreduceAlgorithm algorithm = AllreduceAlgorithm::native;
  RingOptions ring = {};       // stoke's algorithms' segments and traces
  bool record_events = false;  // keep the order of gradient and bucket events (events())
};

// One step of the gradient synchronization, in the order it happened (options.record_events).
struct DdpEvent {
  enum Kind { grad_ready, allreduce_launched, allreduce_started, allreduce_finished };
  Kind kind;
  int64_t index;  // the parameter (grad_ready) or the bucket
};

class DistributedDataParallel {
 public:
  // Checks that every rank has the same parameter and buffer names, dtypes and shapes (an error
  // naming the first difference on every rank, never a hang), then broadcasts rank 0's values.
  // The module and the communicator must outlive this object.
  DistributedDataParallel(std::shared_ptr<nn::Module> module, Communicator& comm,
                          DdpOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  // The module's forward; prepares the gradient synchronization of the backward that follows.
  Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }

  nn::Module& module() const { return *module_; }
  const std::shared_ptr<nn::Module>& module_ptr() const { return module_; }
  // The wrapped module's keys, without a "module." prefix.
  nn::NamedTensors state_dict() const { return module_->state_dict(); }
  Communicator& communicator() const { return comm_; }

  // Gradient accumulation: forward and backward inside no_sync() accumulate local gradients
  // without communicating; the next iteration outside it averages the accumulated sums.
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& ddp);
    ~NoSync();
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool previous_;
  };
  [[nodiscard]] NoSync no_sync() { return NoSync(*this); }

  // Inspection (tests, docs): the parameter names of each bucket in launch order; how many bucket
  // allreduces have been issued; the recorded events.
  std::vector<std::vector<std::string>> bucket_parameter_names() const;
  int64_t allreduce_count() const;
  std::vector<DdpEvent> events() const;

  struct State;  // shared with the parameters' hooks, which outlive nothing they point to

 private:
  std::shared_ptr<nn::Module> module_;
  Communicator& comm_;
  std::shared_ptr<State> state_;
};

}  // namespace stoke::dist
