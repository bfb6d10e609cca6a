// The communicator: ranks of a data-parallel job exchanging tensors (docs/design.md, "dist/").
// Engines implement the virtual do_* methods (InProcessCommunicator here; MPI and NCCL later);
// stoke's own ring (dist/ring.h) is built on send/recv of any of them.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/tensor.h"

namespace stoke::dist {

enum class ReduceOp { sum, avg, max };
const char* reduce_op_name(ReduceOp op);

// A collective's bus bytes, as nccl-tests counts them (its bus bandwidth is these over the time):
// allreduce moves 2 (n - 1) / n of the buffer, reduce_scatter and allgather (n - 1) / n of the
// whole buffer (the reduce_scatter's input, the allgather's output), broadcast all of it.
enum class BusPattern { allreduce, sharded, broadcast };
double bus_bytes(BusPattern pattern, const Tensor& whole, int ranks);

struct AllreduceModel;  // dist/tuner.h: the calibrated cost model, cached per communicator

// A pending non-blocking send or receive (Communicator::isend/irecv). Communicator::wait completes
// it; a request that was never posted, or was already waited for, is not pending.
class Request {
 public:
  Request() = default;
  bool pending() const { return id_ >= 0; }

 private:
  friend class Communicator;
  explicit Request(int64_t id) : id_(id) {}
  int64_t id_ = -1;
};

// Point-to-point traffic a communicator sent (send, sendrecv, isend), counted per message: what
// the algorithms built on send/recv cost in messages, for tests and the benchmark.
struct P2pCounters {
  int64_t messages = 0;
  int64_t bytes = 0;
};

// A handle on non-blocking work. wait() blocks until the work is done and rethrows its error;
// waiting twice is allowed (the second returns or throws at once).
class Work {
 public:
  // Shared by the handle and the worker thread. The worker hands over the error under the mutex
  // and keeps no reference to it, so that only the waiting thread touches the exception object
  // afterwards (exception_ptr's count lives in uninstrumented libstdc++, invisible to TSan).
  struct State {
    std::mutex mutex;
    std::condition_variable cv;
    bool done = false;
    std::exception_ptr error;
  };
  Work() = default;
  explicit Work(std::shared_ptr<State> state) : state_(std::move(state)) {}
  void wait() const;
  bool is_completed() const;  // true once it finished, successfully or not
  bool valid() const { return state_ != nullptr; }

 private:
  std::shared_ptr<State> state_;
};

// One rank's end of a group. Collectives are matched across ranks by the order in which they are
// issued, so every rank must issue the same collectives in the same order; each carries a sequence
// number (0, 1, ...) that errors name: "stoke::allreduce #12: rank 1 has 999 elements, rank 0 has
// 1000". Tensors are contiguous; collectives work in place.
//
// A Communicator is driven by one user thread at a time. Non-blocking calls (*_async) run, in
// issue order, on a worker thread that each communicator starts on first use; a blocking call
// issued while non-blocking work is pending queues behind it, so issue order is always kept.
class Communicator {
 public:
  virtual ~Communicator();
  Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int local_rank() const { return rank(); }  // this rank's index on its machine

  // Where the other ranks are, asked by a stuck rank's watchdog, also the watchdog of another
  // communicator bootstrapped from this one (NcclCommunicator::bootstrap): tells every other rank
  // which collective it is stuck in (seq, or -1 for a point-to-point call) and listens for theirs
  // for `grace`. Every live rank whose watchdog fires calls it, so a rank not heard from is
  // stopped, dead or busy elsewhere. Returns "; rank 1 did not arrive (...)" and the like, or ""
  // where the engine cannot ask (the default). `channel` keeps the roll calls of different
  // communicators apart (0: this one's own).
  virtual std::string roll_call(int64_t seq, std::chrono::milliseconds grace, int channel) {
    (void)seq, (void)grace, (void)channel;
    return "";
  }

  // Point to point, tags >= 0 (negative tags are stoke's own). Messages between two ranks with the
  // same tag arrive in the order they were sent; recv checks the element count and dtype.
  void send(const Tensor& t, int dst, int tag = 0);
  void recv(Tensor& t, int src, int tag = 0);
  // Sends `out` to dst and receives `in` from src without deadlocking when every rank of a ring
  // calls it at once, whether or not the engine buffers sends.
  void sendrecv(const Tensor& out, int dst, Tensor& in, int src, int tag = 0);

