#include "dist/tree.h"

#include <algorithm>
#include <bit>
#include <string>
#include <vector>

#include "dist/algorithm_util.h"

namespace stoke::dist {

using internal::kAlgorithmTag;
using internal::Range;
using internal::Tracer;

namespace {

int lowbit(int r) {
  return r & -r;
}

int log2_of(int m) {  // m a power of two
  int l = 0;
  while ((1 << l) < m) ++l;
  return l;
}

class Tree {
 public:
  Tree(Communicator& comm, const Tensor& flat, const CollectiveOptions& o, int64_t seq)
      : comm_(comm),
        flat_(flat),
        links_(binomial_tree(comm.size(), comm.rank())),
        tracer_(comm, "tree_allreduce", seq, static_cast<int64_t>(flat.element_size()), o),
        pipelined_(o.pipelined),
        n_(comm.size()),
        r_(comm.rank()) {
    seg_ = std::max<int64_t>(1, o.segment_bytes / static_cast<int64_t>(flat.element_size()));
    k_end_ = std::max<int64_t>(1, (flat.numel() + seg_ - 1) / seg_);
    levels_ = n_ > 1 ? log2_of(std::bit_ceil(static_cast<unsigned>(n_))) : 0;
  }

  void reduce(ReduceOp op) {
    const int c_end = static_cast<int>(links_.children.size());
    const Range all{0, flat_.numel()};
    if (tracer_.text()) {
      for (int c = 0; c < c_end; ++c)
        tracer_.step_line(reduce_step(c), 2 * levels_,
                          Tracer::describe("reduce", {}, -1, all, links_.children[c], "reduce"));
      if (links_.parent >= 0)
        tracer_.step_line(parent_step(), 2 * levels_,
                          Tracer::describe("reduce", all, links_.parent, {}, -1, ""));
    }
    Tensor scratch;
    if (c_end > 0)
      scratch = empty({2 * c_end * seg_}, {.dtype = flat_.dtype(), .device = flat_.device()});
    auto slot = [&](int c, int64_t k, int64_t len) {
      return scratch.narrow(0, (2 * c + k % 2) * seg_, len);
    };
    // Receives of segment k from every child, in flight together (pipelined) or one by one.
    std::vector<Request> recvs(static_cast<size_t>(2 * c_end));
    std::vector<int64_t> recv_t0(recvs.size());
    auto post = [&](int64_t k) {
      const Range p = piece(k);
      for (int c = 0; c < c_end; ++c) {
        const size_t i = static_cast<size_t>(2 * c + k % 2);
        Tensor in = slot(c, k, p.size());
        recv_t0[i] = tracer_.now();
        recvs[i] = comm_.irecv(in, links_.children[c], kAlgorithmTag);
      }
    };
    Request up[2];
    int64_t up_t0[2] = {0, 0};
    if (pipelined_) post(0);
    for (int64_t k = 0; k < k_end_; ++k) {
      const Range p = piece(k);
      if (pipelined_ && k + 1 < k_end_) post(k + 1);
      for (int c = 0; c < c_end; ++c) {
        const int child = links_.children[c];
        const size_t i = static_cast<size_t>(2 * c + k % 2);
        Tensor in = slot(c, k, p.size());
        if (pipelined_) {
          comm_.wait(recvs[i]);
        } else {
          recv_t0[i] = tracer_.now();
          comm_.recv(in, child, kAlgorithmTag);
        }
        const int64_t t1 = tracer_.now();
        tracer_.event("reduce", reduce_step(c), "recv", child, p, recv_t0[i], t1);
        internal::reduce_into(flat_.narrow(0, p.begin, p.size()), in, op, comm_.op_label());
        tracer_.event("reduce", reduce_step(c), "reduce", -1, p, t1, tracer_.now());
      }
      if (links_.parent < 0) continue;
      const Tensor out = flat_.narrow(0, p.begin, p.size());
      if (!pipelined_) {
        const int64_t t0 = tracer_.now();
        comm_.send(out, links_.parent, kAlgorithmTag);
        tracer_.event("reduce", parent_step(), "send", links_.parent, p, t0, tracer_.now());
        continue;
      }
      // At most two segments in flight upwards: wait for k-1 once k is posted.
      up_t0[k % 2] = tracer_.now();
      up[k % 2] = comm_.isend(out, links_.parent, kAlgorithmTag);
      if (k > 0)
        finish_send(up[(k - 1) % 2], "reduce", parent_step(), links_.parent, piece(k - 1),
                    up_t0[(k - 1) % 2]);
    }
    if (pipelined_ && links_.parent >= 0)
      finish_send(up[(k_end_ - 1) % 2], "reduce", parent_step(), links_.parent, piece(k_end_ - 1),
                  up_t0[(k_end_ - 1) % 2]);
  }

