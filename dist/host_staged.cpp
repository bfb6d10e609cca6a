// HostStagedCommunicator: device tensors through a host engine (dist/host_staged.h says why).
#include "dist/host_staged.h"

#include "ops/creation.h"

namespace stoke::dist {
namespace {

// The host tensor a call works on: t itself when it is on the host, else a copy (or, for a tensor
// the call only writes, fresh host memory of its shape).
Tensor on_host(const Tensor& t, bool copy) {
  if (t.device().is_cpu()) return t;
  return copy ? t.to(Device::cpu()) : empty(t.shape(), {.dtype = t.dtype()});
}

// The result back into the caller's tensor when it was staged.
void write_back(Tensor& t, const Tensor& host) {
  if (!t.device().is_cpu()) t.copy_(host);
}

}  // namespace

HostStagedCommunicator::~HostStagedCommunicator() {
  stop_worker();  // the worker may be inside a call on host_
}

void HostStagedCommunicator::do_send(const Tensor& t, int dst, int tag) {
  host_.send(on_host(t, true), dst, tag);
}

void HostStagedCommunicator::do_recv(Tensor& t, int src, int tag) {
  Tensor h = on_host(t, false);
  host_.recv(h, src, tag);
  write_back(t, h);
}

void HostStagedCommunicator::do_sendrecv(const Tensor& out, int dst, Tensor& in, int src, int tag) {
  Tensor h = on_host(in, false);
  host_.sendrecv(on_host(out, true), dst, h, src, tag);
  write_back(in, h);
}

int64_t HostStagedCommunicator::do_isend(const Tensor& t, int dst, int tag) {
  Tensor h = on_host(t, true);
  Request r = host_.isend(h, dst, tag);
  staged_.push_back({next_id_, r, t, h, false});
  return next_id_++;
}

int64_t HostStagedCommunicator::do_irecv(const Tensor& t, int src, int tag) {
  Tensor h = on_host(t, false);
  Request r = host_.irecv(h, src, tag);
  staged_.push_back({next_id_, r, t, h, true});
  return next_id_++;
}

void HostStagedCommunicator::do_wait(int64_t id) {
  for (size_t i = 0; i < staged_.size(); ++i) {
    if (staged_[i].id != id) continue;
    Staged s = std::move(staged_[i]);
    staged_.erase(staged_.begin() + static_cast<std::ptrdiff_t>(i));
    host_.wait(s.host_request);
    if (s.recv) write_back(s.t, s.host);
    return;
  }
}

void HostStagedCommunicator::do_allreduce(Tensor& t, ReduceOp op) {
  Tensor h = on_host(t, true);
  host_.allreduce(h, op);
  write_back(t, h);
}

void HostStagedCommunicator::do_reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op) {
  Tensor h = on_host(output, false);
  host_.reduce_scatter(on_host(input, true), h, op);
  write_back(output, h);
}

void HostStagedCommunicator::do_allgather(const Tensor& input, Tensor& output) {
  Tensor h = on_host(output, false);
  host_.allgather(on_host(input, true), h);
  write_back(output, h);
}

void HostStagedCommunicator::do_broadcast(Tensor& t, int root) {
  Tensor h = on_host(t, rank() == root);  // the others' values are overwritten
  host_.broadcast(h, root);
  write_back(t, h);
}

void HostStagedCommunicator::do_barrier() {
  host_.barrier();
}

}  // namespace stoke::dist
