// ZeroOptimizer: the flat layout, the gradient hooks of stages 1, 2 and 3, step and clipping
// (dist/zero.h says what and why; dist/zero_state.cpp holds the consolidated state_dict and the
// memory report, dist/zero_stage3.cpp stage 3's gathers and releases).
#include "dist/zero.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "core/grad_mode.h"
#include "dist/zero_state.h"
#include "ops/creation.h"
#include "ops/elementwise.h"
#include "ops/optimizer.h"

namespace stoke::dist {

std::string memory_line(const nn::optim::Optimizer& opt) {
  const auto* zero = dynamic_cast<const ZeroOptimizer*>(&opt);
  if (!zero) return {};
  const ZeroMemoryReport m = zero->memory_report();
  constexpr double kMiB = 1024.0 * 1024.0;
  char text[480];
  char gathered[96] = "", masters[64] = "";
  if (zero->stage() == 3)
    std::snprintf(gathered, sizeof gathered, ", parameters gathered at most %.2f MiB",
                  m.peak_gathered_bytes / kMiB);
  if (m.master_bytes > 0)
    std::snprintf(masters, sizeof masters, ", f32 master weights %.2f MiB", m.master_bytes / kMiB);
  std::snprintf(text, sizeof text,
                "%s memory per rank: optimizer state %.2f MiB, gradients %.2f MiB, parameters "
                "%.2f MiB%s, communication %.2f MiB%s (rank 0 steps %lld of %lld parameters)",
                zero_stage_name(zero->stage()).c_str(), m.optimizer_state_bytes / kMiB,
                m.gradient_bytes / kMiB, m.parameter_bytes / kMiB, masters,
                m.communication_bytes / kMiB, gathered, static_cast<long long>(m.owned_parameters),
                static_cast<long long>(m.parameters));
  return text;
}

std::string zero_stage_name(int stage) {
  return "zero" + std::to_string(stage);
}

OptimizerFactory same_kind_as(const nn::optim::Optimizer& plain) {
  using namespace nn::optim;
  // AdamW before Adam: it is one.
  if (const auto* o = dynamic_cast<const AdamW*>(&plain)) {
    const AdamOptions a = o->options();
    return [a](std::vector<ParamGroup> g) -> std::unique_ptr<Optimizer> {
      return std::make_unique<AdamW>(std::move(g), AdamWOptions{.lr = a.lr,
                                                                .beta1 = a.beta1,
                                                                .beta2 = a.beta2,
                                                                .eps = a.eps,
                                                                .weight_decay = a.weight_decay,
                                                                .amsgrad = a.amsgrad});
    };
  }
  if (const auto* o = dynamic_cast<const Adam*>(&plain)) {
    const AdamOptions a = o->options();
    return [a](std::vector<ParamGroup> g) -> std::unique_ptr<Optimizer> {
      return std::make_unique<Adam>(std::move(g), a);
    };
  }
  if (const auto* o = dynamic_cast<const SGD*>(&plain)) {
    const SGDOptions sgd = o->options();
    return [sgd](std::vector<ParamGroup> g) -> std::unique_ptr<Optimizer> {
      return std::make_unique<SGD>(std::move(g), sgd);
    };
  }
  STOKE_FAIL(kZeroOp, "cannot shard this optimizer: expected SGD, Adam or AdamW");
}

std::unique_ptr<ZeroOptimizer> make_zero_optimizer(const nn::optim::Optimizer& plain,
                                                   Communicator& comm, ZeroOptions options) {
  STOKE_CHECK(plain.state_dict().empty(), kZeroOp,
              "the optimizer to shard has state already (it has stepped); build the ZeroOptimizer "
              "first and load the state into it");
  std::vector<nn::optim::ParamGroup> groups;
  for (size_t g = 0; g < plain.num_groups(); ++g)
    groups.push_back(
        {.params = plain.params_of(g), .lr = plain.lr(g), .weight_decay = plain.weight_decay(g)});
  return std::make_unique<ZeroOptimizer>(std::move(groups), comm, same_kind_as(plain), options);
}

namespace {

// Each group's learning rate and weight decay as the wrapped optimizer resolves them (its own
// defaults for groups that set none), so that the outer optimizer reports and schedules them.
std::vector<nn::optim::ParamGroup> resolve_groups(std::vector<nn::optim::ParamGroup> groups,
                                                  const OptimizerFactory& make) {
  STOKE_CHECK(make != nullptr, kZeroOp, "expected an optimizer factory, got none");
  std::unique_ptr<nn::optim::Optimizer> probe = make(groups);
  STOKE_CHECK(probe != nullptr, kZeroOp, "the optimizer factory returned null");
  STOKE_CHECK(probe->num_groups() == groups.size(), kZeroOp, "the optimizer factory made ",
              probe->num_groups(), " parameter groups from ", groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    groups[g].lr = probe->lr(g);
    groups[g].weight_decay = probe->weight_decay(g);
  }
  return groups;
}

// FNV-1a over the parameters' dtypes and shapes: what must agree across ranks.
int64_t structure_hash(const std::vector<Tensor>& params) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](int64_t v) {
    h ^= static_cast<uint64_t>(v);
    h *= 1099511628211ull;
  };
  for (const Tensor& p : params) {
    mix(static_cast<int64_t>(p.dtype()));
    mix(p.dim());
    for (int64_t d = 0; d < p.dim(); ++d) mix(p.size(d));
  }
  return static_cast<int64_t>(h >> 1);
}

}  // namespace

