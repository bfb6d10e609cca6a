// ZeRO (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter
// Models"): a data-parallel optimizer whose state is sharded over the ranks (docs/design.md,
// "ZeRO"). It replaces DistributedDataParallel and the optimizer together:
//
//   dist::ZeroOptimizer opt(model->parameters(), comm, [](std::vector<optim::ParamGroup> g) {
//     return std::make_unique<optim::AdamW>(std::move(g), optim::AdamWOptions{.lr = 1e-3});
//   }, {.stage = 2});
//   Tensor loss = cross_entropy(model->forward(x), y);  // the module itself, no wrapper
//   loss.backward();                                     // stage 2: reduce-scatters as it goes
//   opt.step();                                          // steps this rank's shard, all-gathers
//   opt.zero_grad();
//
// Layout. The parameters are packed, per dtype and device, into one flat buffer and rebound as
// views into it (the module's tensors keep their identity, hooks and names). The buffer is cut
// into buckets (bucket_cap_mb, in reverse registration order: roughly the order backward produces
// gradients); bucket b of n_b elements is padded to N * c_b with c_b = ceil(n_b / N), and rank r
// owns the r-th c_b elements of every bucket. So any parameter count shards over any number of
// ranks, and the padding is at most N - 1 elements per bucket.
//
// The update rule is the wrapped optimizer's, unchanged: the factory builds it over the pieces of
// the parameters that this rank owns (1-D views into the flat buffer, one per parameter that
// meets the shard), so it keeps state for 1/N of the parameters only.
//
// Stage 1: each parameter's gradient is added into a full-size flat gradient buffer as backward
// produces it (and the parameter's .grad is released); step() reduce-scatters (averages) each
// bucket to its owners. Stage 2: the gradients go into a small pool of bucket buffers (normally
// two) and each bucket is reduce-scattered on the communicator's worker as soon as its last
// gradient arrives, overlapping backward; a rank keeps only its own shard of the gradients. Both
// then step the shard and all-gather the updated parameters bucket by bucket.
//
// Stage 3 (as FSDP's full sharding): the parameters live sharded too. Between steps a rank holds
// only its chunks of each bucket; a parameter's tensor keeps its handle, shape and dtype, but its
// storage is released (reading it is an error). ZeroOptions::module names the model: a forward
// pre-hook on each of its modules that owns parameters all-gathers their buckets (and starts the
// next `prefetch` buckets' gathers on the communicator's worker while it computes), its forward
// hook releases them again once every module of the bucket has run (reshard_after_forward) and
// hooks the module's output, whose gradient arriving gathers them once more for the module's
// backward. Gradients are reduce-scattered as in stage 2, and a bucket is released as soon as its
// last gradient is in. step() steps the shards and gathers nothing: the next forward does.
// full_parameters() gathers everything for a while (saving or loading a checkpoint).
//
// After backward the parameters have no .grad (their gradients are in the flat buffers): clip
// with clip_grad_norm_() here, not nn::optim::clip_grad_norm_. Loss scaling works as on any
// optimizer: GradScaler::unscale_ and step() take this rank's averaged gradient shards
// (gradients_to_unscale()), and the scaler's found_inf_reducer (a MAX allreduce) makes every rank
// skip the same steps, as under DDP.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "dist/ddp.h"
#include "dist/ring.h"
#include "nn/optim/optimizer.h"

