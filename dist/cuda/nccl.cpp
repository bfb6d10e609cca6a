// NcclCommunicator: NCCL's collectives on a stream of their own, ordered against the compute
// stream by events, with a watchdog that aborts the communicator on a timeout or an asynchronous
// NCCL error (dist/cuda/nccl.h).
#include "dist/cuda/nccl.h"

#include <cstdio>
#include <cstring>
#include <iterator>

#include "core/enum_name.h"
#include "core/error.h"
#include "cuda/runtime/stream.h"
#include "dist/roll_call.h"
#include "ops/creation.h"

namespace stoke::dist {
namespace {

constexpr const char* kNcclOp = "stoke::NcclCommunicator";

ncclDataType_t nccl_dtype(DType t, const std::string& label) {
  switch (t) {
    case DType::f32:
      return ncclFloat32;
    case DType::f64:
      return ncclFloat64;
    case DType::f16:
      return ncclFloat16;
    case DType::bf16:
      return ncclBfloat16;
    case DType::i32:
      return ncclInt32;
    case DType::i64:
      return ncclInt64;
    case DType::u8:
    case DType::boolean:
      return ncclUint8;
  }
  STOKE_FAIL(label.c_str(), "dtype ", t, " has no NCCL type");
}

ncclRedOp_t nccl_op(ReduceOp op) {
  static constexpr ncclRedOp_t ops[] = {ncclSum, ncclAvg, ncclMax};
  static_assert(std::size(ops) == enum_count(ReduceOp::max));
  return enum_table(op, ops, ncclSum);
}

}  // namespace

ncclUniqueId NcclCommunicator::make_unique_id() {
  ncclUniqueId id;
  STOKE_NCCL_CHECK(ncclGetUniqueId(&id));
  return id;
}

NcclCommunicator::NcclCommunicator(const ncclUniqueId& id, int rank, int size, int device,
                                   NcclOptions options)
    : rank_(rank), size_(size), local_rank_(device), device_(device), options_(options) {
  STOKE_CHECK(size >= 1 && rank >= 0 && rank < size, kNcclOp,
              "expected 0 <= rank < size, got rank ", rank, " of ", size);
  STOKE_CHECK(device >= 0, kNcclOp, "expected a CUDA device index >= 0, got ", device);
  STOKE_CUDA_CHECK(cudaSetDevice(device));
  STOKE_NCCL_CHECK(ncclCommInitRank(&comm_, size, id, rank));
  STOKE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  STOKE_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
  if (options_.timeout.count() > 0) watchdog_ = std::thread([this] { watchdog_loop(); });
}

std::unique_ptr<NcclCommunicator> NcclCommunicator::bootstrap(Communicator& bootstrap, int device,
                                                              NcclOptions options) {
  if (!options.roll_call) {
    const std::chrono::milliseconds grace = roll_call_grace(options.timeout);
    options.roll_call = [&bootstrap, grace](int64_t seq) {
      return bootstrap.roll_call(seq, grace, /*channel=*/1);
    };
  }
  ncclUniqueId id{};
  if (bootstrap.rank() == 0) id = make_unique_id();
  Tensor bytes = empty({static_cast<int64_t>(sizeof id)}, {.dtype = DType::u8});
  std::memcpy(bytes.data_ptr(), &id, sizeof id);
  bootstrap.broadcast(bytes, 0);
  std::memcpy(&id, bytes.data_ptr(), sizeof id);
  auto comm =
      std::make_unique<NcclCommunicator>(id, bootstrap.rank(), bootstrap.size(),
                                         device >= 0 ? device : bootstrap.local_rank(), options);
  comm->local_rank_ = bootstrap.local_rank();
  return comm;
}

NcclCommunicator::~NcclCommunicator() {
  stop_worker();
  stop_ = true;
  if (watchdog_.joinable()) watchdog_.join();
  cudaSetDevice(device_);
  if (!aborted_) {
    cudaStreamSynchronize(stream_);
    ncclCommDestroy(comm_);
  }
  for (const Pending& p : pending_)
    if (p.done) cudaEventDestroy(p.done);
  for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
  for (cudaEvent_t e : captured_events_) cudaEventDestroy(e);
  // Requests never waited for: their groups' events (each once).
  for (P2pOp& op : p2p_)
    if (op.group && op.group->unwaited > 0) {
      op.group->unwaited = 0;
      cudaEventDestroy(op.group->done);
    }
  for (cudaEvent_t e : p2p_events_) cudaEventDestroy(e);
  cudaEventDestroy(ready_);
  cudaStreamDestroy(stream_);
}

void NcclCommunicator::check_alive() const {
  if (!aborted_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  STOKE_FAIL(op_label().c_str(), "the NCCL communicator of rank ", rank_,
             " was aborted: ", abort_reason_);
}

cudaStream_t NcclCommunicator::compute_stream() const {
  return compute_ != nullptr ? compute_ : cuda::current_stream(device_);
}

template <class F>
void NcclCommunicator::run(const std::vector<const Tensor*>& tensors, F&& enqueue,
                           cudaEvent_t completion) {
  check_alive();
  if (!flushing_ && (p2p_unissued_sends_ || p2p_unissued_recvs_)) flush_p2p();
  for (const Tensor* t : tensors)
    STOKE_CHECK(t->device() == Device::cuda(device_), op_label().c_str(),
                "expected tensors on this rank's GPU cuda:", device_, ", got one on ", t->device());
  STOKE_CUDA_CHECK(cudaSetDevice(device_));
  const cudaStream_t compute = compute_stream();
  // While a CUDA graph captures the compute stream, the call is recorded, not run (NCCL stream
  // joins the capture through ready_): nothing for the watchdog to time, as in torch's
  // ProcessGroupNCCL, and its done event belongs to the graph from now on.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  STOKE_CUDA_CHECK(cudaStreamIsCapturing(compute, &capture));
  const bool captured = capture != cudaStreamCaptureStatusNone;
  STOKE_CUDA_CHECK(cudaEventRecord(ready_, compute));
  STOKE_CUDA_CHECK(cudaStreamWaitEvent(stream_, ready_, 0));
  // The call is in flight from here: the watchdog times it even while NCCL blocks in it.
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    id = next_id_++;
    if (!captured)
      pending_.push_back({id, nullptr, op_label(),
                          op_label().find('#') != std::string::npos ? seq_ : -1,
                          std::chrono::steady_clock::now()});
  }
  // A call that fails leaves the watchdog's list (else it would time out and abort later).
  auto forget = [&] {
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t i = 0; i < pending_.size(); ++i)
      if (pending_[i].id == id) {
        pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
        break;
      }
  };
  ncclResult_t rc;
  try {
    rc = enqueue();
  } catch (...) {
    forget();
    throw;
  }
  if (rc != ncclSuccess) {
    forget();
    check_alive();  // the watchdog's reason, if it aborted us
    STOKE_FAIL(op_label().c_str(), "NCCL failed on rank ", rank_, ": ", ncclGetErrorString(rc),
               " (", ncclGetLastError(comm_), ")");
  }
  cudaEvent_t done = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!free_events_.empty() && !captured) {
      done = free_events_.back();
      free_events_.pop_back();
    }
  }
  if (!done) STOKE_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  STOKE_CUDA_CHECK(cudaEventRecord(done, stream_));
  if (completion)
    STOKE_CUDA_CHECK(cudaEventRecord(completion, stream_));
  else
    STOKE_CUDA_CHECK(cudaStreamWaitEvent(compute, done, 0));
  std::lock_guard<std::mutex> lock(mutex_);
  if (captured) {
    captured_events_.push_back(done);
    return;
  }
  for (Pending& p : pending_)
    if (p.id == id) p.done = done;
}

