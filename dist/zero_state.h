// ZeroOptimizer's internals, shared by dist/zero.cpp (layout, hooks, step) and
// dist/zero_state.cpp (consolidated state_dict, memory report). Not part of the public API.
#pragma once

#include <memory>
#include <vector>

#include "dist/zero.h"
#include "nn/module.h"

namespace stoke::dist {

inline constexpr const char* kZeroOp = "stoke::ZeroOptimizer";

// Stage 2: one bucket's gradients on their way to the reduce-scatter.
struct CommBuffer {
  Tensor in = {};   // N * c elements: the bucket's gradients, padded
  Tensor out = {};  // c elements: this rank's averaged chunk
  int64_t bucket = -1;
};

// The parameters of one dtype and device, packed.
struct Flat {
  DType dtype = DType::f32;
  Device device = Device::cpu();
  int64_t padded = 0;         // elements: the sum of its buckets' N * c_b
  int64_t shard = 0;          // this rank's elements: the sum of c_b
  int64_t largest_chunk = 0;  // max c_b
  Tensor params = {};         // padded elements; the parameters are views into it (stages 1, 2)
  Tensor shard_params = {};   // stage 3: shard elements, bucket b's chunk at its shard_begin
  std::shared_ptr<Storage> released = {};  // stage 3: 0 bytes, a released parameter's storage
  Tensor grads = {};        // stage 1: padded elements, this rank's chunks averaged by step
  Tensor shard_grads = {};  // stages 2, 3: shard elements, bucket b's chunk at its shard_begin
  Tensor chunk_tmp = {};    // largest_chunk: the reduce-scatter's output, the all-gather's input
  // Master weights (f16/bf16 flats): f32 shard elements, bucket b's chunk at its shard_begin, and
  // f32 copies of the gradient shard, which the wrapped optimizer steps and reads.
  Tensor master = {};
  Tensor master_grads = {};
  std::vector<CommBuffer> pool = {};  // stages 2, 3
};

struct Bucket {
  size_t flat = 0;
  int64_t begin = 0;        // in the flat buffer
  int64_t numel = 0;        // its parameters' elements, unpadded
  int64_t chunk = 0;        // c_b = ceil(numel / N): each rank's share
  int64_t shard_begin = 0;  // where this rank's chunk goes in the flat's shard
  std::vector<size_t> params = {};
  int64_t pending = 0;  // stage 2: gradients not yet arrived this backward
  int64_t buffer = -1;  // stage 2: its CommBuffer in the flat's pool, or -1
  Work work = {};
  // Stage 3: the whole bucket while gathered (N * c elements; its parameters are views into it),
  // its gather in flight, and its modules' forwards: how many there are, and left this pass.
  Tensor gathered = {};
  Work gather = {};
  bool bound = false;  // its parameters point into `gathered`
  int64_t forward_users = 0, forward_left = 0;
  size_t forward_position = 0;  // in State::forward_order
};

// Stage 3: a module that owns parameters, and the buckets they lie in.
struct Unit {
  nn::Module* module = nullptr;
  std::vector<size_t> buckets = {};
  int64_t pre_hook = -1, post_hook = -1;
};

// The part of one parameter that this rank owns: a 1-D view of the flat parameters, the tensor
// that the wrapped optimizer steps.
struct Piece {
  size_t param = 0;
  int64_t param_offset = 0;  // where it starts within the parameter (flattened)
  int64_t chunk_offset = 0;  // where it starts within this rank's chunk of the bucket
  int64_t numel = 0;
  Tensor tensor = {};
};

struct ZeroOptimizer::State {
  Communicator* comm = nullptr;
  ZeroOptions options;
  int rank = 0, size = 1;
  std::vector<Tensor> params;  // the outer optimizer's, in state order
  std::vector<Flat> flats;
  std::vector<Bucket> buckets;  // in launch order
  std::vector<size_t> bucket_of;
  std::vector<int64_t> offset_in_bucket;
  std::vector<Piece> pieces;                    // in the wrapped optimizer's state order
  std::vector<std::vector<size_t>> pieces_of;   // per parameter: its pieces here (0 or 1)
  std::unique_ptr<nn::optim::Optimizer> inner;  // over the pieces

  // Stage 3.
  std::vector<Unit> units;
  std::vector<size_t> forward_order;  // buckets by their first parameter's registration
  int64_t full_holds = 0;             // FullParameters guards alive: nothing is released
  int64_t allgathers = 0;
  int64_t gathered_bytes = 0, peak_gathered_bytes = 0;

  std::vector<char> ready;  // stage 2: this backward's gradients
  int64_t n_ready = 0;
  size_t next_launch = 0;
  bool synced = false;          // the shard holds this step's averaged gradients
  bool masters_filled = false;  // master_grads hold this step's gradients (gradients_to_unscale)
  int64_t reduce_scatters = 0;

  void build(const std::vector<Tensor>& all);
  // Points parameter k's TensorImpl at `storage` from `offset` (the module, autograd's saved
  // handles and the optimizer keep their handles): the flat buffer, a gathered bucket, or the
  // 0-byte storage of a released one.
  void rebind(size_t k, std::shared_ptr<Storage> storage, int64_t offset);
  // Stage 3: an allgather of bucket b's shard into b.gathered on the communicator's worker.
  Work gather_job(size_t bucket);
  void check_and_broadcast();
  void make_pieces(const nn::optim::Optimizer& outer, const OptimizerFactory& make);
  void install_hooks(const std::shared_ptr<State>& self);

  // Master weights.
  void make_masters();
  void refresh_masters();  // from the parameters' shards
  void round_masters_into_parameters();
  // This step's reductions finished (sync_gradients), then the gradients the wrapped optimizer
  // reads, per non-empty bucket: the f32 master gradients (filled from the averaged shards once
  // per step) or the shards themselves. What clipping and the loss scaler work on.
  std::vector<Tensor> step_gradients();
  Tensor step_grad(const Bucket& b) const;

  // Stage 3.
  void shard_parameters();  // keeps this rank's chunks, releases the whole parameters
  void install_module_hooks(const std::shared_ptr<State>& self);
  void remove_module_hooks() noexcept;
  void start_gather(size_t bucket);  // on the communicator's worker, unless gathered already
  void ensure_gathered(size_t bucket);
  void release(size_t bucket);
  void release_all();
  void before_forward(size_t unit);
  void after_forward(size_t unit, const Tensor& output, const std::shared_ptr<State>& self);
  void before_backward(size_t unit);

  void on_grad_ready(size_t i);
  Tensor comm_slot(size_t i);
  void acquire(size_t bucket);
  void mark_ready(size_t i);
  void launch(size_t bucket);
  void retire(size_t bucket);
  void flush_iteration();
  void reset_iteration();
  void sync_gradients();
  void drain() noexcept;

  Tensor shard_grad(const Bucket& b) const;
  Tensor shard_params(const Bucket& b) const;  // this rank's chunk of bucket b's parameters
  void reduce_scatter(const Tensor& in, Tensor& out);
  void allgather(const Tensor& in, Tensor& out);
};

}  // namespace stoke::dist