void ZeroOptimizer::State::reduce_scatter(const Tensor& in, Tensor& out) {
  dist::reduce_scatter(*comm, in, out, ReduceOp::avg, options.algorithm, options.ring);
}

void ZeroOptimizer::State::allgather(const Tensor& in, Tensor& out) {
  dist::allgather(*comm, in, out, options.algorithm, options.ring);
}

Tensor ZeroOptimizer::State::shard_grad(const Bucket& b) const {
  const Flat& f = flats[b.flat];
  return options.stage == 1 ? f.grads.narrow(0, b.begin + rank * b.chunk, b.chunk)
                            : f.shard_grads.narrow(0, b.shard_begin, b.chunk);
}

Tensor ZeroOptimizer::State::shard_params(const Bucket& b) const {
  const Flat& f = flats[b.flat];
  return options.stage == 3 ? f.shard_params.narrow(0, b.shard_begin, b.chunk)
                            : f.params.narrow(0, b.begin + rank * b.chunk, b.chunk);
}

void ZeroOptimizer::State::build(const std::vector<Tensor>& all) {
  params = all;
  const size_t n = params.size();
  STOKE_CHECK(n > 0, kZeroOp, "expected at least one parameter");
  bucket_of.assign(n, 0);
  offset_in_bucket.assign(n, 0);
  const int64_t cap_bytes = static_cast<int64_t>(options.bucket_cap_mb * 1024 * 1024);
  // Flats in the order backward meets their dtypes; buckets within each in reverse order.
  for (size_t k = n; k-- > 0;) {
    const Tensor& p = params[k];
    auto it = std::find_if(flats.begin(), flats.end(), [&](const Flat& f) {
      return f.dtype == p.dtype() && f.device == p.device();
    });
    if (it == flats.end())
      it = flats.insert(flats.end(), Flat{.dtype = p.dtype(), .device = p.device()});
  }
  for (size_t f = 0; f < flats.size(); ++f) {
    Flat& flat = flats[f];
    const int64_t cap =
        std::max<int64_t>(1, cap_bytes / static_cast<int64_t>(dtype_size(flat.dtype)));
    int64_t open = -1;
    for (size_t k = n; k-- > 0;) {
      const Tensor& p = params[k];
      if (p.dtype() != flat.dtype || p.device() != flat.device) continue;
      if (open < 0 || (buckets[static_cast<size_t>(open)].numel > 0 &&
                       buckets[static_cast<size_t>(open)].numel + p.numel() > cap)) {
        buckets.push_back(Bucket{.flat = f});
        open = static_cast<int64_t>(buckets.size()) - 1;
      }
      Bucket& b = buckets[static_cast<size_t>(open)];
      bucket_of[k] = static_cast<size_t>(open);
      offset_in_bucket[k] = b.numel;
      b.params.push_back(k);
      b.numel += p.numel();
    }
  }
  for (Bucket& b : buckets) {
    Flat& flat = flats[b.flat];
    b.chunk = (b.numel + size - 1) / size;
    b.begin = flat.padded;
    b.shard_begin = flat.shard;
    flat.padded += b.chunk * size;
    flat.shard += b.chunk;
    flat.largest_chunk = std::max(flat.largest_chunk, b.chunk);
  }
  for (Flat& flat : flats) {
    const TensorOptions to{.dtype = flat.dtype, .device = flat.device};
    flat.params = zeros({flat.padded}, to);  // the padding stays zero
    if (options.stage == 1)
      flat.grads = zeros({flat.padded}, to);
    else
      flat.shard_grads = zeros({flat.shard}, to);
    flat.chunk_tmp = empty({flat.largest_chunk}, to);
  }
  // Pack, then rebind each parameter to its place in the flat buffer: the same TensorImpl (so
  // the module, the outer optimizer and autograd keep their handles), new storage and offset.
  for (size_t k = 0; k < n; ++k) {
    const Bucket& b = buckets[bucket_of[k]];
    Flat& flat = flats[b.flat];
    const int64_t at = b.begin + offset_in_bucket[k];
    flat.params.narrow(0, at, params[k].numel()).copy_(params[k].reshape({-1}));
    rebind(k, flat.params.storage(), flat.params.offset() + at);
  }
}

