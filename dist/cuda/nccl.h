// The NCCL engine: one rank per GPU, for cuda tensors (docs/design.md, "dist/"). Built twice, like
// ops/cuda: against the real NCCL into stoke::stoke (STOKE_HAS_NCCL), and against cuda/emu's NCCL
// subset for the tests, where ranks are threads on the emulator's devices.
//
// Stream order, not host order: every call is queued on the communicator's own stream after an
// event of its compute stream (the current stream of the thread that made it, or the one given
// with set_compute_stream), and the compute stream waits for the NCCL stream afterwards. When a
// call returns the operation is queued, and everything later on the compute stream sees its result;
// the host blocks only in barrier() and when it reads a tensor back.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cuda/compat.h"
#include "cuda/nccl_compat.h"
#include "dist/communicator.h"

namespace stoke::dist {

struct NcclOptions {
  // An operation not finished this long after it was queued (a peer that died or stalls), or an
  // asynchronous NCCL error, aborts the communicator (ncclCommAbort): the stalled calls return and
  // every later call throws, naming the operation, its sequence number and the rank. Zero: off.
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  // Asked on a timeout where the other ranks are (Communicator::roll_call, with the collective's
  // sequence number, -1 for a point-to-point call); its answer ends the message ("; rank 1 did not
  // arrive (...)"). NCCL cannot tell, so bootstrap() asks the communicator the id came over.
  // Empty: the message names this rank only.
  std::function<std::string(int64_t seq)> roll_call = {};
};

class NcclCommunicator final : public Communicator {
 public:
  // A fresh id for a new clique (rank 0 makes it; every rank passes the same one).
  static ncclUniqueId make_unique_id();
  // Joins the clique `id` as `rank` of `size` on CUDA device `device`. Collective: returns once
  // every rank has joined.
  NcclCommunicator(const ncclUniqueId& id, int rank, int size, int device,
                   NcclOptions options = {});
  // Rank 0 of `bootstrap` (e.g. an MpiCommunicator) makes the id and broadcasts it; each rank
  // takes the GPU `device`, or its local rank on the machine when device < 0.
  // Unless options.roll_call is set, a timeout asks `bootstrap` for its roll call (channel 1), so
  // `bootstrap` must outlive the returned communicator.
  static std::unique_ptr<NcclCommunicator> bootstrap(Communicator& bootstrap, int device = -1,
                                                     NcclOptions options = {});
  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  // The stream NCCL work is ordered after and before. Default (nullptr): the calling thread's
  // current stream on the device at each call, as torch's ProcessGroupNCCL does, so that a call
  // made while a CUDA graph captures (cuda::Graph makes its stream current) joins the capture.
  void set_compute_stream(cudaStream_t stream) { compute_ = stream; }
  // True once the watchdog or an error aborted the communicator.
  bool aborted() const { return aborted_.load(); }

 protected:
  STOKE_COMMUNICATOR_ENGINE_OVERRIDES
  void on_collective_start(int64_t seq) override { seq_ = seq; }
  // The worker issues a run_async body's NCCL calls after the caller's current stream.
  std::function<void()> bind_caller_context(std::function<void()> fn) override;

 private:
  // Queues enqueue() (NCCL calls on stream_) between the two events, after checking that every
  // tensor lives on this communicator's device, and hands the completion to the watchdog.
  // With `completion` set, records it on the NCCL stream after the operation instead of making the
  // compute stream wait (the non-blocking calls' groups, joined at their wait).
  template <class F>
  void run(const std::vector<const Tensor*>& tensors, F&& enqueue,
           cudaEvent_t completion = nullptr);
  void flush_p2p();  // issues the pending isend/irecv as one group
  void check_alive() const;
  void watchdog_loop();

  ncclComm_t comm_ = nullptr;
  int rank_ = 0, size_ = 1, local_rank_ = 0, device_ = 0;
  NcclOptions options_;
  cudaStream_t stream_ = nullptr, compute_ = nullptr;  // compute_: set_compute_stream's
  cudaStream_t compute_stream() const;
  cudaEvent_t ready_ = nullptr;  // the compute stream's work before an operation

  // Operations queued and not yet seen finished by the watchdog: their done event and label.
  struct Pending {
    uint64_t id;
    cudaEvent_t done;  // null while the call is still inside NCCL
    std::string label;
    int64_t seq;  // the collective, or -1 (a point-to-point call)
    std::chrono::steady_clock::time_point queued;
  };
  int64_t seq_ = -1;          // the collective being issued (on_collective_start)
  uint64_t next_id_ = 0;      // under mutex_
  mutable std::mutex mutex_;  // check_alive() reads abort_reason_ under it
  std::vector<Pending> pending_;
  std::vector<cudaEvent_t> free_events_;
  // The done events of calls made while the compute stream was captured into a CUDA graph: the
  // graph's replays record them, so they are never reused; destroyed with the communicator.
  std::vector<cudaEvent_t> captured_events_;
  std::atomic<bool> aborted_{false}, stop_{false};
  std::string abort_reason_;  // under mutex_

  // Non-blocking point to point (the user's thread only, like every call).
  struct P2pGroup {
    cudaEvent_t done = nullptr;
    int unwaited = 0;
  };
  struct P2pOp {
    int64_t id;
    bool send;
    Tensor t;
    int peer;
    std::shared_ptr<P2pGroup> group;  // null until issued
  };
  std::vector<P2pOp> p2p_;  // posted and not yet waited for
  bool p2p_unissued_sends_ = false, p2p_unissued_recvs_ = false;
  std::vector<cudaEvent_t> p2p_events_;  // for groups, reused
  int64_t next_p2p_id_ = 0;
  bool flushing_ = false;

  std::thread watchdog_;
};

}  // namespace stoke::dist
