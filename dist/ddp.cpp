// DistributedDataParallel: buckets, the post-accumulate hooks that fill them, and the checks that
// keep ranks from hanging on a mismatch (dist/ddp.h says what and why).
#include "dist/ddp.h"

#include <algorithm>
#include <optional>
#include <sstream>
#include <unordered_set>

#include "autograd/node.h"
#include "core/error.h"
#include "core/grad_mode.h"
#include "dist/buffer_broadcast.h"
#include "ops/creation.h"

namespace stoke::dist {

namespace {

constexpr const char* kDdpOp = "stoke::DistributedDataParallel";

struct GradBucket {
  std::vector<int64_t> params;   // indices into State::params, in bucket order
  std::vector<int64_t> offsets;  // where each one's gradient starts in flat
  Tensor flat;                   // the gradients, packed; averaged in place
  int64_t pending = 0;           // parameters whose gradient has not arrived this iteration
  Work work;
};

// One line per parameter and buffer: what must agree across ranks.
std::vector<std::string> structure_lines(const nn::Module& m) {
  std::vector<std::string> lines;
  auto add = [&](const char* kind, const nn::NamedTensors& ts) {
    for (const auto& [name, t] : ts) {
      std::ostringstream s;
      s << kind << " '" << name << "' " << t.dtype() << " " << t.shape();
      lines.push_back(s.str());
    }
  };
  add("parameter", m.named_parameters());
  add("buffer", m.named_buffers());
  return lines;
}

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// Every rank learns every rank's structure (two allgathers of fixed size, so a mismatch cannot
// hang), and all throw the same message naming the first difference from rank 0. The exchanged
// tensors live on `device`, the parameters' (an NCCL communicator moves only its GPU's tensors).
void check_same_structure(Communicator& comm, const nn::Module& m, Device device) {
  std::string mine;
  for (const std::string& line : structure_lines(m)) mine += line + "\n";
  const int n = comm.size();
  const std::vector<std::string> texts = allgather_strings(comm, mine, device);
  const std::vector<std::string> ref = split_lines(texts[0]);
  for (int r = 1; r < n; ++r) {
    const std::vector<std::string> other = split_lines(texts[static_cast<size_t>(r)]);
    if (other == ref) continue;
    size_t k = 0;
    while (k < ref.size() && k < other.size() && ref[k] == other[k]) ++k;
    auto at = [k](const std::vector<std::string>& v) {
      return k < v.size() ? v[k] : std::string("nothing (its list ends)");
    };
    throw Error(::stoke::detail::str_cat(
        kDdpOp, ": the module differs across ranks: entry ", k, " is ", at(ref), " on rank 0 but ",
        at(other), " on rank ", r, " (rank 0 has ", ref.size(), " parameters and buffers, rank ", r,
        " has ", other.size(), "); every rank must build the same model"));
  }
}

// Rank 0's values into t on every rank, whatever t's layout.
void broadcast_from_rank0(Communicator& comm, const Tensor& t) {
  Tensor d = t.detach();
  if (d.is_contiguous()) {
    comm.broadcast(d, 0);
  } else {
    Tensor tmp = d.contiguous();
    comm.broadcast(tmp, 0);
    d.copy_(tmp);
  }
}

}  // namespace

struct DistributedDataParallel::State {
  Communicator* comm = nullptr;
  std::optional<BufferBroadcast> buffers;  // packed per dtype and device
  DdpOptions options;
  std::vector<std::string> names;
  std::vector<Tensor> params;
  std::vector<GradBucket> buckets;
  std::vector<int64_t> bucket_of, slot_of;  // per parameter: its bucket and index within it

  bool require_sync = true;  // false inside no_sync()
  bool prepared = false;     // a forward through the wrapper awaits its backward
  std::vector<char> ready;
  int64_t n_ready = 0;
  size_t next_launch = 0;
  std::vector<int64_t> ready_order;  // the first synchronized iteration's order
  bool rebuilt = false;
  int64_t allreduces = 0;

  mutable std::mutex events_mutex;  // events are recorded by the communicator's worker too
  std::vector<DdpEvent> events;

  void record(DdpEvent::Kind kind, int64_t index) {
    if (!options.record_events) return;
    std::lock_guard<std::mutex> lock(events_mutex);
    events.push_back({kind, index});
  }