void ZeroOptimizer::State::rebind(size_t k, std::shared_ptr<Storage> storage, int64_t offset) {
  TensorImpl* impl = params[k].impl();
  impl->storage = std::move(storage);
  impl->offset = offset;
}

void ZeroOptimizer::State::check_and_broadcast() {
  const Device device = params.front().device();
  int64_t numel = 0;
  for (const Tensor& p : params) numel += p.numel();
  const std::vector<int64_t> mine{static_cast<int64_t>(params.size()), numel,
                                  structure_hash(params)};
  Tensor all = empty({3 * size}, {.dtype = DType::i64, .device = device});
  comm->allgather(from_vector<int64_t>(mine, {3}, {.dtype = DType::i64}).to(device), all);
  const std::vector<int64_t> v = all.to(Device::cpu()).to_vector<int64_t>();
  for (int r = 1; r < size; ++r) {
    const size_t o = static_cast<size_t>(3 * r);
    STOKE_CHECK(
        v[o] == v[0] && v[o + 1] == v[1] && v[o + 2] == v[2], kZeroOp,
        "the parameters differ across ranks: rank 0 has ", v[0], " parameters of ", v[1],
        " elements, rank ", r, " has ", v[o], " of ", v[o + 1],
        (v[o] == v[0] && v[o + 1] == v[1] ? " (same counts, different dtypes or shapes)" : ""),
        "; every rank must build the same model");
  }
  if (options.broadcast_parameters)
    for (Flat& flat : flats) comm->broadcast(flat.params, 0);
}

void ZeroOptimizer::State::make_pieces(const nn::optim::Optimizer& outer,
                                       const OptimizerFactory& make) {
  pieces_of.assign(params.size(), {});
  std::vector<nn::optim::ParamGroup> groups(outer.num_groups());
  size_t index = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    groups[g].lr = outer.lr(g);
    groups[g].weight_decay = outer.weight_decay(g);
    for (size_t j = 0; j < outer.params_of(g).size(); ++j, ++index) {
      const Bucket& b = buckets[bucket_of[index]];
      const int64_t o = offset_in_bucket[index], len = params[index].numel();
      const int64_t lo = std::max(o, rank * b.chunk), hi = std::min(o + len, (rank + 1) * b.chunk);
      if (lo >= hi) continue;
      Piece piece{.param = index,
                  .param_offset = lo - o,
                  .chunk_offset = lo - rank * b.chunk,
                  .numel = hi - lo};
      const Flat& flat = flats[b.flat];
      // With master weights the wrapped optimizer steps the f32 copies and reads theirs.
      piece.tensor =
          (flat.master.defined() ? flat.master.narrow(0, b.shard_begin, b.chunk) : shard_params(b))
              .narrow(0, piece.chunk_offset, piece.numel);
      piece.tensor.set_requires_grad(true);
      piece.tensor.set_grad(step_grad(b).narrow(0, piece.chunk_offset, piece.numel));
      pieces_of[index].push_back(pieces.size());
      groups[g].params.push_back(piece.tensor);
      pieces.push_back(std::move(piece));
    }
  }
  inner = make(std::move(groups));
  STOKE_CHECK(inner != nullptr, kZeroOp, "the optimizer factory returned null");
}

void ZeroOptimizer::State::install_hooks(const std::shared_ptr<State>& self) {
  const std::weak_ptr<State> weak = self;
  ready.assign(params.size(), 0);
  reset_iteration();
  for (size_t i = 0; i < params.size(); ++i)
    params[i].register_post_accumulate_grad_hook([weak, i](const Tensor&) {
      if (auto s = weak.lock()) s->on_grad_ready(i);
    });
}