  void broadcast() {
    const int c_end = static_cast<int>(links_.children.size());
    const Range all{0, flat_.numel()};
    if (tracer_.text()) {
      if (links_.parent >= 0)
        tracer_.step_line(bcast_parent_step(), 2 * levels_,
                          Tracer::describe("broadcast", {}, -1, all, links_.parent, "copy"));
      for (int c = c_end - 1; c >= 0; --c)
        tracer_.step_line(bcast_child_step(c), 2 * levels_,
                          Tracer::describe("broadcast", all, links_.children[c], {}, -1, ""));
    }
    Request down[2];
    int64_t down_t0[2] = {0, 0};
    auto post = [&](int64_t k) {
      const Range p = piece(k);
      Tensor seg = flat_.narrow(0, p.begin, p.size());
      down_t0[k % 2] = tracer_.now();
      down[k % 2] = comm_.irecv(seg, links_.parent, kAlgorithmTag);
    };
    // Sends to the children, farthest (largest subtree) first; a round's are waited for once the
    // next round is posted.
    std::vector<Request> sends(static_cast<size_t>(2 * c_end));
    std::vector<int64_t> send_t0(sends.size());
    auto finish_round = [&](int64_t k) {
      for (int c = c_end - 1; c >= 0; --c) {
        const size_t i = static_cast<size_t>(2 * c + k % 2);
        finish_send(sends[i], "broadcast", bcast_child_step(c), links_.children[c], piece(k),
                    send_t0[i]);
      }
    };
    if (pipelined_ && links_.parent >= 0) post(0);
    for (int64_t k = 0; k < k_end_; ++k) {
      const Range p = piece(k);
      Tensor seg = flat_.narrow(0, p.begin, p.size());
      if (links_.parent >= 0) {
        int64_t t0 = down_t0[k % 2];
        if (pipelined_) {
          if (k + 1 < k_end_) post(k + 1);
          comm_.wait(down[k % 2]);
        } else {
          t0 = tracer_.now();
          comm_.recv(seg, links_.parent, kAlgorithmTag);
        }
        tracer_.event("broadcast", bcast_parent_step(), "recv", links_.parent, p, t0,
                      tracer_.now());
      }
      for (int c = c_end - 1; c >= 0; --c) {
        const int child = links_.children[c];
        if (!pipelined_) {
          const int64_t t0 = tracer_.now();
          comm_.send(seg, child, kAlgorithmTag);
          tracer_.event("broadcast", bcast_child_step(c), "send", child, p, t0, tracer_.now());
          continue;
        }
        const size_t i = static_cast<size_t>(2 * c + k % 2);
        send_t0[i] = tracer_.now();
        sends[i] = comm_.isend(seg, child, kAlgorithmTag);
      }
      if (pipelined_ && k > 0) finish_round(k - 1);
    }
    if (pipelined_) finish_round(k_end_ - 1);
  }

  void divide_at_root() {
    if (r_ == 0) internal::divide_by(flat_, n_, comm_.op_label());
  }

 private:
  Range piece(int64_t k) const {
    const int64_t b = std::min(flat_.numel(), k * seg_);
    return {b, std::min(flat_.numel(), b + seg_)};
  }
  // Steps, counted from 1 and the same on both ends of a message: the reduce's level of child
  // r + m is log2(m) + 1, the send to the parent log2(lowbit(r)) + 1; the broadcast mirrors them.
  int reduce_step(int c) const { return log2_of(links_.children[c] - r_) + 1; }
  int parent_step() const { return log2_of(lowbit(r_)) + 1; }
  int bcast_child_step(int c) const { return 2 * levels_ - log2_of(links_.children[c] - r_); }
  int bcast_parent_step() const { return 2 * levels_ - log2_of(lowbit(r_)); }

  void finish_send(Request& r, const char* phase, int step, int peer, Range p, int64_t t0) {
    comm_.wait(r);
    tracer_.event(phase, step, "send", peer, p, t0, tracer_.now());
  }

  Communicator& comm_;
  Tensor flat_;
  TreeLinks links_;
  Tracer tracer_;
  bool pipelined_;
  int n_, r_;
  int64_t seg_ = 1, k_end_ = 1;
  int levels_ = 0;
};

}  // namespace

TreeLinks binomial_tree(int ranks, int rank) {
  TreeLinks l;
  const int low =
      rank == 0 ? static_cast<int>(std::bit_ceil(static_cast<unsigned>(ranks))) : lowbit(rank);
  if (rank != 0) l.parent = rank - low;
  for (int m = 1; m < low; m <<= 1)
    if (rank + m < ranks) l.children.push_back(rank + m);
  return l;
}

void tree_allreduce(Communicator& comm, Tensor& t, ReduceOp op, const CollectiveOptions& options) {
  comm.run_in_order([&] {
    Communicator::Scope scope(comm, "tree_allreduce",
                              bus_bytes(BusPattern::allreduce, t, comm.size()));
    internal::check_contiguous(t, comm.op_label(), "the tensor");
    internal::check_reducible(t, comm.op_label());
    if (comm.size() == 1) return;  // nothing to reduce, nothing to divide (avg over one rank)
    Tree tree(comm, t.view({t.numel()}), options, scope.seq());
    tree.reduce(op);
    if (op == ReduceOp::avg) tree.divide_at_root();
    tree.broadcast();
  });
}

}  // namespace stoke::dist
