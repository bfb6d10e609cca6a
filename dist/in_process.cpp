#include "dist/in_process.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <thread>

#include "dist/reduce_dtype.h"
#include "dist/roll_call.h"

namespace stoke::dist {

using internal::visit_floating;

namespace {

constexpr int kCollectiveTag = -2;  // the native collectives' messages; user tags are >= 0

std::vector<std::byte> copy_bytes(const Tensor& t) {
  const size_t n = static_cast<size_t>(t.numel()) * t.element_size();
  std::vector<std::byte> b(n);
  if (n) std::memcpy(b.data(), t.data_ptr(), n);
  return b;
}

void accumulate(std::vector<double>& acc, const void* src, DType dtype, ReduceOp op, bool first,
                const std::string& label) {
  visit_floating(dtype, label, [&](auto zero) {
    using T = decltype(zero);
    const T* p = static_cast<const T*>(src);
    for (size_t i = 0; i < acc.size(); ++i) {
      double x;
      if constexpr (std::is_same_v<T, double>)
        x = p[i];
      else
        x = static_cast<float>(p[i]);
      if (first)
        acc[i] = x;
      else
        acc[i] = op == ReduceOp::max ? std::max(acc[i], x) : acc[i] + x;
    }
  });
}

// Rounds once, from the f64 accumulator to the tensor's dtype.
void store(const std::vector<double>& acc, size_t begin, size_t n, void* dst, DType dtype,
           const std::string& label) {
  visit_floating(dtype, label, [&](auto zero) {
    using T = decltype(zero);
    T* p = static_cast<T*>(dst);
    for (size_t i = 0; i < n; ++i) {
      if constexpr (std::is_same_v<T, double>)
        p[i] = acc[begin + i];
      else
        p[i] = T(static_cast<float>(acc[begin + i]));
    }
  });
}

std::string what_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

}  // namespace

// --- the group
// ------------------------------------------------------------------------------------

InProcessGroup::InProcessGroup(int size, InProcessOptions options)
    : size_(size), options_(options), started_(static_cast<size_t>(std::max(size, 0)), 0) {
  STOKE_CHECK(size >= 1, "InProcessGroup", "expected at least 1 rank, got ", size);
  for (int r = 0; r < size; ++r) {
    arrived_.push_back(std::make_unique<std::condition_variable>());
    comms_.push_back(std::make_unique<InProcessCommunicator>(*this, r));
  }
}

InProcessGroup::~InProcessGroup() {
  // Non-blocking work still waiting for a peer must not keep its worker thread alive forever.
  abort(-1, "the group was destroyed");
  comms_.clear();
}

InProcessCommunicator& InProcessGroup::communicator(int rank) {
  STOKE_CHECK(rank >= 0 && rank < size_, "InProcessGroup", "rank ", rank,
              " is outside the group of ", size_, " ranks");
  return *comms_[rank];
}

void InProcessGroup::abort(int rank, const std::string& why) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (aborted_) return;
  aborted_ = true;
  failed_rank_ = rank;
  why_ = why;
  for (auto& cv : arrived_) cv->notify_all();
}

int InProcessGroup::failed_rank() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return failed_rank_;
}

void InProcessGroup::fail(int rank, const std::string& label, const std::string& message) {
  const std::string what = "stoke::" + label + ": " + message;
  abort(rank, what);
  throw Error(what);
}

namespace {
[[noreturn]] void throw_aborted(const std::string& label, int failed_rank, const std::string& why) {
  if (failed_rank < 0) STOKE_FAIL(label.c_str(), "aborted: ", why);
  STOKE_FAIL(label.c_str(), "aborted because rank ", failed_rank, " failed: ", why);
}
}  // namespace

void InProcessGroup::post(int src, int dst, int tag, Message message) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (aborted_) throw_aborted(message.label, failed_rank_, why_);
  mailboxes_[{src, dst, tag}].push_back(std::move(message));
  arrived_[dst]->notify_all();
}

InProcessGroup::Message InProcessGroup::take(int src, int dst, int tag, const std::string& label) {
  std::unique_lock<std::mutex> lock(mutex_);
  const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
  std::deque<Message>& box = mailboxes_[{src, dst, tag}];
  for (;;) {
    if (!box.empty()) break;  // what was sent before the abort is still delivered
    if (aborted_) throw_aborted(label, failed_rank_, why_);
    if (arrived_[dst]->wait_until(lock, deadline) == std::cv_status::timeout && box.empty() &&
        !aborted_) {
      const double s = std::chrono::duration<double>(options_.timeout).count();
      // Name the ranks that never started the collective this rank is in, if any: the one
      // waited for may itself be waiting for them.
      std::string missing;
      for (int r = 0; r < size_; ++r)
        if (started_[r] < started_[dst])
          missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      lock.unlock();
      fail(dst, label,
           missing.empty()
               ? detail::str_cat("rank ", dst, " timed out after ", s, " s waiting for rank ", src)
               : detail::str_cat("rank ", dst, " timed out after ", s, " s: rank",
                                 missing.find(',') == std::string::npos ? " " : "s ", missing,
                                 " did not arrive"));
    }
  }
  Message m = std::move(box.front());
  box.pop_front();
  return m;
}

