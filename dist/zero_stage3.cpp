// ZeRO stage 3: the parameters sharded at rest, gathered per module around its forward and its
// backward (dist/zero.h says what; docs/design.md, "ZeRO-3", says why this way).
//
// A bucket (dist/zero_state.h) is the unit of gathering, as it is of reduce-scattering: a
// module's pre-hook gathers the buckets its parameters lie in. Buckets keep small layers from
// becoming one collective each (bucket_cap_mb), and a bucket's gather is one allgather of its N
// chunks into a fresh buffer that its parameters are rebound to (the same TensorImpl: the module,
// autograd's saved handles and the optimizer keep theirs). Releasing rebinds them to a 0-byte
// storage, so a stray read is an error that says so, not a read of freed memory.
//
// Every gather runs on the communicator's worker, behind the reduce-scatters already queued
// there: one FIFO of collectives, issued in the same program order on every rank (the hooks fire
// in the model's order, the same everywhere), so the ranks' collectives always match.
#include <algorithm>

#include "core/error.h"
#include "core/grad_mode.h"
#include "dist/zero_state.h"
#include "ops/creation.h"

namespace stoke::dist {

void ZeroOptimizer::State::shard_parameters() {
  NoGradGuard no_grad;
  for (Flat& flat : flats) {
    flat.shard_params = empty({flat.shard}, {.dtype = flat.dtype, .device = flat.device});
    flat.released = std::make_shared<Storage>(0, flat.device);
  }
  for (const Bucket& b : buckets)
    if (b.chunk > 0)
      shard_params(b).copy_(flats[b.flat].params.narrow(0, b.begin + rank * b.chunk, b.chunk));
  for (size_t k = 0; k < params.size(); ++k)
    rebind(k, flats[buckets[bucket_of[k]].flat].released, 0);
  for (Flat& flat : flats) flat.params = Tensor();  // the whole copy goes
  // Forward order: by each bucket's first parameter in registration order (buckets were cut in
  // reverse order, so this is roughly the order in which forward meets them).
  std::vector<size_t> first(buckets.size(), params.size());
  for (size_t k = 0; k < params.size(); ++k) first[bucket_of[k]] = std::min(first[bucket_of[k]], k);
  forward_order.resize(buckets.size());
  for (size_t b = 0; b < buckets.size(); ++b) forward_order[b] = b;
  std::stable_sort(forward_order.begin(), forward_order.end(),
                   [&](size_t x, size_t y) { return first[x] < first[y]; });
  for (size_t p = 0; p < forward_order.size(); ++p) buckets[forward_order[p]].forward_position = p;
}

void ZeroOptimizer::State::install_module_hooks(const std::shared_ptr<State>& self) {
  std::vector<char> covered(params.size(), 0);
  for_each_module(*options.module, [&](nn::Module& m) {
    Unit unit{.module = &m};
    for (const auto& [name, t] : m.named_parameters(/*recurse=*/false)) {
      const auto it =
          std::find_if(params.begin(), params.end(), [&](const Tensor& p) { return p.is_same(t); });
      if (it == params.end()) continue;  // not the optimizer's: it stays whole, as it was
      const size_t k = static_cast<size_t>(it - params.begin());
      covered[k] = 1;
      if (std::find(unit.buckets.begin(), unit.buckets.end(), bucket_of[k]) == unit.buckets.end())
        unit.buckets.push_back(bucket_of[k]);
    }
    if (!unit.buckets.empty()) units.push_back(std::move(unit));
  });
  for (size_t k = 0; k < params.size(); ++k)
    STOKE_CHECK(covered[k], kZeroOp, "parameter ", k, " (", params[k].shape(),
                ") belongs to no module of ZeroOptions::module: stage 3 gathers a parameter in "
                "the forward hook of the module that owns it");
  for (Unit& u : units)
    for (size_t b : u.buckets) ++buckets[b].forward_users;
  for (Bucket& b : buckets) b.forward_left = b.forward_users;
  const std::weak_ptr<State> weak = self;
  for (size_t i = 0; i < units.size(); ++i) {
    units[i].pre_hook =
        units[i].module->register_forward_pre_hook([weak, i](nn::Module&, const Tensor&) {
          if (auto s = weak.lock()) s->before_forward(i);
          return Tensor();
        });
    units[i].post_hook = units[i].module->register_forward_hook(
        [weak, i](nn::Module&, const Tensor&, const Tensor& out) {
          if (auto s = weak.lock()) s->after_forward(i, out, s);
          return Tensor();
        });
  }
}

void ZeroOptimizer::State::remove_module_hooks() noexcept {
  for (Unit& u : units) {
    try {
      if (u.pre_hook >= 0) u.module->remove_forward_hook(u.pre_hook);
      if (u.post_hook >= 0) u.module->remove_forward_hook(u.post_hook);
    } catch (...) {
    }
    u.pre_hook = u.post_hook = -1;
  }
}

void ZeroOptimizer::State::start_gather(size_t bi) {
  Bucket& b = buckets[bi];
  if (b.gathered.defined()) return;  // gathered, or on its way
  const Flat& flat = flats[b.flat];
  b.gathered = empty({b.chunk * size}, {.dtype = flat.dtype, .device = flat.device});
  const int64_t bytes = b.chunk * size * static_cast<int64_t>(dtype_size(flat.dtype));
  gathered_bytes += bytes;
  peak_gathered_bytes = std::max(peak_gathered_bytes, gathered_bytes);
  if (b.chunk == 0) return;  // parameters of no elements: nothing to send
  ++allgathers;
  b.gather = gather_job(bi);
}

Work ZeroOptimizer::State::gather_job(size_t bi) {
  // The output by address, not a copy: the communicator keeps a finished job (and what it
  // captured) until its next job, which would hold the gathered buffer past its release.
  // release(), step() and the destructor wait for the gather before the buffer or state goes.
  State* s = this;
  Tensor* out = &buckets[bi].gathered;
  return comm->run_async([s, in = shard_params(buckets[bi]), out]() { s->allgather(in, *out); });
}

void ZeroOptimizer::State::ensure_gathered(size_t bi) {
  Bucket& b = buckets[bi];
  if (b.bound) return;
  start_gather(bi);
  if (b.gather.valid()) {
    b.gather.wait();
    b.gather = Work();
  }
  for (size_t k : b.params)
    rebind(k, b.gathered.storage(), b.gathered.offset() + offset_in_bucket[k]);
  b.bound = true;
}

void ZeroOptimizer::State::release(size_t bi) {
  if (full_holds > 0) return;  // a FullParameters guard keeps everything whole
  Bucket& b = buckets[bi];
  if (!b.gathered.defined()) return;
  if (b.gather.valid()) {  // a prefetch nobody used: it must land before its buffer goes
    b.gather.wait();
    b.gather = Work();
  }
  const Flat& flat = flats[b.flat];
  for (size_t k : b.params) rebind(k, flat.released, 0);
  gathered_bytes -= b.chunk * size * static_cast<int64_t>(dtype_size(flat.dtype));
  b.gathered = Tensor();
  b.bound = false;
  b.forward_left = b.forward_users;
}

void ZeroOptimizer::State::release_all() {
  for (size_t b = 0; b < buckets.size(); ++b) release(b);
}

void ZeroOptimizer::State::before_forward(size_t ui) {
  NoGradGuard no_grad;
  const Unit& u = units[ui];
  for (size_t b : u.buckets) start_gather(b);  // all of them in flight before waiting on one
  size_t last = 0;
  for (size_t b : u.buckets) {
    ensure_gathered(b);
    last = std::max(last, buckets[b].forward_position);
  }
  for (int64_t k = 1; k <= options.prefetch; ++k)
    if (last + static_cast<size_t>(k) < forward_order.size())
      start_gather(forward_order[last + static_cast<size_t>(k)]);
}

void ZeroOptimizer::State::after_forward(size_t ui, const Tensor& output,
                                         const std::shared_ptr<State>& self) {
  NoGradGuard no_grad;
  const Unit& u = units[ui];
  // The module's backward needs its parameters again: the gradient reaching its output comes
  // before any of its backward's nodes run (they wait for it).
  if (output.defined() && output.requires_grad()) {
    const std::weak_ptr<State> weak = self;
    output.register_hook([weak, ui](const Tensor&) {
      if (auto s = weak.lock()) s->before_backward(ui);
      return Tensor();
    });
  }
  for (size_t bi : u.buckets) {
    Bucket& b = buckets[bi];
    if (--b.forward_left > 0) continue;  // another module of the bucket is still to run
    b.forward_left = b.forward_users;
    // Without a graph there is no backward to keep them for.
    if (options.reshard_after_forward || !output.defined() || !output.requires_grad()) release(bi);
  }
}

void ZeroOptimizer::State::before_backward(size_t ui) {
  NoGradGuard no_grad;
  const Unit& u = units[ui];
  size_t first = forward_order.size();
  for (size_t b : u.buckets)
    if (buckets[b].pending > 0) {  // its gradients are not all in yet this backward
      start_gather(b);
      first = std::min(first, buckets[b].forward_position);
    }
  for (size_t b : u.buckets)
    if (buckets[b].pending > 0) ensure_gathered(b);
  // Backward meets the buckets in the reverse of forward's order: prefetch the ones before.
  for (int64_t k = 1; k <= options.prefetch && first < forward_order.size(); ++k)
    if (first >= static_cast<size_t>(k)) {
      const size_t b = forward_order[first - static_cast<size_t>(k)];
      if (buckets[b].pending > 0) start_gather(b);
    }
}

ZeroOptimizer::FullParameters::FullParameters(std::shared_ptr<State> state, bool writeback)
    : state_(std::move(state)), writeback_(writeback) {
  if (!state_ || state_->options.stage != 3) return;  // stages 1, 2: whole already
  State& s = *state_;
  NoGradGuard no_grad;
  for (size_t b = 0; b < s.buckets.size(); ++b) s.start_gather(b);
  for (size_t b = 0; b < s.buckets.size(); ++b) s.ensure_gathered(b);
  ++s.full_holds;
}

ZeroOptimizer::FullParameters::FullParameters(FullParameters&& other) noexcept
    : state_(std::move(other.state_)), writeback_(other.writeback_) {}

ZeroOptimizer::FullParameters::~FullParameters() {
  if (!state_) return;
  State& s = *state_;
  NoGradGuard no_grad;
  if (s.options.stage != 3) {  // stages 1, 2: the parameters were written in place
    if (writeback_) s.refresh_masters();
    return;
  }
  if (writeback_) {
    for (const Bucket& b : s.buckets)
      if (b.chunk > 0) s.shard_params(b).copy_(b.gathered.narrow(0, s.rank * b.chunk, b.chunk));
    s.refresh_masters();
  }
  if (--s.full_holds == 0) s.release_all();
}

ZeroOptimizer::FullParameters ZeroOptimizer::full_parameters(bool writeback) {
  return FullParameters(state_, writeback);
}

std::optional<ZeroOptimizer::FullParameters> full_parameters_of(nn::optim::Optimizer& opt,
                                                                bool writeback) {
  auto* zero = dynamic_cast<ZeroOptimizer*>(&opt);
  if (!zero) return std::nullopt;
  return zero->full_parameters(writeback);
}

int64_t ZeroOptimizer::allgather_count() const {
  return state_->allgathers;
}

}  // namespace stoke::dist