void ZeroOptimizer::State::reset_iteration() {
  std::fill(ready.begin(), ready.end(), 0);
  n_ready = 0;
  next_launch = 0;
  for (Bucket& b : buckets) b.pending = static_cast<int64_t>(b.params.size());
}

// The hook: parameter i's gradient for this backward is final. Stage 1 adds it into the flat
// gradients; stage 2 copies it into its bucket's buffer. Either way the parameter's own .grad
// goes, so that a full-size gradient lives only as long as autograd needs it.
void ZeroOptimizer::State::on_grad_ready(size_t i) {
  NoGradGuard no_grad;
  const Tensor g = params[i].grad();
  if (!g.defined()) return;
  masters_filled = false;  // more gradient arrives: the f32 copies must be taken again
  Bucket& b = buckets[bucket_of[i]];
  if (options.stage == 1) {
    ops::add_(flats[b.flat].grads.narrow(0, b.begin + offset_in_bucket[i], g.numel()),
              g.reshape({-1}));
    params[i].set_grad(Tensor());
    return;
  }
  // A parameter seen twice: the previous backward left some gradients out (unused parameters);
  // close it with zeros for them first, so that every rank issues the same collectives.
  if (ready[i]) flush_iteration();
  if (b.buffer < 0) acquire(bucket_of[i]);
  comm_slot(i).copy_(g.reshape({-1}));
  params[i].set_grad(Tensor());
  mark_ready(i);
}

Tensor ZeroOptimizer::State::comm_slot(size_t i) {
  const Bucket& b = buckets[bucket_of[i]];
  return flats[b.flat].pool[static_cast<size_t>(b.buffer)].in.narrow(0, offset_in_bucket[i],
                                                                     params[i].numel());
}

void ZeroOptimizer::State::acquire(size_t bi) {
  Bucket& b = buckets[bi];
  Flat& flat = flats[b.flat];
  int64_t pick = -1;
  for (size_t k = 0; k < flat.pool.size() && pick < 0; ++k)
    if (flat.pool[k].bucket < 0) pick = static_cast<int64_t>(k);
  for (size_t k = 0; k < flat.pool.size() && pick < 0; ++k)
    if (buckets[static_cast<size_t>(flat.pool[k].bucket)].work.valid()) {
      retire(static_cast<size_t>(flat.pool[k].bucket));
      pick = static_cast<int64_t>(k);
    }
  if (pick < 0) {  // every buffer is still being filled: grow the pool
    const TensorOptions to{.dtype = flat.dtype, .device = flat.device};
    flat.pool.push_back(CommBuffer{.in = empty({flat.largest_chunk * size}, to),
                                   .out = empty({flat.largest_chunk}, to)});
    pick = static_cast<int64_t>(flat.pool.size()) - 1;
  }
  CommBuffer& buf = flat.pool[static_cast<size_t>(pick)];
  buf.bucket = static_cast<int64_t>(bi);
  b.buffer = pick;
  const int64_t pad = b.chunk * size - b.numel;
  if (pad > 0) fill_(buf.in.narrow(0, b.numel, pad), 0.0);
}

void ZeroOptimizer::State::mark_ready(size_t i) {
  ready[i] = 1;
  ++n_ready;
  --buckets[bucket_of[i]].pending;
  // Buckets launch in index order, the same on every rank.
  while (next_launch < buckets.size() && buckets[next_launch].pending == 0) launch(next_launch++);
  if (n_ready == static_cast<int64_t>(params.size())) {
    for (size_t k = 0; k < buckets.size(); ++k)
      if (buckets[k].buffer >= 0) retire(k);
    reset_iteration();
    if (options.stage == 3) release_all();  // a prefetch that backward did not reach
  }
}

void ZeroOptimizer::State::launch(size_t bi) {
  Bucket& b = buckets[bi];
  if (b.buffer < 0) acquire(bi);  // a bucket of empty parameters only
  ++reduce_scatters;
  CommBuffer& buf = flats[b.flat].pool[static_cast<size_t>(b.buffer)];
  Tensor in = buf.in.narrow(0, 0, b.chunk * size), out = buf.out.narrow(0, 0, b.chunk);
  State* s = this;  // retire() or the destructor waits before the state goes
  b.work = comm->run_async([s, in, out]() mutable {
    dist::reduce_scatter(*s->comm, in, out, ReduceOp::avg, s->options.algorithm, s->options.ring);
  });
  if (options.stage == 3) release(bi);  // its gradients are all in: backward is done with it
}