std::function<void()> NcclCommunicator::bind_caller_context(std::function<void()> fn) {
  const cudaStream_t caller = cuda::current_stream(device_);
  return [this, caller, fn = std::move(fn)] {
    const cuda::StreamGuard on_caller_stream(caller, device_);
    fn();
  };
}

void NcclCommunicator::watchdog_loop() {
  cudaSetDevice(device_);
  while (!stop_) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::string reason;
    int64_t stuck_seq = -1;
    bool timed_out = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      const auto now = std::chrono::steady_clock::now();
      size_t kept = 0;
      for (size_t i = 0; i < pending_.size(); ++i) {
        Pending& p = pending_[i];
        // Finished operations leave the front; the first unfinished one stops the scan (the
        // stream runs them in order).
        if (kept == 0 && p.done && cudaEventQuery(p.done) == cudaSuccess) {
          free_events_.push_back(p.done);
          continue;
        }
        if (kept == 0 && now - p.queued > options_.timeout) {
          const auto s = std::chrono::duration<double>(now - p.queued).count();
          reason = ::stoke::detail::str_cat(p.label, " on rank ", rank_, " has not finished after ",
                                            s, " s (timeout)");
          stuck_seq = p.seq;
          timed_out = true;
        }
        pending_[kept++] = p;
      }
      pending_.resize(kept);
      ncclResult_t async = ncclSuccess;
      if (reason.empty() && ncclCommGetAsyncError(comm_, &async) == ncclSuccess &&
          async != ncclSuccess && async != ncclInProgress)
        reason = ::stoke::detail::str_cat("an asynchronous NCCL error on rank ", rank_, ": ",
                                          ncclGetErrorString(async));
    }
    if (reason.empty()) continue;
    // Where the others are (outside the lock: it listens for up to a few seconds, while the
    // stuck operation's rank goes on queueing or failing).
    if (timed_out && options_.roll_call) reason += options_.roll_call(stuck_seq);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      abort_reason_ = reason;
    }
    std::fprintf(stderr, "stoke::dist: %s; aborting the NCCL communicator\n", reason.c_str());
    aborted_ = true;
    ncclCommAbort(comm_);  // wakes this rank's calls blocked in NCCL
    return;
  }
}