// --- one rank
// -------------------------------------------------------------------------------------

InProcessCommunicator::~InProcessCommunicator() {
  stop_worker();
}

std::string InProcessCommunicator::roll_call(int64_t seq, std::chrono::milliseconds grace,
                                             int channel) {
  std::unique_lock<std::mutex> lock(group_.mutex_);
  std::vector<int64_t>& heard = group_.roll_[channel];
  if (heard.empty()) heard.assign(static_cast<size_t>(group_.size_), kRollCallNotHeard);
  heard[static_cast<size_t>(rank_)] = seq;
  group_.roll_cv_.notify_all();
  group_.roll_cv_.wait_for(lock, grace, [&] {
    return std::none_of(heard.begin(), heard.end(),
                        [](int64_t h) { return h == kRollCallNotHeard; });
  });
  return describe_roll_call(heard, seq, grace);
}

void InProcessCommunicator::on_collective_start(int64_t seq) {
  std::lock_guard<std::mutex> lock(group_.mutex_);
  group_.started_[rank_] = seq + 1;
}

void InProcessCommunicator::fail(const std::string& message) {
  group_.fail(rank_, op_label(), message);
}

InProcessGroup::Message InProcessCommunicator::message(const Tensor& t, int64_t op) const {
  STOKE_CHECK(t.device().is_cpu(), op_label().c_str(),
              "the in-process communicator takes cpu tensors, got one on ", t.device().str());
  return Message{.label = op_label(),
                 .dtype = t.dtype(),
                 .numel = t.numel(),
                 .op = op,
                 .bytes = copy_bytes(t)};
}

void InProcessCommunicator::do_send(const Tensor& t, int dst, int tag) {
  group_.post(rank_, dst, tag, message(t, -1));
}

void InProcessCommunicator::receive_into(const Tensor& t, int src, int tag) {
  STOKE_CHECK(t.device().is_cpu(), op_label().c_str(),
              "the in-process communicator takes cpu tensors, got one on ", t.device().str());
  Message m = group_.take(src, rank_, tag, op_label());
  if (m.numel != t.numel())
    fail(detail::str_cat("rank ", rank_, " expected ", t.numel(), " elements, rank ", src, " sent ",
                         m.numel));
  if (m.dtype != t.dtype())
    fail(detail::str_cat("rank ", rank_, " expected ", t.dtype(), ", rank ", src, " sent ",
                         m.dtype));
  if (!m.bytes.empty()) std::memcpy(t.data_ptr(), m.bytes.data(), m.bytes.size());
}

void InProcessCommunicator::complete_posted(int src, int tag, int64_t last) {
  // The mailbox of (src, tag) is first in, first out: taking in post order matches MPI's rule.
  size_t kept = 0;
  bool done = false;
  for (size_t i = 0; i < posted_.size(); ++i) {
    PostedRecv& p = posted_[i];
    if (!done && p.src == src && p.tag == tag) {
      done = p.id == last;
      receive_into(p.t, src, tag);
      continue;
    }
    if (kept != i) posted_[kept] = std::move(p);
    ++kept;
  }
  posted_.resize(kept);
}

void InProcessCommunicator::do_recv(Tensor& t, int src, int tag) {
  complete_posted(src, tag, -1);  // receives posted earlier match first
  receive_into(t, src, tag);
}

void InProcessCommunicator::do_sendrecv(const Tensor& out, int dst, Tensor& in, int src, int tag) {
  do_send(out, dst, tag);  // buffered: never waits, so sending first cannot deadlock
  do_recv(in, src, tag);
}

int64_t InProcessCommunicator::do_isend(const Tensor& t, int dst, int tag) {
  do_send(t, dst, tag);  // buffered: the copy is in the mailbox, nothing left to wait for
  return -1;
}

int64_t InProcessCommunicator::do_irecv(const Tensor& t, int src, int tag) {
  STOKE_CHECK(t.device().is_cpu(), op_label().c_str(),
              "the in-process communicator takes cpu tensors, got one on ", t.device().str());
  posted_.push_back({next_recv_id_, t, src, tag});
  return next_recv_id_++;
}

void InProcessCommunicator::do_wait(int64_t id) {
  for (const PostedRecv& p : posted_)
    if (p.id == id) return complete_posted(p.src, p.tag, id);
  // Not posted (any more): completed by an earlier wait or blocking recv of the same rank and tag.
}