namespace stoke::dist {

struct ZeroOptions {
  int stage = 1;                // 1: optimizer state sharded; 2: gradients too; 3: parameters too
  double bucket_cap_mb = 25.0;  // MiB per bucket (a parameter larger than it is a bucket alone)
  // Stage 2: bucket buffers in the pool; a bucket whose gradients arrive while every buffer is
  // still being filled gets a new one (the pool grows; memory_report() counts it).
  int comm_buffers = 2;
  // The reduce-scatter's and all-gather's algorithm (dist/tuner.h): native, ring, rhd, or
  // automatic (per bucket size, calibrated by the constructor); a tree has no such form.
  AllreduceAlgorithm algorithm = AllreduceAlgorithm::native;
  RingOptions ring = {};             // stoke's algorithms' segments and traces
  bool broadcast_parameters = true;  // start every rank from rank 0's parameters, as DDP does
  // Stage 3: the model whose modules' forward hooks gather and release the parameters (required;
  // every parameter must be one of its modules' own, and the model must outlive the optimizer).
  // Call the model and its children through operator(), as the zoo does: forward() runs no hooks.
  nn::Module* module = nullptr;
  // f16/bf16 parameters: the wrapped optimizer steps f32 copies of this rank's shards (the master
  // weights, with f32 copies of the gradient shards) and the parameters get their rounding, as
  // Megatron's and DeepSpeed's mixed-precision optimizers do; false steps the half-precision
  // shards themselves (each update rounded to the parameter's precision).
  bool master_weights = true;
  int prefetch = 1;                   // stage 3: buckets gathered ahead of the module that runs
  bool reshard_after_forward = true;  // stage 3: false keeps them from forward until backward
};

// Builds the wrapped optimizer over parameter groups (the same factory builds it once over the
// whole parameters, to learn each group's learning rate and weight decay, then over the shard).
using OptimizerFactory =
    std::function<std::unique_ptr<nn::optim::Optimizer>(std::vector<nn::optim::ParamGroup> groups)>;

// Bytes this rank holds, from the storages' allocated sizes (one count per storage, however
// many views share it).
struct ZeroMemoryReport {
  int64_t parameter_bytes = 0;  // the flat parameter buffers (padding included); stage 3: shards
  int64_t gradient_bytes = 0;   // stage 1: full flat gradients; stage 2: this rank's shard
  int64_t optimizer_state_bytes = 0;  // the wrapped optimizer's state (its shard)
  int64_t master_bytes = 0;  // f16/bf16 parameters: the f32 master shards and their gradients
  int64_t communication_bytes = 0;  // bucket buffers and the chunk staging buffers
  // Stage 3: the parameters gathered now (0 between steps) and the most ever gathered at once
  // (the working set, not in total()).
  int64_t gathered_bytes = 0;
  int64_t peak_gathered_bytes = 0;
  int64_t parameters = 0;         // Ψ, the parameters' elements
  int64_t padded_parameters = 0;  // Ψ + padding: the sum over buckets of N * c_b
  int64_t shard_parameters = 0;   // this rank's elements: the sum of c_b
  int64_t owned_parameters = 0;   // of those, parameters' (not padding): what it steps
  int64_t buckets = 0;
  int64_t largest_bucket_bytes = 0;  // padded
  int64_t storages = 0;              // allocations the byte counts come from
  int64_t total() const {
    return parameter_bytes + gradient_bytes + optimizer_state_bytes + master_bytes +
           communication_bytes + gathered_bytes;
  }
};

class ZeroOptimizer : public nn::optim::Optimizer {
 public:
  struct State;  // shared with the parameters' and modules' hooks

  // Collective: every rank must construct it with the same parameter shapes and dtypes, in the
  // same order, and the same options. The parameters, the communicator and the factory's
  // optimizer type must outlive it.
  ZeroOptimizer(std::vector<nn::optim::ParamGroup> groups, Communicator& comm,
                const OptimizerFactory& make, ZeroOptions options = {});
  ZeroOptimizer(std::vector<Tensor> params, Communicator& comm, const OptimizerFactory& make,
                ZeroOptions options = {});
  ~ZeroOptimizer() override;
  ZeroOptimizer(const ZeroOptimizer&) = delete;
  ZeroOptimizer& operator=(const ZeroOptimizer&) = delete;

  // Collective. Reduce-scatters what is left of the gradients, steps this rank's shard with the
  // live learning rates and weight decays (schedulers work as on any optimizer), all-gathers
  // (stages 1 and 2; stage 3 leaves that to the next forward).
  void step() override;
  // Zeroes the flat gradients (accumulation across backward passes adds into them until then).
  void zero_grad() override;