void NcclCommunicator::do_send(const Tensor& t, int dst, int) {
  run({&t}, [&] {
    return ncclSend(t.data_ptr(), static_cast<size_t>(t.numel()), nccl_dtype(t.dtype(), op_label()),
                    dst, comm_, stream_);
  });
}

void NcclCommunicator::do_recv(Tensor& t, int src, int) {
  run({&t}, [&] {
    return ncclRecv(t.data_ptr(), static_cast<size_t>(t.numel()), nccl_dtype(t.dtype(), op_label()),
                    src, comm_, stream_);
  });
}

void NcclCommunicator::do_sendrecv(const Tensor& out, int dst, Tensor& in, int src, int) {
  run({&out, &in}, [&] {
    // One group: both directions progress together, so a ring of these never deadlocks.
    ncclResult_t rc = ncclGroupStart();
    if (rc == ncclSuccess)
      rc = ncclSend(out.data_ptr(), static_cast<size_t>(out.numel()),
                    nccl_dtype(out.dtype(), op_label()), dst, comm_, stream_);
    if (rc == ncclSuccess)
      rc = ncclRecv(in.data_ptr(), static_cast<size_t>(in.numel()),
                    nccl_dtype(in.dtype(), op_label()), src, comm_, stream_);
    const ncclResult_t end = ncclGroupEnd();
    return rc != ncclSuccess ? rc : end;
  });
}

int64_t NcclCommunicator::do_isend(const Tensor& t, int dst, int) {
  check_alive();
  nccl_dtype(t.dtype(), op_label());  // refused now rather than at the group
  p2p_.push_back({next_p2p_id_, true, t, dst, nullptr});
  p2p_unissued_sends_ = true;
  if (p2p_unissued_recvs_) flush_p2p();
  return next_p2p_id_++;
}

int64_t NcclCommunicator::do_irecv(const Tensor& t, int src, int) {
  check_alive();
  nccl_dtype(t.dtype(), op_label());
  p2p_.push_back({next_p2p_id_, false, t, src, nullptr});
  p2p_unissued_recvs_ = true;
  if (p2p_unissued_sends_) flush_p2p();
  return next_p2p_id_++;
}

