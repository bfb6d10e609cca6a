#include "dist/communicator.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "core/enum_name.h"
#include "core/profiler.h"
#include "dist/roll_call.h"
#include "ops/creation.h"

namespace stoke::dist {

const char* reduce_op_name(ReduceOp op) {
  static constexpr const char* names[] = {"sum", "avg", "max"};
  static_assert(std::size(names) == enum_count(ReduceOp::max));
  return enum_name(op, names, "?");
}

void Work::wait() const {
  STOKE_CHECK(state_, "Work::wait", "this Work handle holds no work");
  const profiler::Range range("comm wait", profiler::Category::comm);
  std::unique_lock<std::mutex> lock(state_->mutex);
  state_->cv.wait(lock, [&] { return state_->done; });
  if (state_->error) std::rethrow_exception(state_->error);
}

bool Work::is_completed() const {
  if (!state_) return false;
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->done;
}

Communicator::~Communicator() {
  stop_worker();
}

double bus_bytes(BusPattern pattern, const Tensor& whole, int ranks) {
  if (!whole.defined() || ranks < 1) return 0;
  const double bytes =
      static_cast<double>(whole.numel()) * static_cast<double>(whole.element_size());
  const double spread = static_cast<double>(ranks - 1) / ranks;
  switch (pattern) {
    case BusPattern::allreduce:
      return 2 * spread * bytes;
    case BusPattern::sharded:
      return spread * bytes;
    case BusPattern::broadcast:
      return bytes;
  }
  return 0;
}

Communicator::Scope::Scope(Communicator& comm, const char* name, double bus_bytes)
    : comm_(comm), saved_label_(comm.label_), seq_(comm.next_seq_++) {
  comm_.label_ = detail::str_cat(name, " #", seq_);
  if (comm_.scope_depth_ == 0 && profiler::enabled()) {
    profiler::next_range_bus_bytes(bus_bytes);
    profiler::detail::begin(name, profiler::Category::collective);
    profiled_ = true;
  }
  ++comm_.scope_depth_;
  comm_.on_collective_start(seq_);
}

Communicator::Scope::~Scope() {
  if (profiled_) profiler::detail::end();
  --comm_.scope_depth_;
  comm_.label_ = std::move(saved_label_);
}

namespace {

void check_tensor(const Tensor& t, const std::string& op, const char* what) {
  STOKE_CHECK(t.defined(), op.c_str(), what, " is an undefined tensor");
  STOKE_CHECK(t.is_contiguous(), op.c_str(), what, " must be contiguous, got strides ", t.strides(),
              " for shape ", t.shape());
}

// reduce_scatter's and allgather's operands: both usable, in one dtype, and the whole one (the
// input of reduce_scatter, the output of allgather) with size() x the other's elements.
void check_sharded(const Communicator& c, const Tensor& input, const Tensor& output,
                   bool input_is_whole) {
  const std::string& op = c.op_label();
  check_tensor(input, op, "the input");
  check_tensor(output, op, "the output");
  const Tensor& whole = input_is_whole ? input : output;
  const Tensor& part = input_is_whole ? output : input;
  STOKE_CHECK(whole.numel() == part.numel() * c.size(), op.c_str(), "rank ", c.rank(), ": the ",
              input_is_whole ? "input" : "output", " must have ", c.size(), " x ", part.numel(),
              " elements (ranks x ", input_is_whole ? "output" : "input", "), got ", whole.numel());
  STOKE_CHECK(input.dtype() == output.dtype(), op.c_str(), "rank ", c.rank(), ": input dtype ",
              input.dtype(), " differs from output dtype ", output.dtype());
}

void check_peer(const Communicator& c, int peer, const char* what) {
  STOKE_CHECK(peer >= 0 && peer < c.size(), c.op_label().c_str(), what, " rank ", peer,
              " is outside the group of ", c.size(), " ranks");
}

}  // namespace

// A point-to-point call outside a collective is named by itself; inside one (a ring step), the
// collective's label stays so that errors name the collective and its sequence number.
class Communicator::P2pLabel {
 public:
  P2pLabel(Communicator& c, const char* name) : c_(c) {
    if (c_.scope_depth_ == 0) c_.label_ = name;
  }
  ~P2pLabel() {
    if (c_.scope_depth_ == 0) c_.label_.clear();
  }