  // Buckets in `order`: a new one when the dtype or device changes or the cap would be passed.
  void build_buckets(const std::vector<int64_t>& order) {
    buckets.clear();
    bucket_of.assign(params.size(), -1);
    slot_of.assign(params.size(), -1);
    int64_t bytes = 0;
    for (int64_t i : order) {
      const Tensor& p = params[static_cast<size_t>(i)];
      const int64_t b = p.numel() * p.element_size();
      const double cap_mb =
          buckets.size() <= 1 ? options.first_bucket_cap_mb : options.bucket_cap_mb;
      const int64_t cap = static_cast<int64_t>(cap_mb * 1024 * 1024);
      bool fresh = buckets.empty();
      if (!fresh) {
        const Tensor& first = params[static_cast<size_t>(buckets.back().params.front())];
        fresh = first.dtype() != p.dtype() || first.device() != p.device() || bytes + b > cap;
      }
      if (fresh) {
        buckets.emplace_back();
        bytes = 0;
      }
      GradBucket& bk = buckets.back();
      bucket_of[static_cast<size_t>(i)] = static_cast<int64_t>(buckets.size()) - 1;
      slot_of[static_cast<size_t>(i)] = static_cast<int64_t>(bk.params.size());
      bk.offsets.push_back(bk.params.empty()
                               ? 0
                               : bk.offsets.back() +
                                     params[static_cast<size_t>(bk.params.back())].numel());
      bk.params.push_back(i);
      bytes += b;
    }
    for (GradBucket& bk : buckets) {
      const Tensor& first = params[static_cast<size_t>(bk.params.front())];
      const Tensor& last = params[static_cast<size_t>(bk.params.back())];
      bk.flat = zeros({bk.offsets.back() + last.numel()},
                      {.dtype = first.dtype(), .device = first.device()});
    }
  }

  Tensor slot(int64_t i) {
    const GradBucket& bk = buckets[static_cast<size_t>(bucket_of[static_cast<size_t>(i)])];
    const Tensor& p = params[static_cast<size_t>(i)];
    return bk.flat.narrow(0, bk.offsets[static_cast<size_t>(slot_of[static_cast<size_t>(i)])],
                          p.numel());
  }

  void start_iteration() {
    ready.assign(params.size(), 0);
    n_ready = 0;
    next_launch = 0;
    for (GradBucket& bk : buckets) {
      bk.pending = static_cast<int64_t>(bk.params.size());
      bk.work = Work();
    }
  }

  // The hook: parameter i's gradient is final for this backward.
  void on_grad_ready(int64_t i) {
    if (!prepared) return;  // inside no_sync(), or a backward not preceded by our forward
    const size_t k = static_cast<size_t>(i);
    STOKE_CHECK(!ready[k], kDdpOp, "parameter '", names[k],
                "' got a gradient twice in one iteration (a second backward without a forward "
                "through the wrapper?)");
    record(DdpEvent::grad_ready, i);
    if (!rebuilt) ready_order.push_back(i);
    slot(i).copy_(params[k].grad().reshape({-1}));
    mark_ready(i);
  }

  void mark_ready(int64_t i) {
    ready[static_cast<size_t>(i)] = 1;
    ++n_ready;
    --buckets[static_cast<size_t>(bucket_of[static_cast<size_t>(i)])].pending;
    // Buckets start in order, so every rank issues the same collectives in the same order.
    while (next_launch < buckets.size() && buckets[next_launch].pending == 0) launch(next_launch++);
    if (n_ready == static_cast<int64_t>(params.size())) finish();
  }

  void launch(size_t b) {
    ++allreduces;
    record(DdpEvent::allreduce_launched, static_cast<int64_t>(b));
    State* s = this;  // finish() or the destructor waits before the state goes
    Tensor flat = buckets[b].flat;
    buckets[b].work = comm->run_async([s, b, flat]() mutable {
      s->record(DdpEvent::allreduce_started, static_cast<int64_t>(b));
      allreduce(*s->comm, flat, ReduceOp::avg, s->options.algorithm, s->options.ring);
      s->record(DdpEvent::allreduce_finished, static_cast<int64_t>(b));
    });
  }

  // Every gradient is in and every bucket launched: wait, then write the averages back.
  void finish() {
    prepared = false;
    for (GradBucket& bk : buckets) bk.work.wait();
    for (size_t i = 0; i < params.size(); ++i) {
      const Tensor avg = slot(static_cast<int64_t>(i)).reshape(params[i].shape());
      Tensor g = params[i].grad();
      if (g.defined())
        g.copy_(avg);
      else
        params[i].set_grad(avg.clone());  // an unused parameter: the others' average
    }
    if (!rebuilt) rebuild();
  }

  // After the first synchronized iteration: buckets in the order gradients became ready, rank 0's
  // order on every rank (their orders could differ, and buckets must match).
  void rebuild() {
    rebuilt = true;
    std::vector<int64_t> order = ready_order;  // unused parameters (never ready) go last
    std::vector<char> seen(params.size(), 0);
    for (int64_t i : order) seen[static_cast<size_t>(i)] = 1;
    for (size_t i = 0; i < params.size(); ++i)
      if (!seen[i]) order.push_back(static_cast<int64_t>(i));
    Tensor t =
        from_vector<int64_t>(order, {static_cast<int64_t>(order.size())}, {.dtype = DType::i64})
            .to(params.front().device());
    comm->broadcast(t, 0);
    build_buckets(t.to(Device::cpu()).to_vector<int64_t>());
  }

