// Options shared by stoke's own collectives built on a Communicator's send/recv: the ring
// (dist/ring.h), the binomial tree (dist/tree.h) and recursive halving-doubling (dist/rhd.h).
#pragma once

#include <cstdint>
#include <ostream>

namespace stoke::dist {

struct CollectiveOptions {
  // The pipelining unit: every message carries at most this many bytes of one range, so a rank
  // reduces one segment while the next is in flight.
  int64_t segment_bytes = int64_t{1} << 20;
  // The step-by-step text trace (one line per step and rank: what each rank sends, receives and
  // reduces). Null: std::cerr when the environment has STOKE_COLLECTIVE_TRACE=1 (or, for the
  // ring, STOKE_RING_TRACE=1), else none.
  std::ostream* trace = nullptr;
  // The timed trace: one JSON object per line for every send, receive and reduce of a segment, with
  // its range, bytes and start and end (steady clock, ns), the input of
  // scripts/collective_timeline.py. Null: the file <prefix>.rank<R>.jsonl (appended) when the
  // environment has STOKE_COLLECTIVE_TIMELINE=<prefix>, else none.
  std::ostream* timeline = nullptr;
  // true: segment k+1 is sent and received (isend/irecv) while segment k is reduced, into a
  // second buffer (double buffering). false: each segment is one blocking sendrecv, then its
  // reduce, the textbook form (kept to measure what pipelining buys).
  bool pipelined = true;
};

using RingOptions = CollectiveOptions;

}  // namespace stoke::dist