 private:
  Communicator& c_;
};

void Communicator::send(const Tensor& t, int dst, int tag) {
  run_in_order([&] {
    P2pLabel label(*this, "send");
    check_tensor(t, label_, "the sent tensor");
    check_peer(*this, dst, "destination");
    do_send(t, dst, tag);
    count_sent(t);
  });
}

void Communicator::recv(Tensor& t, int src, int tag) {
  run_in_order([&] {
    P2pLabel label(*this, "recv");
    check_tensor(t, label_, "the receiving tensor");
    check_peer(*this, src, "source");
    do_recv(t, src, tag);
  });
}

void Communicator::sendrecv(const Tensor& out, int dst, Tensor& in, int src, int tag) {
  run_in_order([&] {
    P2pLabel label(*this, "sendrecv");
    check_tensor(out, label_, "the sent tensor");
    check_tensor(in, label_, "the receiving tensor");
    check_peer(*this, dst, "destination");
    check_peer(*this, src, "source");
    do_sendrecv(out, dst, in, src, tag);
    count_sent(out);
  });
}

void Communicator::count_sent(const Tensor& t) {
  sent_messages_.fetch_add(1, std::memory_order_relaxed);
  sent_bytes_.fetch_add(t.numel() * static_cast<int64_t>(t.element_size()),
                        std::memory_order_relaxed);
}

P2pCounters Communicator::p2p_sent() const {
  return {sent_messages_.load(std::memory_order_relaxed),
          sent_bytes_.load(std::memory_order_relaxed)};
}

Request Communicator::isend(const Tensor& t, int dst, int tag) {
  int64_t id = -1;
  run_in_order([&] {
    P2pLabel label(*this, "isend");
    check_tensor(t, label_, "the sent tensor");
    check_peer(*this, dst, "destination");
    id = do_isend(t, dst, tag);
    count_sent(t);
  });
  return Request(id);
}

Request Communicator::irecv(Tensor& t, int src, int tag) {
  int64_t id = -1;
  run_in_order([&] {
    P2pLabel label(*this, "irecv");
    check_tensor(t, label_, "the receiving tensor");
    check_peer(*this, src, "source");
    id = do_irecv(t, src, tag);
  });
  return Request(id);
}

void Communicator::wait(Request& request) {
  if (!request.pending()) return;
  const int64_t id = request.id_;
  request.id_ = -1;  // waited for, even if the wait throws: a second wait must not repeat it
  run_in_order([&] {
    P2pLabel label(*this, "wait");
    do_wait(id);
  });
}

int64_t Communicator::do_isend(const Tensor& t, int dst, int tag) {
  deferred_.push_back({next_deferred_id_, true, t, dst, tag});
  return next_deferred_id_++;
}

int64_t Communicator::do_irecv(const Tensor& t, int src, int tag) {
  deferred_.push_back({next_deferred_id_, false, t, src, tag});
  return next_deferred_id_++;
}

void Communicator::do_wait(int64_t id) {
  // Everything posted up to `id` runs now, in post order, a send next to a receive of the same tag
  // as one sendrecv (pairs formed from the oldest pending operation on, so that the pair holding
  // `id` runs whole).
  auto pairs = [&](size_t i) {
    return i + 1 < deferred_.size() && deferred_[i].send != deferred_[i + 1].send &&
           deferred_[i].tag == deferred_[i + 1].tag;
  };
  size_t end = 0;
  while (end < deferred_.size() && deferred_[end].id <= id) end += pairs(end) ? 2 : 1;
  std::vector<DeferredP2p> run(std::make_move_iterator(deferred_.begin()),
                               std::make_move_iterator(deferred_.begin() + end));
  deferred_.erase(deferred_.begin(), deferred_.begin() + end);
  for (size_t i = 0; i < run.size(); ++i) {
    DeferredP2p& a = run[i];
    if (i + 1 < run.size() && run[i + 1].send != a.send && run[i + 1].tag == a.tag) {
      DeferredP2p& b = run[++i];
      DeferredP2p& s = a.send ? a : b;
      DeferredP2p& r = a.send ? b : a;
      do_sendrecv(s.t, s.peer, r.t, r.peer, s.tag);
    } else if (a.send) {
      do_send(a.t, a.peer, a.tag);
    } else {
      do_recv(a.t, a.peer, a.tag);
    }
  }
}

std::shared_ptr<const AllreduceModel> Communicator::cached_allreduce_model() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return model_;
}

void Communicator::cache_allreduce_model(std::shared_ptr<const AllreduceModel> model) {
  std::lock_guard<std::mutex> lock(mutex_);
  model_ = std::move(model);
  model_in_order_.store(model_.get(), std::memory_order_release);
}

void Communicator::do_sendrecv(const Tensor& out, int dst, Tensor& in, int src, int tag) {
  if (rank() % 2 == 0) {
    do_send(out, dst, tag);
    do_recv(in, src, tag);
  } else {
    do_recv(in, src, tag);
    do_send(out, dst, tag);
  }
}

void Communicator::allreduce(Tensor& t, ReduceOp op) {
  run_in_order([&] {
    Scope scope(*this, "allreduce", bus_bytes(BusPattern::allreduce, t, size()));
    check_tensor(t, label_, "the tensor");
    do_allreduce(t, op);
  });
}

void Communicator::reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op) {
  run_in_order([&] {
    Scope scope(*this, "reduce_scatter", bus_bytes(BusPattern::sharded, input, size()));
    check_sharded(*this, input, output, true);
    do_reduce_scatter(input, output, op);
  });
}

void Communicator::allgather(const Tensor& input, Tensor& output) {
  run_in_order([&] {
    Scope scope(*this, "allgather", bus_bytes(BusPattern::sharded, output, size()));
    check_sharded(*this, input, output, false);
    do_allgather(input, output);
  });
}