  // Waits for launched work (after an error elsewhere), keeping the first error for the caller.
  void drain() noexcept {
    for (GradBucket& bk : buckets) {
      try {
        if (bk.work.valid()) bk.work.wait();
      } catch (...) {
      }
    }
  }
};

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module,
                                                 Communicator& comm, DdpOptions options)
    : module_(std::move(module)), comm_(comm), state_(std::make_shared<State>()) {
  STOKE_CHECK(module_ != nullptr, kDdpOp, "expected a module, got null");
  STOKE_CHECK(options.bucket_cap_mb > 0 && options.first_bucket_cap_mb > 0, kDdpOp,
              "expected positive bucket caps, got bucket_cap_mb=", options.bucket_cap_mb,
              " first_bucket_cap_mb=", options.first_bucket_cap_mb);
  State& s = *state_;
  s.comm = &comm;
  s.options = options;
  const nn::NamedTensors named = module_->named_parameters();
  check_same_structure(comm, *module_,
                       named.empty() ? Device::cpu() : named.front().second.device());
  for (const auto& [name, p] : module_->named_parameters()) {
    broadcast_from_rank0(comm, p);
    if (!p.requires_grad()) continue;  // frozen: no gradient to average
    s.names.push_back(name);
    s.params.push_back(p);
  }
  s.buffers.emplace(*module_);
  (*s.buffers)(comm);
  // Reverse registration order: backward reaches the last layers first.
  std::vector<int64_t> order(s.params.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(order.size() - 1 - i);
  s.build_buckets(order);
  // The tuner's calibration now, a collective like the checks above, rather than inside the first
  // backward (where it would stall the first bucket); up to the largest bucket (16 MiB at most).
  if (options.algorithm == AllreduceAlgorithm::automatic) {
    int64_t largest = 0;
    for (const GradBucket& b : s.buckets)
      largest = std::max(largest, b.flat.numel() * static_cast<int64_t>(b.flat.element_size()));
    allreduce_model(comm, named.empty() ? Device::cpu() : named.front().second.device(),
                    {.large_bytes = std::clamp<int64_t>(largest, 64 << 10, 16 << 20),
                     .segment_bytes = options.ring.segment_bytes});
  }
  s.start_iteration();
  const std::weak_ptr<State> weak = state_;
  for (size_t i = 0; i < s.params.size(); ++i) {
    s.params[i].register_post_accumulate_grad_hook([weak, i](const Tensor&) {
      if (auto st = weak.lock()) st->on_grad_ready(static_cast<int64_t>(i));
    });
  }
}

DistributedDataParallel::~DistributedDataParallel() {
  state_->drain();
}

Tensor DistributedDataParallel::forward(const Tensor& input) {
  State& s = *state_;
  if (s.prepared && s.n_ready > 0) {
    std::string missing;
    for (size_t i = 0; i < s.params.size(); ++i)
      if (!s.ready[i]) missing += (missing.empty() ? "'" : ", '") + s.names[i] + "'";
    s.drain();
    s.prepared = false;
    throw Error(::stoke::detail::str_cat(
        kDdpOp, ": the last backward gave no gradient to ", missing,
        ", so its gradients were never averaged; use every parameter in forward, or pass "
        "find_unused_parameters = true"));
  }
  s.start_iteration();
  if (s.options.broadcast_buffers && module_->is_training()) (*s.buffers)(comm_);
  Tensor out = module_->forward(input);
  s.prepared = s.require_sync && GradMode::is_enabled() && !s.params.empty();
  if (s.prepared && s.options.find_unused_parameters) {
    // The parameters this output's graph reaches; the others are ready now, with zeros.
    std::unordered_set<const autograd::Node*> seen;
    std::vector<std::shared_ptr<autograd::Node>> stack;
    if (out.grad_fn()) stack.push_back(out.grad_fn());
    while (!stack.empty()) {
      auto n = stack.back();
      stack.pop_back();
      if (!seen.insert(n.get()).second) continue;
      for (const autograd::Edge& e : n->next_edges)
        if (e.node) stack.push_back(e.node);
    }
    for (size_t i = 0; i < s.params.size(); ++i) {
      const autograd::Edge e = autograd::gradient_edge(s.params[i]);
      if (e.node && seen.count(e.node.get())) continue;
      fill_(s.slot(static_cast<int64_t>(i)), 0.0);
      s.mark_ready(static_cast<int64_t>(i));
    }
  }
  return out;
}

DistributedDataParallel::NoSync::NoSync(DistributedDataParallel& ddp)
    : ddp_(ddp), previous_(ddp.state_->require_sync) {
  ddp_.state_->require_sync = false;
}

DistributedDataParallel::NoSync::~NoSync() {
  ddp_.state_->require_sync = previous_;
}

std::vector<std::vector<std::string>> DistributedDataParallel::bucket_parameter_names() const {
  std::vector<std::vector<std::string>> out;
  for (const GradBucket& bk : state_->buckets) {
    out.emplace_back();
    for (int64_t i : bk.params) out.back().push_back(state_->names[static_cast<size_t>(i)]);
  }
  return out;
}

int64_t DistributedDataParallel::allreduce_count() const {
  return state_->allreduces;
}

std::vector<DdpEvent> DistributedDataParallel::events() const {
  std::lock_guard<std::mutex> lock(state_->events_mutex);
  return state_->events;
}

}  // namespace stoke::dist