// Waits for bucket bi's reduce-scatter, adds this rank's averaged chunk into its gradient shard
// (accumulation over backward passes) and frees the buffer.
void ZeroOptimizer::State::retire(size_t bi) {
  NoGradGuard no_grad;
  Bucket& b = buckets[bi];
  CommBuffer& buf = flats[b.flat].pool[static_cast<size_t>(b.buffer)];
  b.work.wait();
  b.work = Work();
  if (b.chunk > 0) ops::add_(shard_grad(b), buf.out.narrow(0, 0, b.chunk));
  buf.bucket = -1;
  b.buffer = -1;
}

void ZeroOptimizer::State::flush_iteration() {
  if (n_ready == 0) return;
  NoGradGuard no_grad;
  for (size_t i = 0; i < params.size(); ++i) {
    if (ready[i]) continue;
    if (buckets[bucket_of[i]].buffer < 0) acquire(bucket_of[i]);
    fill_(comm_slot(i), 0.0);
    mark_ready(i);  // the last one retires every bucket and resets the iteration
  }
}

void ZeroOptimizer::State::sync_gradients() {
  if (synced) return;
  NoGradGuard no_grad;
  if (options.stage == 1) {
    for (Bucket& b : buckets) {
      if (b.chunk == 0) continue;
      Flat& flat = flats[b.flat];
      Tensor out = flat.chunk_tmp.narrow(0, 0, b.chunk);
      reduce_scatter(flat.grads.narrow(0, b.begin, b.chunk * size), out);
      ++reduce_scatters;
      shard_grad(b).copy_(out);
    }
  } else {
    flush_iteration();
  }
  synced = true;
}

void ZeroOptimizer::State::drain() noexcept {
  for (Bucket& b : buckets) {
    try {
      if (b.work.valid()) b.work.wait();
      if (b.gather.valid()) b.gather.wait();
    } catch (...) {
    }
  }
}

ZeroOptimizer::ZeroOptimizer(std::vector<nn::optim::ParamGroup> groups, Communicator& comm,
                             const OptimizerFactory& make, ZeroOptions options)
    : Optimizer(resolve_groups(std::move(groups), make), 0, 0, kZeroOp),
      state_(std::make_shared<State>()) {
  STOKE_CHECK(options.stage >= 1 && options.stage <= 3, kZeroOp, "stage ", options.stage,
              " does not exist; expected 1 (optimizer state sharded), 2 (gradients too) or 3 "
              "(parameters too)");
  STOKE_CHECK(options.stage != 3 || options.module != nullptr, kZeroOp,
              "stage 3 needs the model: set ZeroOptions::module (its modules' forward hooks "
              "gather and release the sharded parameters)");
  STOKE_CHECK(options.prefetch >= 0, kZeroOp, "expected prefetch >= 0 buckets, got ",
              options.prefetch);
  STOKE_CHECK(options.bucket_cap_mb > 0, kZeroOp, "expected a positive bucket_cap_mb, got ",
              options.bucket_cap_mb);
  STOKE_CHECK(options.comm_buffers >= 1, kZeroOp, "expected comm_buffers >= 1, got ",
              options.comm_buffers);
  STOKE_CHECK(options.algorithm != AllreduceAlgorithm::tree, kZeroOp,
              "ZeRO's collectives are a reduce-scatter and an allgather, which a tree has no form "
              "of: use native, ring, rhd or automatic");
  State& s = *state_;
  s.comm = &comm;
  s.options = options;
  s.rank = comm.rank();
  s.size = comm.size();
  NoGradGuard no_grad;
  s.build(params_);
  s.check_and_broadcast();
  // The tuner's calibration now (a collective), not inside the first backward; up to the largest
  // reduce-scatter's input (16 MiB at most).
  if (options.algorithm == AllreduceAlgorithm::automatic && !s.params.empty()) {
    int64_t largest = 0;
    for (const Flat& f : s.flats)
      largest =
          std::max(largest, f.largest_chunk * s.size * static_cast<int64_t>(dtype_size(f.dtype)));
    allreduce_model(comm, s.params.front().device(),
                    {.large_bytes = std::clamp<int64_t>(largest, 64 << 10, 16 << 20),
                     .segment_bytes = options.ring.segment_bytes,
                     .scatter_gather = true});
  }
  if (options.stage == 3) s.shard_parameters();
  s.make_masters();
  if (options.stage >= 2)
    for (Flat& flat : s.flats)
      for (int k = 0; k < options.comm_buffers; ++k)
        flat.pool.push_back(CommBuffer{
            .in =
                empty({flat.largest_chunk * s.size}, {.dtype = flat.dtype, .device = flat.device}),
            .out = empty({flat.largest_chunk}, {.dtype = flat.dtype, .device = flat.device})});
  s.make_pieces(*this, make);
  s.install_hooks(state_);
  if (options.stage == 3) s.install_module_hooks(state_);
}

