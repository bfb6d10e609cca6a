#include "dist/rhd.h"

#include <bit>
#include <string>
#include <vector>

#include "dist/algorithm_util.h"
#include "dist/ring.h"

namespace stoke::dist {

using internal::Exchanger;
using internal::Range;
using internal::Tracer;

namespace {

// One rank's halving-doubling over `flat`, whose N' virtual blocks are [offsets[v], offsets[v+1]).
class Rhd {
 public:
  Rhd(Communicator& comm, const Tensor& flat, std::vector<int64_t> offsets,
      const CollectiveOptions& o, const char* name, int64_t seq, int total_steps)
      : comm_(comm),
        flat_(flat),
        offsets_(std::move(offsets)),
        tracer_(comm, name, seq, static_cast<int64_t>(flat.element_size()), o),
        exchanger_(comm, flat, o, tracer_),
        total_steps_(total_steps),
        n_(comm.size()),
        r_(comm.rank()) {
    p2_ = static_cast<int>(std::bit_floor(static_cast<unsigned>(n_)));
    rem_ = n_ - p2_;
    if (r_ < 2 * rem_)
      vr_ = r_ % 2 == 1 ? r_ / 2 : -1;  // the even rank of a pair sits the middle out
    else
      vr_ = r_ - rem_;
  }

  static int steps_of(int ranks, int phases) {  // phases: 1 (reduce-scatter or allgather) or 2
    const int p2 = static_cast<int>(std::bit_floor(static_cast<unsigned>(ranks)));
    return (ranks > p2 ? 2 : 0) + phases * std::countr_zero(static_cast<unsigned>(p2));
  }

  int virtual_rank() const { return vr_; }
  Range block(int v) const { return {offsets_[v], offsets_[v + 1]}; }
  Range blocks(int lo, int hi) const { return {offsets_[lo], offsets_[hi]}; }
  Range all() const { return {0, flat_.numel()}; }

  // The fold: the even rank of each pair sends `range` to the odd one, which reduces it in (or,
  // without reduce, takes it as it is).
  void fold(Range range, bool reduce, ReduceOp op) {
    if (rem_ == 0) return;
    ++step_;
    if (r_ >= 2 * rem_) return;
    if (r_ % 2 == 0)
      run(range, r_ + 1, {}, -1, reduce, op, "fold");
    else
      run({}, -1, range, r_ - 1, reduce, op, "fold");
  }

  // Reduce-scatter by recursive halving among the N' virtual ranks: afterwards virtual rank v
  // holds block v reduced over every rank.
  void halving(ReduceOp op) {
    int lo = 0, hi = p2_;
    for (int mask = p2_ / 2; mask >= 1; mask /= 2) {
      ++step_;
      if (vr_ < 0) continue;
      const int mid = lo + mask;
      const bool upper = (vr_ & mask) != 0;
      const Range keep = upper ? blocks(mid, hi) : blocks(lo, mid);
      const Range give = upper ? blocks(lo, mid) : blocks(mid, hi);
      run(give, real_rank(vr_ ^ mask), keep, real_rank(vr_ ^ mask), /*reduce=*/true, op,
          "reduce-scatter");
      if (upper)
        lo = mid;
      else
        hi = mid;
    }
  }

  // Allgather by recursive doubling among the virtual ranks, each starting with its block.
  void doubling() {
    for (int mask = 1; mask < p2_; mask *= 2) {
      ++step_;
      if (vr_ < 0) continue;
      const int partner = vr_ ^ mask;
      const int mine = vr_ & ~(mask - 1), theirs = partner & ~(mask - 1);
      run(blocks(mine, mine + mask), real_rank(partner), blocks(theirs, theirs + mask),
          real_rank(partner), /*reduce=*/false, ReduceOp::sum, "allgather");
    }
  }

  // The unfold: the odd rank of each pair sends `range` (of the result) to the even one.
  void unfold(Range range) {
    if (rem_ == 0) return;
    ++step_;
    if (r_ >= 2 * rem_) return;
    if (r_ % 2 == 1)
      run(range, r_ - 1, {}, -1, false, ReduceOp::sum, "unfold");
    else
      run({}, -1, range, r_ + 1, false, ReduceOp::sum, "unfold");
  }

  void divide(Range range) {
    internal::divide_by(flat_.narrow(0, range.begin, range.size()), n_, comm_.op_label());
  }

 private:
  int real_rank(int v) const { return v < rem_ ? 2 * v + 1 : v + rem_; }

  void run(Range send, int dst, Range recv, int src, bool reduce, ReduceOp op, const char* phase) {
    if (tracer_.text())
      tracer_.step_line(step_, total_steps_,
                        Tracer::describe(phase, send, dst, recv, src, reduce ? "reduce" : "copy"));
    exchanger_.exchange(send, dst, recv, src, reduce, op, phase, step_);
  }

