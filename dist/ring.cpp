#include "dist/ring.h"

#include <algorithm>
#include <string>
#include <vector>

#include "dist/algorithm_util.h"

namespace stoke::dist {

using internal::Exchanger;
using internal::mod;
using internal::Range;
using internal::Tracer;

namespace {

// One ring phase over `flat` (a contiguous 1-D view) whose chunks are `chunks`.
class Ring {
 public:
  Ring(Communicator& comm, const Tensor& flat, std::vector<RingChunk> chunks, const RingOptions& o,
       const char* name, int64_t seq, int total_steps)
      : comm_(comm),
        flat_(flat),
        chunks_(std::move(chunks)),
        tracer_(comm, name, seq, static_cast<int64_t>(flat.element_size()), o, /*ring_env=*/true),
        exchanger_(comm, flat, o, tracer_),
        total_steps_(total_steps),
        n_(comm.size()),
        r_(comm.rank()) {}

  // Afterwards rank r holds chunk r reduced over every rank.
  void reduce_scatter(ReduceOp op) {
    for (int s = 0; s < n_ - 1; ++s) {
      const int send_c = mod(r_ - s - 1, n_), recv_c = mod(r_ - s - 2, n_);
      step(s, "reduce-scatter", send_c, recv_c, /*reduce=*/true, op);
    }
  }

  // Rank r's chunk r travels to every rank.
  void allgather(int first_step) {
    for (int s = 0; s < n_ - 1; ++s) {
      const int send_c = mod(r_ - s, n_), recv_c = mod(r_ - s - 1, n_);
      step(first_step + s, "allgather", send_c, recv_c, /*reduce=*/false, ReduceOp::sum);
    }
  }

  void divide_own_chunk() {
    const RingChunk c = chunks_[r_];
    internal::divide_by(flat_.narrow(0, c.begin, c.end - c.begin), n_, comm_.op_label());
  }

 private:
  void step(int s, const char* phase, int send_c, int recv_c, bool reduce, ReduceOp op) {
    const Range send{chunks_[send_c].begin, chunks_[send_c].end};
    const Range recv{chunks_[recv_c].begin, chunks_[recv_c].end};
    const int next = mod(r_ + 1, n_), prev = mod(r_ - 1, n_);
    if (tracer_.text())
      tracer_.step_line(
          s + 1, total_steps_,
          detail::str_cat(phase, ": send chunk ", send_c, " [", send.begin, ", ", send.end,
                          ") to rank ", next, ", recv chunk ", recv_c, " [", recv.begin, ", ",
                          recv.end, ") from rank ", prev, ", ", reduce ? "reduce" : "copy"));
    exchanger_.exchange(send, next, recv, prev, reduce, op, phase, s + 1);
  }

  Communicator& comm_;
  Tensor flat_;
  std::vector<RingChunk> chunks_;
  Tracer tracer_;
  Exchanger exchanger_;
  int total_steps_;
  int n_, r_;
};

std::vector<RingChunk> chunks_of(int64_t numel, int ranks) {
  std::vector<RingChunk> c(ranks);
  for (int i = 0; i < ranks; ++i) c[i] = ring_chunk(numel, ranks, i);
  return c;
}

}  // namespace

RingChunk ring_chunk(int64_t numel, int ranks, int chunk) {
  const int64_t q = numel / ranks, rem = numel % ranks;
  const int64_t begin = chunk * q + std::min<int64_t>(chunk, rem);
  return {begin, begin + q + (chunk < rem ? 1 : 0)};
}

void ring_allreduce(Communicator& comm, Tensor& t, ReduceOp op, const RingOptions& options) {
  comm.run_in_order([&] {
    Communicator::Scope scope(comm, "ring_allreduce",
                              bus_bytes(BusPattern::allreduce, t, comm.size()));
    internal::check_contiguous(t, comm.op_label(), "the tensor");
    internal::check_reducible(t, comm.op_label());
    const int n = comm.size();
    Ring ring(comm, t.view({t.numel()}), chunks_of(t.numel(), n), options, "ring_allreduce",
              scope.seq(), 2 * (n - 1));
    ring.reduce_scatter(op);
    if (op == ReduceOp::avg) ring.divide_own_chunk();
    ring.allgather(n - 1);
  });
}

void ring_reduce_scatter(Communicator& comm, const Tensor& input, Tensor& output, ReduceOp op,
                         const RingOptions& options) {
  comm.run_in_order([&] {
    Communicator::Scope scope(comm, "ring_reduce_scatter",
                              bus_bytes(BusPattern::sharded, input, comm.size()));
    const std::string& label = comm.op_label();
    internal::check_sharded(comm, input, output, true);
    const int n = comm.size();
    internal::check_reducible(input, label);
    // A copy, so that the input is not overwritten.
    Tensor work = empty({input.numel()}, {.dtype = input.dtype(), .device = input.device()});
    internal::copy_flat(work, input.view({input.numel()}));
    Ring ring(comm, work, chunks_of(work.numel(), n), options, "ring_reduce_scatter", scope.seq(),
              n - 1);
    ring.reduce_scatter(op);
    if (op == ReduceOp::avg) ring.divide_own_chunk();
    const int64_t b = output.numel();
    internal::copy_flat(output.view({b}), work.narrow(0, comm.rank() * b, b));
  });
}

void ring_allgather(Communicator& comm, const Tensor& input, Tensor& output,
                    const RingOptions& options) {
  comm.run_in_order([&] {
    Communicator::Scope scope(comm, "ring_allgather",
                              bus_bytes(BusPattern::sharded, output, comm.size()));
    internal::check_sharded(comm, input, output, false);
    const int n = comm.size();
    Tensor flat = output.view({output.numel()});
    const int64_t b = input.numel();
    internal::copy_flat(flat.narrow(0, comm.rank() * b, b), input.view({b}));
    Ring ring(comm, flat, chunks_of(flat.numel(), n), options, "ring_allgather", scope.seq(),
              n - 1);
    ring.allgather(0);
  });
}

}  // namespace stoke::dist