  // Non-blocking point to point, MPI's semantics: the tensor must stay alive and untouched (a send
  // buffer unmodified, a receive buffer unread) until wait() returns. Receives from one rank with
  // one tag match its messages in the order the receives were posted, whatever the order of the
  // waits. Every request must be waited for. How far an engine gets before the wait is its own:
  // in-process sends are copied at once, MPI posts MPI_Isend/MPI_Irecv, NCCL issues the pending
  // sends and receives as one group once both a send and a receive are pending (or at a wait), and
  // an engine without non-blocking calls runs them at the wait (the default below).
  Request isend(const Tensor& t, int dst, int tag = 0);
  Request irecv(Tensor& t, int src, int tag = 0);
  void wait(Request& request);  // afterwards request is not pending; a non-pending one returns
  // Messages and bytes this rank has sent so far (thread-safe to read).
  P2pCounters p2p_sent() const;

  // Collectives, the engine's own ("native") algorithms.
  void allreduce(Tensor& t, ReduceOp op = ReduceOp::sum);
  // input has size() * output.numel() elements; rank r gets the reduction of block r.
  void reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op = ReduceOp::sum);
  // output has size() * input.numel() elements; block r is rank r's input.
  void allgather(const Tensor& input, Tensor& output);
  void broadcast(Tensor& t, int root);
  void barrier();

  // Non-blocking versions: the tensors must stay alive and untouched until wait() returns.
  Work allreduce_async(Tensor t, ReduceOp op = ReduceOp::sum);
  Work reduce_scatter_async(Tensor input, Tensor output, ReduceOp op = ReduceOp::sum);
  Work allgather_async(Tensor input, Tensor output);
  Work broadcast_async(Tensor t, int root);
  Work barrier_async();
  // Runs fn on the worker thread in order with the other non-blocking calls (e.g. a ring
  // allreduce: comm.run_async([&] { ring_allreduce(comm, t); })).
  Work run_async(std::function<void()> fn);

  // Runs fn here now, or, while non-blocking work is pending, on the worker after it (and waits):
  // the entry point of algorithms built on send/recv (dist/ring.h), which open a Scope inside.
  void run_in_order(const std::function<void()>& fn);

  // For algorithms built on send/recv, inside run_in_order: numbers the next collective and names
  // it in the errors this communicator throws until the returned scope ends.
  class Scope {
   public:
    // The outermost scope of a collective is also a profiler range (Category::collective) named
    // `name` (a string literal), with `bus_bytes` (bus_bytes(): nccl-tests' accounting) for the
    // trace's bus bandwidth.
    Scope(Communicator& comm, const char* name, double bus_bytes = 0);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    int64_t seq() const { return seq_; }

   private:
    Communicator& comm_;
    std::string saved_label_;
    int64_t seq_;
    bool profiled_ = false;
  };
  // "allreduce #12" inside a collective, else the point-to-point call's name ("recv").
  const std::string& op_label() const { return label_; }

  // The tuner's calibration for this communicator (dist/tuner.h), null until one ran.
  std::shared_ptr<const AllreduceModel> cached_allreduce_model() const;
  void cache_allreduce_model(std::shared_ptr<const AllreduceModel> model);
  // The same without the lock and the reference count, for a collective's per-call choice (an
  // 8 B allreduce takes ~2.5 us; those cost ~0.1): valid inside run_in_order only, where no other
  // call can replace the model.
  const AllreduceModel* cached_allreduce_model_in_order() const {
    return model_in_order_.load(std::memory_order_acquire);
  }

