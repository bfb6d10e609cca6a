// Internal to dist/: what the collectives built on send/recv share (the ring, the tree, halving-
// doubling): argument checks, the reduce step on the CPU or a device, the segmented and pipelined
// exchange of element ranges, and the traces (dist/collective_options.h says what they hold).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "dist/collective_options.h"
#include "dist/communicator.h"

namespace stoke::dist::internal {

// The messages of stoke's own algorithms; user tags are >= 0, the in-process engine's native
// collectives use -2. One tag serves every algorithm: each collective posts all its receives before
// the next collective starts, so per-pair FIFO order keeps them apart.
constexpr int kAlgorithmTag = -1;

// Elements [begin, end) of a flat tensor.
struct Range {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

int mod(int a, int n);

void check_contiguous(const Tensor& t, const std::string& label, const char* what);
// The operands of a reduce-scatter or an allgather: contiguous, in one dtype on one device, and the
// whole one (the input of reduce_scatter, the output of allgather) with size() x the other's
// elements.
void check_sharded(const Communicator& comm, const Tensor& input, const Tensor& output,
                   bool input_is_whole);
// f32, f64, f16, bf16; off the CPU not f64 (stoke's CUDA kernels take f32, f16 and bf16). Checked
// before any message moves, so that every rank fails alike instead of mid-collective.
void check_reducible(const Tensor& t, const std::string& label);
// dst = src (same numel, dtype and device): memcpy on the CPU rather than copy_(), which may run
// on the thread pool shared by every rank thread; a device copy elsewhere.
void copy_flat(const Tensor& dst, const Tensor& src);
// acc = acc op in, elementwise (f16/bf16 computed in f32 and rounded once; avg adds).
void reduce_into(const Tensor& acc, const Tensor& in, ReduceOp op, const std::string& label);
// p /= by (rounded once).
void divide_by(const Tensor& p, int by, const std::string& label);

// Steady-clock nanoseconds: CLOCK_MONOTONIC, one clock for every process of a machine, so the
// timelines of MPI ranks line up.
int64_t now_ns();

// One collective's traces on one rank.
class Tracer {
 public:
  // `coll`: the collective's name ("ring_allreduce"), seq its number on the communicator,
  // element_bytes the size of one element (events give bytes). ring_env: STOKE_RING_TRACE=1 also
  // turns the text trace on.
  Tracer(const Communicator& comm, const char* coll, int64_t seq, int64_t element_bytes,
         const CollectiveOptions& o, bool ring_env = false);
  bool text() const { return text_ != nullptr; }
  bool timed() const { return timeline_ != nullptr; }
  int64_t now() const { return timed() ? now_ns() : 0; }
  // A text line, prefixed with "<coll> #<seq> rank r/N step s/S " (s counted from 1).
  void step_line(int step, int total_steps, const std::string& what);
  // A timed event: kind is send, recv, reduce or copy; peer -1 for reduce and copy.
  void event(const char* phase, int step, const char* kind, int peer, Range r, int64_t t0,
             int64_t t1);
  // The generic text of one step: "<phase>: send [a, b) to rank x, recv [c, d) from rank y,
  // <action>" with the absent side left out.
  static std::string describe(const char* phase, Range send, int dst, Range recv, int src,
                              const char* action);

 private:
  std::ostream* text_ = nullptr;
  std::ostream* timeline_ = nullptr;
  bool env_timeline_ = false;  // timeline_ is a STOKE_COLLECTIVE_TIMELINE file (shared: locked)
  std::string coll_;
  int64_t seq_ = 0;
  int rank_ = 0, ranks_ = 1;
  int64_t element_bytes_ = 4;
};

// Moves element ranges of one flat tensor between ranks in segments of at most
// CollectiveOptions::segment_bytes, pipelined or blocking (CollectiveOptions::pipelined). Received
// segments are reduced into the tensor through a double buffer, or land in it directly.
class Exchanger {
 public:
  Exchanger(Communicator& comm, Tensor flat, const CollectiveOptions& o, Tracer& tracer);
  int64_t segment() const { return seg_; }

  // Sends `send` to dst and receives src's copy of `recv` (dst or src -1: that side is absent),
  // segment by segment; with reduce, each received segment is added (max'ed) into recv, else
  // copied there. An empty range still sends one empty message, so that both sides agree on the
  // count. send and recv must not overlap.
  void exchange(Range send, int dst, Range recv, int src, bool reduce, ReduceOp op,
                const char* phase, int step);

  // Number of messages exchange() sends for a range (at least one).
  int64_t segments(Range r) const;

 private:
  struct Slot {
    Request send, recv;
    Tensor in;
    Range send_r, recv_r;
    int64_t send_t0 = 0, recv_t0 = 0;
  };
  Range piece(Range r, int64_t k) const;
  Tensor& scratch();

  Communicator& comm_;
  Tensor flat_;
  Tensor scratch_;  // 2 segments, made on first use
  int64_t seg_ = 1;
  bool pipelined_ = true;
  Tracer& tracer_;
};

}  // namespace stoke::dist::internal