ZeroOptimizer::ZeroOptimizer(std::vector<Tensor> params, Communicator& comm,
                             const OptimizerFactory& make, ZeroOptions options)
    : ZeroOptimizer(std::vector<nn::optim::ParamGroup>{{.params = std::move(params)}}, comm, make,
                    options) {}

ZeroOptimizer::~ZeroOptimizer() {
  state_->drain();
  state_->remove_module_hooks();
}

void ZeroOptimizer::step() {
  State& s = *state_;
  NoGradGuard no_grad;
  s.step_gradients();  // the reductions finished, and the master gradients filled
  for (size_t g = 0; g < groups_.size(); ++g) {
    s.inner->set_lr(g, groups_[g].lr);
    s.inner->set_weight_decay(g, groups_[g].weight_decay);
  }
  if (s.options.stage == 3) {
    s.release_all();  // whatever is gathered now goes stale with the step
    s.inner->step();
    s.round_masters_into_parameters();
    // Under a FullParameters guard nothing was released: gather the stepped shards again.
    for (size_t b = 0; b < s.buckets.size(); ++b)
      if (s.buckets[b].gathered.defined() && s.buckets[b].chunk > 0) s.gather_job(b).wait();
    s.synced = s.masters_filled = false;
    return;
  }
  s.inner->step();
  s.round_masters_into_parameters();
  for (const Bucket& b : s.buckets) {
    if (b.chunk == 0) continue;
    Flat& flat = s.flats[b.flat];
    Tensor mine = flat.chunk_tmp.narrow(0, 0, b.chunk);
    mine.copy_(s.shard_params(b));
    Tensor whole = flat.params.narrow(0, b.begin, b.chunk * s.size);
    s.allgather(mine, whole);
  }
  s.synced = s.masters_filled = false;
}

void ZeroOptimizer::zero_grad() {
  State& s = *state_;
  NoGradGuard no_grad;
  s.flush_iteration();  // stage 2: no reduce-scatter may be left in flight over the shard
  for (Flat& flat : s.flats) ops::zero_(s.options.stage == 1 ? flat.grads : flat.shard_grads);
  for (Tensor& p : params_) p.set_grad(Tensor());
  s.synced = s.masters_filled = false;
}

Tensor ZeroOptimizer::clip_grad_norm_(double max_norm) {
  State& s = *state_;
  NoGradGuard no_grad;
  // What step() reads: the shards, or their f32 copies with master weights.
  const std::vector<Tensor> shards = s.step_gradients();
  // One pass per flat (dtype and device), then the ranks' sums added.
  double mine = 0;
  for (size_t f = 0; f < s.flats.size(); ++f) {
    std::vector<Tensor> of_flat;
    for (const Bucket& b : s.buckets)
      if (b.flat == f && b.chunk > 0) of_flat.push_back(s.step_grad(b));
    if (!of_flat.empty())
      mine += ops::sum_of_squares(of_flat).to(Device::cpu()).to(DType::f64).item();
  }
  Tensor total = full({1}, mine, {.dtype = DType::f64}).to(s.params.front().device());
  s.comm->allreduce(total, ReduceOp::sum);
  const double norm = std::sqrt(total.to(Device::cpu()).item());
  const double coef = max_norm / (norm + 1e-6);
  if (coef < 1)
    for (const Tensor& g : shards) ops::mul_(g, coef);
  return full({1}, norm, {.dtype = DType::f64});
}

std::vector<Tensor> ZeroOptimizer::gradients_to_unscale() {
  NoGradGuard no_grad;
  return state_->step_gradients();
}

int ZeroOptimizer::stage() const {
  return state_->options.stage;
}

nn::optim::Optimizer& ZeroOptimizer::inner() const {
  return *state_->inner;
}

int64_t ZeroOptimizer::reduce_scatter_count() const {
  return state_->reduce_scatters;
}

}  // namespace stoke::dist