 protected:
  // The engine. Each is called with the arguments checked (contiguous, cpu or the engine's
  // device, sizes consistent on this rank) and op_label() set.
  virtual void do_send(const Tensor& t, int dst, int tag) = 0;
  virtual void do_recv(Tensor& t, int src, int tag) = 0;
  // Default: even ranks send first, odd ranks receive first, so a ring of blocking sends always
  // has a rank that receives and never deadlocks. Buffering engines override it (send, then recv).
  virtual void do_sendrecv(const Tensor& out, int dst, Tensor& in, int src, int tag);
  // Non-blocking point to point: each returns an id that do_wait gets back, or -1 when the
  // operation is already complete (do_wait is then never called for it). The tensors are checked
  // and kept alive by the engine until the wait. Default: nothing moves before a wait, which runs
  // every pending operation posted up to the waited one, in order, a send next to a receive as one
  // do_sendrecv (so a ring of isend/irecv pairs completes on engines whose sends block).
  // Wraps a run_async body, on the calling thread, so that it runs on the worker with what the
  // engine takes from the caller's thread (NCCL: the current CUDA stream, which a CUDA graph's
  // capture sets). Default: fn unchanged.
  virtual std::function<void()> bind_caller_context(std::function<void()> fn) { return fn; }
  virtual int64_t do_isend(const Tensor& t, int dst, int tag);
  virtual int64_t do_irecv(const Tensor& t, int src, int tag);
  virtual void do_wait(int64_t id);
  virtual void do_allreduce(Tensor& t, ReduceOp op) = 0;
  virtual void do_reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op) = 0;
  virtual void do_allgather(const Tensor& input, Tensor& output) = 0;
  virtual void do_broadcast(Tensor& t, int root) = 0;
  virtual void do_barrier() = 0;

  // Called as collective number seq starts on this rank (an engine's watchdog uses it to tell
  // which ranks never arrived).
  virtual void on_collective_start(int64_t seq) { (void)seq; }

  // Derived destructors call this first: the worker may be inside a do_* method.
  void stop_worker();

 private:
  void worker_loop();

  class P2pLabel;
  void count_sent(const Tensor& t);
  std::string label_;
  int scope_depth_ = 0;
  int64_t next_seq_ = 0;
  std::atomic<int64_t> sent_messages_{0}, sent_bytes_{0};

  // The default do_isend/do_irecv: operations waiting for a do_wait.
  struct DeferredP2p {
    int64_t id;
    bool send;
    Tensor t;
    int peer, tag;
  };
  std::vector<DeferredP2p> deferred_;
  int64_t next_deferred_id_ = 0;
  std::shared_ptr<const AllreduceModel> model_;                 // under mutex_
  std::atomic<const AllreduceModel*> model_in_order_{nullptr};  // model_.get()

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  struct Job {
    std::function<void()> fn;
    std::shared_ptr<Work::State> state;
  };
  std::deque<Job> queue_;
  // Jobs the worker finished, released by the user thread (next run_async, or stop_worker): the
  // worker never drops the last reference to a Work's state or to a captured tensor, so the
  // thread that used them frees them (GCC 12's shared_ptr release path is opaque to TSan).
  std::vector<Job> finished_;
  int64_t pending_ = 0;  // queued or running on the worker
  bool stopping_ = false;
  std::thread worker_;
  std::thread::id worker_id_;
};

// Every rank's `mine`, in rank order: two allgathers of fixed size (the lengths, then the texts
// padded to the longest), so ranks with different texts cannot hang. The exchanged tensors live on
// `device` (an NCCL communicator moves only its GPU's tensors). Every rank must call it.
std::vector<std::string> allgather_strings(Communicator& comm, const std::string& mine,
                                           Device device);

// The engine methods above as an engine declares its overrides of them, written once: each
// engine's class says STOKE_COMMUNICATOR_ENGINE_OVERRIDES under `protected:` and defines the
// methods in its .cpp.
#define STOKE_COMMUNICATOR_ENGINE_OVERRIDES                                            \
  void do_send(const Tensor& t, int dst, int tag) override;                            \
  void do_recv(Tensor& t, int src, int tag) override;                                  \
  void do_sendrecv(const Tensor& out, int dst, Tensor& in, int src, int tag) override; \
  int64_t do_isend(const Tensor& t, int dst, int tag) override;                        \
  int64_t do_irecv(const Tensor& t, int src, int tag) override;                        \
  void do_wait(int64_t id) override;                                                   \
  void do_allreduce(Tensor& t, ReduceOp op) override;                                  \
  void do_reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op) override;   \
  void do_allgather(const Tensor& input, Tensor& output) override;                     \
  void do_broadcast(Tensor& t, int root) override;                                     \
  void do_barrier() override;

}  // namespace stoke::dist
