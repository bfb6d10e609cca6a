// The in-process engine: N ranks are N threads of one process, exchanging tensors through shared
// memory mailboxes. It is what the dist/ tests run on (fast, and visible to ThreadSanitizer), and
// its collectives (gather to rank 0, reduce in f64, send back) are the reference "native" engine
// stoke's ring is compared with.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "dist/communicator.h"

namespace stoke::dist {

struct InProcessOptions {
  // A call that waits longer than this for another rank aborts the group, naming the collective,
  // its sequence number and the rank that did not arrive (the watchdog).
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
};

class InProcessCommunicator;

// The shared state of one group. A failing rank aborts it (abort(), or any error a communicator
// detects itself): every call waiting in the group, and every later call, then throws
// "stoke::<collective>: aborted because rank R failed: <its error>".
class InProcessGroup {
 public:
  explicit InProcessGroup(int size, InProcessOptions options = {});
  ~InProcessGroup();
  InProcessGroup(const InProcessGroup&) = delete;
  InProcessGroup& operator=(const InProcessGroup&) = delete;

  int size() const { return size_; }
  InProcessCommunicator& communicator(int rank);

  // The first abort wins; later ones are ignored. rank -1: the group itself (destroyed).
  void abort(int rank, const std::string& why);
  // The rank whose failure aborted the group, or -1.
  int failed_rank() const;

 private:
  friend class InProcessCommunicator;
  struct Message {
    std::string label;  // the collective and its sequence number, for matching ("allreduce #3")
    DType dtype = DType::f32;
    int64_t numel = 0;
    int64_t op = -1;  // ReduceOp or root, checked to agree across ranks
    std::vector<std::byte> bytes;
  };
  void post(int src, int dst, int tag, Message message);
  // Waits for the next message from src to dst with this tag; `label` names the caller in errors.
  Message take(int src, int dst, int tag, const std::string& label);
  [[noreturn]] void fail(int rank, const std::string& label, const std::string& message);

  const int size_;
  const InProcessOptions options_;
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<std::condition_variable>> arrived_;       // one per destination rank
  std::map<std::tuple<int, int, int>, std::deque<Message>> mailboxes_;  // (src, dst, tag)
  bool aborted_ = false;
  int failed_rank_ = -1;
  std::string why_;
  std::vector<int64_t> started_;  // per rank: how many collectives it has started
  // roll_call(): per channel, what each rank answered (kRollCallNotHeard until it does).
  std::map<int, std::vector<int64_t>> roll_;
  std::condition_variable roll_cv_;
  std::vector<std::unique_ptr<InProcessCommunicator>> comms_;
};

// One rank of an InProcessGroup. Sends are buffered (a copy goes to the mailbox and send returns),
// so any order of sends and receives that would complete with unbounded buffers completes here.
class InProcessCommunicator final : public Communicator {
 public:
  InProcessCommunicator(InProcessGroup& group, int rank) : group_(group), rank_(rank) {}
  ~InProcessCommunicator() override;
  int rank() const override { return rank_; }
  int size() const override { return group_.size(); }
  // Through the group's shared memory: a rank answers when its own roll_call() runs.
  std::string roll_call(int64_t seq, std::chrono::milliseconds grace, int channel) override;

 protected:
  STOKE_COMMUNICATOR_ENGINE_OVERRIDES
  void on_collective_start(int64_t seq) override;

 private:
  using Message = InProcessGroup::Message;
  Message message(const Tensor& t, int64_t op) const;
  // Rank 0 gets every other rank's contribution (index r), checked against its own.
  std::vector<Message> gather_to_root(const Tensor& t, int64_t op);
  // allreduce's and reduce_scatter's first half: every rank's `mine` reduced on rank 0 into acc
  // (true there); any other rank receives `result` from rank 0 instead (false).
  bool reduce_on_root(const Tensor& mine, Tensor& result, ReduceOp op, std::vector<double>& acc);
  [[noreturn]] void fail(const std::string& message);
  // Takes the next message from src with tag into t, checking its count and dtype.
  void receive_into(const Tensor& t, int src, int tag);
  // Completes the posted receives from src with tag, in post order, up to and including the one
  // with id `last` (every one when last < 0).
  void complete_posted(int src, int tag, int64_t last);

  InProcessGroup& group_;
  const int rank_;
  struct PostedRecv {
    int64_t id;
    Tensor t;
    int src, tag;
  };
  std::vector<PostedRecv> posted_;  // irecvs not yet matched, in post order
  int64_t next_recv_id_ = 0;
};

struct RunRanksOptions {
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
};

// Runs fn on `size` threads, one per rank of a fresh InProcessGroup, and joins them. A rank that
// throws aborts the group (so the others throw instead of hanging); then the first failure, the
// error of the rank that aborted the group, is rethrown here.
void run_ranks(int size, const std::function<void(Communicator&)>& fn,
               RunRanksOptions options = {});

}  // namespace stoke::dist