  // Collective: the global L2 norm of the averaged gradients (each rank's shard squared, summed
  // over the ranks), scaling them to at most max_norm; returns the norm before clipping (a
  // one-element f64 CPU tensor: the norm is read to compute the coefficient).
  Tensor clip_grad_norm_(double max_norm) override;
  // Collective (the reductions of this step complete first): this rank's averaged gradient
  // shards, padding included (zeros), for the GradScaler to unscale and check; with master
  // weights their f32 copies, which step() reads (a half gradient unscaled in place would
  // underflow, which is why torch's GradScaler refuses f16 gradients).
  std::vector<Tensor> gradients_to_unscale() override;

  // Collective: the wrapped optimizer's state for the whole parameters, with the keys that the
  // unsharded optimizer uses ("state.<i>.exp_avg", ...), gathered onto every rank (rank 0 writes
  // it). Loads into a plain optimizer, or into a ZeroOptimizer at any world size.
  nn::NamedTensors state_dict() const override;
  bool state_dict_is_collective() const override { return true; }
  // Takes this rank's slices of a consolidated state (any world size's, or a plain optimizer's).
  // Master weights start again from the parameters as they are now (the state holds none).
  void load_state_dict(const nn::NamedTensors& state) override;

  // Stage 3: every parameter whole until the guard goes (collective, on every rank), to read the
  // model outside forward and backward (saving a checkpoint, evaluating by hand) or, with
  // writeback, to write it (loading one): the guard's end then keeps each rank's chunks of what
  // the parameters hold. Stages 1 and 2 keep the parameters whole anyway, and the guard only
  // restarts the master weights (f16/bf16 parameters) from them at its end, with writeback: write
  // the parameters under it (or load an optimizer state after) so that the masters follow.
  class FullParameters {
   public:
    FullParameters(FullParameters&& other) noexcept;
    FullParameters& operator=(FullParameters&&) = delete;
    ~FullParameters();

   private:
    friend class ZeroOptimizer;
    FullParameters(std::shared_ptr<State> state, bool writeback);
    std::shared_ptr<State> state_;
    bool writeback_ = false;
  };
  [[nodiscard]] FullParameters full_parameters(bool writeback = false);

  ZeroMemoryReport memory_report() const;
  int stage() const;
  nn::optim::Optimizer& inner() const;  // the wrapped optimizer over this rank's pieces
  int64_t reduce_scatter_count() const;
  int64_t allgather_count() const;  // stage 3: the buckets' gathers so far

 private:
  std::shared_ptr<State> state_;
};

// A factory of optimizers of `plain`'s kind and options (SGD, Adam or AdamW) over other groups;
// an error naming the kind for others.
OptimizerFactory same_kind_as(const nn::optim::Optimizer& plain);

// A ZeroOptimizer over `plain`'s parameter groups (with their live learning rates and weight
// decays), stepping with its kind and options: the way to shard an optimizer built elsewhere.
// `plain` must not have stepped yet (its state would be dropped): load a checkpoint afterwards.
std::unique_ptr<ZeroOptimizer> make_zero_optimizer(const nn::optim::Optimizer& plain,
                                                   Communicator& comm, ZeroOptions options = {});

// full_parameters() of a ZeroOptimizer, nothing for any other optimizer: what a trainer holds
// around reading (or, with writeback, writing) the model's parameters.
std::optional<ZeroOptimizer::FullParameters> full_parameters_of(nn::optim::Optimizer& opt,
                                                                bool writeback = false);

// "zero1", "zero2", "zero3": the stage's name in bench output and the epoch line.
std::string zero_stage_name(int stage);

// One line on what this rank holds, "zero2 memory per rank: optimizer state 0.12 MiB, ..." (no
// newline), for a ZeroOptimizer; empty for any other optimizer.
std::string memory_line(const nn::optim::Optimizer& opt);

}  // namespace stoke::dist