  Communicator& comm_;
  Tensor flat_;
  std::vector<int64_t> offsets_;
  Tracer tracer_;
  Exchanger exchanger_;
  int total_steps_;
  int n_, r_, p2_ = 1, rem_ = 0, vr_ = 0;
  int step_ = 0;
};

// Balanced virtual blocks over n elements (allreduce: any partition will do).
std::vector<int64_t> balanced(int64_t n, int blocks) {
  std::vector<int64_t> off(static_cast<size_t>(blocks) + 1);
  for (int i = 0; i < blocks; ++i) off[i] = ring_chunk(n, blocks, i).begin;
  off[blocks] = n;
  return off;
}

// Rank-ordered blocks of `block` elements, a folded pair's two blocks forming one virtual block.
std::vector<int64_t> rank_blocks(int ranks, int64_t block) {
  const int p2 = static_cast<int>(std::bit_floor(static_cast<unsigned>(ranks)));
  const int rem = ranks - p2;
  std::vector<int64_t> off(static_cast<size_t>(p2) + 1);
  for (int v = 0; v <= p2; ++v) off[v] = (v < rem ? 2 * v : v + rem) * block;
  return off;
}

}  // namespace

void rhd_allreduce(Communicator& comm, Tensor& t, ReduceOp op, const CollectiveOptions& options) {
  comm.run_in_order([&] {
    Communicator::Scope scope(comm, "rhd_allreduce",
                              bus_bytes(BusPattern::allreduce, t, comm.size()));
    internal::check_contiguous(t, comm.op_label(), "the tensor");
    internal::check_reducible(t, comm.op_label());
    const int n = comm.size();
    if (n == 1) return;
    const int p2 = static_cast<int>(std::bit_floor(static_cast<unsigned>(n)));
    Rhd rhd(comm, t.view({t.numel()}), balanced(t.numel(), p2), options, "rhd_allreduce",
            scope.seq(), Rhd::steps_of(n, 2));
    rhd.fold(rhd.all(), /*reduce=*/true, op);
    rhd.halving(op);
    if (op == ReduceOp::avg && rhd.virtual_rank() >= 0) rhd.divide(rhd.block(rhd.virtual_rank()));
    rhd.doubling();
    rhd.unfold(rhd.all());
  });
}

void rhd_reduce_scatter(Communicator& comm, const Tensor& input, Tensor& output, ReduceOp op,
                        const CollectiveOptions& options) {
  comm.run_in_order([&] {
    Communicator::Scope scope(comm, "rhd_reduce_scatter",
                              bus_bytes(BusPattern::sharded, input, comm.size()));
    const std::string& label = comm.op_label();
    internal::check_sharded(comm, input, output, true);
    const int n = comm.size(), r = comm.rank();
    internal::check_reducible(input, label);
    const int64_t b = output.numel();
    // A copy, so that the input is not overwritten.
    Tensor work = empty({input.numel()}, {.dtype = input.dtype(), .device = input.device()});
    internal::copy_flat(work, input.view({input.numel()}));
    Rhd rhd(comm, work, rank_blocks(n, b), options, "rhd_reduce_scatter", scope.seq(),
            Rhd::steps_of(n, 1));
    rhd.fold(rhd.all(), /*reduce=*/true, op);
    rhd.halving(op);
    const Range mine{r * b, (r + 1) * b};
    const int v = rhd.virtual_rank();
    if (op == ReduceOp::avg && v >= 0) rhd.divide(rhd.block(v));
    // The odd rank of a folded pair holds both ranks' blocks: the even one's goes back.
    rhd.unfold(Range{(r - r % 2) * b, (r - r % 2 + 1) * b});
    internal::copy_flat(output.view({b}), work.narrow(0, mine.begin, b));
  });
}

void rhd_allgather(Communicator& comm, const Tensor& input, Tensor& output,
                   const CollectiveOptions& options) {
  comm.run_in_order([&] {
    Communicator::Scope scope(comm, "rhd_allgather",
                              bus_bytes(BusPattern::sharded, output, comm.size()));
    internal::check_sharded(comm, input, output, false);
    const int n = comm.size(), r = comm.rank();
    Tensor flat = output.view({output.numel()});
    const int64_t b = input.numel();
    internal::copy_flat(flat.narrow(0, r * b, b), input.view({b}));
    if (n == 1) return;
    Rhd rhd(comm, flat, rank_blocks(n, b), options, "rhd_allgather", scope.seq(),
            Rhd::steps_of(n, 1));
    // The even rank of a folded pair hands its block to the odd one, which gathers for both.
    rhd.fold(Range{(r - r % 2) * b, (r - r % 2 + 1) * b}, /*reduce=*/false, ReduceOp::sum);
    rhd.doubling();
    rhd.unfold(rhd.all());
  });
}

}  // namespace stoke::dist