std::vector<InProcessGroup::Message> InProcessCommunicator::gather_to_root(const Tensor& t,
                                                                           int64_t op) {
  Message mine = message(t, op);
  std::vector<Message> in(size());
  if (rank_ != 0) {
    group_.post(rank_, 0, kCollectiveTag, std::move(mine));
    return in;
  }
  for (int r = 1; r < size(); ++r) {
    in[r] = group_.take(r, 0, kCollectiveTag, op_label());
    const Message& m = in[r];
    if (m.label != mine.label)
      fail(detail::str_cat("rank ", r, " called ", m.label, " while rank 0 called ", mine.label));
    if (m.numel != mine.numel)
      fail(detail::str_cat("rank ", r, " has ", m.numel, " elements, rank 0 has ", mine.numel));
    if (m.dtype != mine.dtype)
      fail(detail::str_cat("rank ", r, " has dtype ", m.dtype, ", rank 0 has ", mine.dtype));
    if (m.op != mine.op)
      fail(detail::str_cat("rank ", r, " passed ", m.op, ", rank 0 passed ", mine.op,
                           " (the reduce op or root must agree)"));
  }
  in[0] = std::move(mine);
  return in;
}

bool InProcessCommunicator::reduce_on_root(const Tensor& mine, Tensor& result, ReduceOp op,
                                           std::vector<double>& acc) {
  const std::vector<Message> in = gather_to_root(mine, static_cast<int64_t>(op));
  if (rank_ != 0) {
    do_recv(result, 0, kCollectiveTag);
    return false;
  }
  acc.assign(static_cast<size_t>(mine.numel()), 0.0);
  for (int r = 0; r < size(); ++r)
    accumulate(acc, in[r].bytes.data(), mine.dtype(), op, r == 0, op_label());
  if (op == ReduceOp::avg)
    for (double& v : acc) v /= size();
  return true;
}

void InProcessCommunicator::do_allreduce(Tensor& t, ReduceOp op) {
  std::vector<double> acc;
  if (!reduce_on_root(t, t, op, acc)) return;
  store(acc, 0, acc.size(), t.data_ptr(), t.dtype(), op_label());
  for (int r = 1; r < size(); ++r) group_.post(0, r, kCollectiveTag, message(t, -1));
}

void InProcessCommunicator::do_reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op) {
  std::vector<double> acc;
  if (!reduce_on_root(input, output, op, acc)) return;
  const size_t block = static_cast<size_t>(output.numel());
  for (int r = size() - 1; r >= 0; --r) {  // rank 0's block last: output is reused as the buffer
    store(acc, r * block, block, output.data_ptr(), output.dtype(), op_label());
    if (r != 0) group_.post(0, r, kCollectiveTag, message(output, -1));
  }
}

void InProcessCommunicator::do_allgather(const Tensor& input, Tensor& output) {
  std::vector<Message> in = gather_to_root(input, -1);
  if (rank_ == 0) {
    const size_t block = static_cast<size_t>(input.numel()) * input.element_size();
    auto* out = static_cast<std::byte*>(output.data_ptr());
    for (int r = 0; r < size(); ++r)
      if (block) std::memcpy(out + r * block, in[r].bytes.data(), block);
    for (int r = 1; r < size(); ++r) group_.post(0, r, kCollectiveTag, message(output, -1));
  } else {
    do_recv(output, 0, kCollectiveTag);
  }
}

void InProcessCommunicator::do_broadcast(Tensor& t, int root) {
  // Through rank 0 like the others, so that every rank's count, dtype and root are checked.
  std::vector<Message> in = gather_to_root(t, root);
  if (rank_ == 0) {
    Message& from_root = in[root];
    if (!from_root.bytes.empty())
      std::memcpy(t.data_ptr(), from_root.bytes.data(), from_root.bytes.size());
    for (int r = 1; r < size(); ++r) group_.post(0, r, kCollectiveTag, message(t, -1));
  } else {
    do_recv(t, 0, kCollectiveTag);
  }
}

void InProcessCommunicator::do_barrier() {
  Tensor token = empty({0});
  gather_to_root(token, -1);
  if (rank_ == 0) {
    for (int r = 1; r < size(); ++r) group_.post(0, r, kCollectiveTag, message(token, -1));
  } else {
    do_recv(token, 0, kCollectiveTag);
  }
}

// --- run_ranks
// ------------------------------------------------------------------------------------

void run_ranks(int size, const std::function<void(Communicator&)>& fn, RunRanksOptions options) {
  InProcessGroup group(size, {.timeout = options.timeout});
  std::vector<std::exception_ptr> errors(size);
  std::vector<std::thread> threads;
  threads.reserve(size);
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(group.communicator(r));
      } catch (...) {
        errors[r] = std::current_exception();
        group.abort(r, what_of(errors[r]));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const int failed = group.failed_rank();
  if (failed >= 0 && errors[failed]) std::rethrow_exception(errors[failed]);
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace stoke::dist