void NcclCommunicator::flush_p2p() {
  std::vector<const Tensor*> tensors;
  std::vector<P2pOp*> ops;
  for (P2pOp& op : p2p_)
    if (!op.group) {
      tensors.push_back(&op.t);
      ops.push_back(&op);
    }
  p2p_unissued_sends_ = p2p_unissued_recvs_ = false;
  if (ops.empty()) return;
  auto group = std::make_shared<P2pGroup>();
  if (!p2p_events_.empty()) {
    group->done = p2p_events_.back();
    p2p_events_.pop_back();
  } else {
    STOKE_CUDA_CHECK(cudaEventCreateWithFlags(&group->done, cudaEventDisableTiming));
  }
  group->unwaited = static_cast<int>(ops.size());
  for (P2pOp* op : ops) op->group = group;
  flushing_ = true;
  try {
    run(
        tensors,
        [&] {
          ncclResult_t rc = ncclGroupStart();
          for (const P2pOp* op : ops) {
            if (rc != ncclSuccess) break;
            const size_t n = static_cast<size_t>(op->t.numel());
            const ncclDataType_t type = nccl_dtype(op->t.dtype(), op_label());
            rc = op->send ? ncclSend(op->t.data_ptr(), n, type, op->peer, comm_, stream_)
                          : ncclRecv(op->t.data_ptr(), n, type, op->peer, comm_, stream_);
          }
          const ncclResult_t end = ncclGroupEnd();
          return rc != ncclSuccess ? rc : end;
        },
        group->done);
  } catch (...) {
    flushing_ = false;
    throw;
  }
  flushing_ = false;
}

void NcclCommunicator::do_wait(int64_t id) {
  size_t i = 0;
  while (i < p2p_.size() && p2p_[i].id != id) ++i;
  STOKE_CHECK(i < p2p_.size(), op_label().c_str(), "rank ", rank_, ": no pending request with id ",
              id);
  if (!p2p_[i].group) flush_p2p();
  std::shared_ptr<P2pGroup> group = std::move(p2p_[i].group);
  p2p_.erase(p2p_.begin() + static_cast<std::ptrdiff_t>(i));
  STOKE_CUDA_CHECK(cudaSetDevice(device_));
  STOKE_CUDA_CHECK(cudaStreamWaitEvent(compute_stream(), group->done, 0));
  if (--group->unwaited == 0) p2p_events_.push_back(group->done);
}

void NcclCommunicator::do_allreduce(Tensor& t, ReduceOp op) {
  run({&t}, [&] {
    return ncclAllReduce(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()),
                         nccl_dtype(t.dtype(), op_label()), nccl_op(op), comm_, stream_);
  });
}

void NcclCommunicator::do_reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op) {
  run({&input, &output}, [&] {
    return ncclReduceScatter(input.data_ptr(), output.data_ptr(),
                             static_cast<size_t>(output.numel()),
                             nccl_dtype(input.dtype(), op_label()), nccl_op(op), comm_, stream_);
  });
}

void NcclCommunicator::do_allgather(const Tensor& input, Tensor& output) {
  run({&input, &output}, [&] {
    return ncclAllGather(input.data_ptr(), output.data_ptr(), static_cast<size_t>(input.numel()),
                         nccl_dtype(input.dtype(), op_label()), comm_, stream_);
  });
}

void NcclCommunicator::do_broadcast(Tensor& t, int root) {
  run({&t}, [&] {
    return ncclBroadcast(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()),
                         nccl_dtype(t.dtype(), op_label()), root, comm_, stream_);
  });
}

void NcclCommunicator::do_barrier() {
  // A one-element allreduce, then the host waits for it: every rank has arrived.
  Tensor one = ones({1}, {.device = Device::cuda(device_)});
  run({&one}, [&] {
    return ncclAllReduce(one.data_ptr(), one.data_ptr(), 1, ncclFloat32, ncclSum, comm_, stream_);
  });
  STOKE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  note_device_sync("a barrier");
  check_alive();
}

}  // namespace stoke::dist