void Communicator::broadcast(Tensor& t, int root) {
  run_in_order([&] {
    Scope scope(*this, "broadcast", bus_bytes(BusPattern::broadcast, t, size()));
    check_tensor(t, label_, "the tensor");
    check_peer(*this, root, "root");
    do_broadcast(t, root);
  });
}

void Communicator::barrier() {
  run_in_order([&] {
    Scope scope(*this, "barrier");
    do_barrier();
  });
}

Work Communicator::allreduce_async(Tensor t, ReduceOp op) {
  return run_async([this, t, op]() mutable { allreduce(t, op); });
}

Work Communicator::reduce_scatter_async(Tensor input, Tensor output, ReduceOp op) {
  return run_async([this, input, output, op]() mutable { reduce_scatter(input, output, op); });
}

Work Communicator::allgather_async(Tensor input, Tensor output) {
  return run_async([this, input, output]() mutable { allgather(input, output); });
}

Work Communicator::broadcast_async(Tensor t, int root) {
  return run_async([this, t, root]() mutable { broadcast(t, root); });
}

Work Communicator::barrier_async() {
  return run_async([this] { barrier(); });
}

Work Communicator::run_async(std::function<void()> fn) {
  fn = bind_caller_context(std::move(fn));
  auto state = std::make_shared<Work::State>();
  std::vector<Job> finished;  // released here, on the user thread, after the lock
  std::lock_guard<std::mutex> lock(mutex_);
  finished.swap(finished_);
  STOKE_CHECK(!stopping_, "run_async", "the communicator is shutting down");
  if (!worker_.joinable()) {
    worker_ = std::thread([this] { worker_loop(); });
    worker_id_ = worker_.get_id();
  }
  queue_.push_back({std::move(fn), state});
  ++pending_;
  cv_.notify_all();
  return Work(std::move(state));
}

void Communicator::run_in_order(const std::function<void()>& fn) {
  bool here;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // On the worker (a run_async body calling send/recv) or with nothing pending: run here.
    here = pending_ == 0 || std::this_thread::get_id() == worker_id_;
  }
  if (here) {
    fn();
  } else {
    run_async([&fn] { fn(); }).wait();
  }
}

void Communicator::worker_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and everything queued has run
    Job job = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    std::exception_ptr error;
    try {
      job.fn();
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> done(job.state->mutex);
      job.state->error = std::move(error);
      job.state->done = true;
      job.state->cv.notify_all();
    }
    lock.lock();
    finished_.push_back(std::move(job));
    --pending_;
  }
}

void Communicator::stop_worker() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    cv_.notify_all();
  }
  if (worker_.joinable() && std::this_thread::get_id() != worker_.get_id()) worker_.join();
}

std::string describe_roll_call(const std::vector<int64_t>& heard, int64_t seq,
                               std::chrono::milliseconds grace) {
  std::string absent, elsewhere;
  for (size_t r = 0; r < heard.size(); ++r) {
    const int64_t h = heard[r];
    if (h == kRollCallNotHeard)
      absent += ::stoke::detail::str_cat(absent.empty() ? "" : ", ", r);
    else if (h != seq)
      elsewhere += ::stoke::detail::str_cat("; rank ", r, " is stuck in ",
                                            h < 0 ? std::string("a point-to-point call")
                                                  : ::stoke::detail::str_cat("collective #", h));
  }
  const double g = std::chrono::duration<double>(grace).count();
  if (absent.empty() && elsewhere.empty())
    return ::stoke::detail::str_cat("; every rank answered from the same call within ", g, " s");
  if (absent.empty()) return elsewhere;
  return ::stoke::detail::str_cat("; rank", absent.find(',') == std::string::npos ? " " : "s ",
                                  absent, " did not arrive (no answer within ", g,
                                  " s: stopped, dead, or busy outside stoke's collectives)",
                                  elsewhere);
}

std::vector<std::string> allgather_strings(Communicator& comm, const std::string& mine,
                                           Device device) {
  const int n = comm.size();
  Tensor len = from_vector<int64_t>({static_cast<int64_t>(mine.size())}, {1}, {.dtype = DType::i64})
                   .to(device);
  Tensor lens = empty({n}, {.dtype = DType::i64, .device = device});
  comm.allgather(len, lens);
  const std::vector<int64_t> sizes = lens.to(Device::cpu()).to_vector<int64_t>();
  const int64_t longest = std::max<int64_t>(1, *std::max_element(sizes.begin(), sizes.end()));
  Tensor bytes = zeros({longest}, {.dtype = DType::u8});
  std::copy(mine.begin(), mine.end(), bytes.data<uint8_t>());
  Tensor all = empty({n * longest}, {.dtype = DType::u8, .device = device});
  comm.allgather(bytes.to(device), all);
  all = all.to(Device::cpu());
  std::vector<std::string> texts;
  for (int r = 0; r < n; ++r) {
    const char* p = reinterpret_cast<const char*>(all.data<uint8_t>()) + r * longest;
    texts.emplace_back(p, p + sizes[static_cast<size_t>(r)]);
  }
  return texts;
}

}  // namespace stoke::dist
