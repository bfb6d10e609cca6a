#include "dist/ring.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <mutex>
#include <string_view>

#include "dist/reduce_dtype.h"
#include "ops/elementwise.h"

namespace stoke::dist {

using internal::visit_floating;

namespace {

constexpr int kRingTag = -1;  // the ring's messages; user tags are >= 0

int mod(int a, int n) {
  return ((a % n) + n) % n;
}

std::ostream* trace_sink(const RingOptions& o) {
  if (o.trace) return o.trace;
  const char* env = std::getenv("STOKE_RING_TRACE");
  return env && std::string_view(env) == "1" ? &std::cerr : nullptr;
}

void trace_line(std::ostream* os, const std::string& line) {
  static std::mutex cerr_mutex;  // ranks are threads in-process: one line at a time on cerr
  if (os == &std::cerr) {
    std::lock_guard<std::mutex> lock(cerr_mutex);
    *os << line << std::flush;
  } else {
    *os << line;
  }
}

// acc[i] = acc[i] op in[i], rounding to T once (half types compute in f32).
template <class T>
void reduce_into(T* acc, const T* in, int64_t n, ReduceOp op) {
  using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
  if (op == ReduceOp::max) {
    for (int64_t i = 0; i < n; ++i)
      acc[i] = T(std::max(static_cast<Acc>(acc[i]), static_cast<Acc>(in[i])));
  } else {
    for (int64_t i = 0; i < n; ++i) acc[i] = T(static_cast<Acc>(acc[i]) + static_cast<Acc>(in[i]));
  }
}

template <class T>
void divide(T* p, int64_t n, int by) {
  using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
  for (int64_t i = 0; i < n; ++i) p[i] = T(static_cast<Acc>(p[i]) / static_cast<Acc>(by));
}

// The same two steps for tensors on a device (cuda): the elementwise kernels, f16/bf16 through
// f32 so that each step rounds once, as on the CPU.
bool half_type(DType t) {
  return t == DType::f16 || t == DType::bf16;
}

void reduce_on_device(const Tensor& acc, const Tensor& in, ReduceOp op) {
  // A sum in place: no temporary per segment (the elementwise kernels load f16/bf16 as f32 and
  // round the result once, as below).
  if (op != ReduceOp::max) {
    ops::add_(acc, in);
    return;
  }
  const bool half = half_type(acc.dtype());
  const Tensor a = half ? acc.to(DType::f32) : acc, b = half ? in.to(DType::f32) : in;
  const Tensor r = op == ReduceOp::max ? ops::maximum(a, b) : ops::add(a, b);
  Tensor out = acc;
  out.copy_(half ? r.to(acc.dtype()) : r);
}

void divide_on_device(const Tensor& p, int by) {
  const bool half = half_type(p.dtype());
  const Tensor r = ops::div(half ? p.to(DType::f32) : p, static_cast<double>(by));
  Tensor out = p;
  out.copy_(half ? r.to(p.dtype()) : r);
}

// One ring phase over `flat` (a contiguous 1-D view) whose chunks are `chunks`.
class Ring {
 public:
  Ring(Communicator& comm, Tensor flat, std::vector<RingChunk> chunks, const RingOptions& o,
       int total_steps)
      : comm_(comm),
        flat_(std::move(flat)),
        chunks_(std::move(chunks)),
        trace_(trace_sink(o)),
        total_steps_(total_steps),
        n_(comm.size()),
        r_(comm.rank()) {
    seg_ = std::max<int64_t>(1, o.segment_bytes / static_cast<int64_t>(flat_.element_size()));
  }

  // Afterwards rank r holds chunk r reduced over every rank.
  void reduce_scatter(ReduceOp op) {
    Tensor scratch = empty({seg_}, {.dtype = flat_.dtype(), .device = flat_.device()});
    for (int s = 0; s < n_ - 1; ++s) {
      const int send_c = mod(r_ - s - 1, n_), recv_c = mod(r_ - s - 2, n_);
      trace(s, "reduce-scatter", send_c, recv_c, "reduce");
      exchange(send_c, recv_c, [&](int64_t begin, int64_t len) {
        Tensor in = scratch.narrow(0, 0, len);
        return std::make_pair(in, [this, in, begin, len, op] {
          if (!flat_.device().is_cpu()) {
            visit_floating(flat_.dtype(), comm_.op_label(), [](auto) {});  // the dtype check
            return reduce_on_device(flat_.narrow(0, begin, len), in, op);
          }
          visit_floating(flat_.dtype(), comm_.op_label(), [&](auto zero) {
            using T = decltype(zero);
            reduce_into(flat_.data<T>() + begin, in.data<T>(), len, op);
          });
        });
      });
    }
  }

  // Rank r's chunk r travels to every rank.
  void allgather(int first_step) {
    for (int s = 0; s < n_ - 1; ++s) {
      const int send_c = mod(r_ - s, n_), recv_c = mod(r_ - s - 1, n_);
      trace(first_step + s, "allgather", send_c, recv_c, "copy");
      exchange(send_c, recv_c, [&](int64_t begin, int64_t len) {
        return std::make_pair(flat_.narrow(0, begin, len), [] {});
      });
    }
  }

  void divide_own_chunk() {
    const RingChunk c = chunks_[r_];
    if (!flat_.device().is_cpu())
      return divide_on_device(flat_.narrow(0, c.begin, c.end - c.begin), n_);
    visit_floating(flat_.dtype(), comm_.op_label(), [&](auto zero) {
      using T = decltype(zero);
      divide(flat_.data<T>() + c.begin, c.end - c.begin, n_);
    });
  }

 private:
  int64_t segments(int c) const {
    const int64_t len = chunks_[c].end - chunks_[c].begin;
    return std::max<int64_t>(1, (len + seg_ - 1) / seg_);  // an empty chunk still sends one
  }

  // Sends chunk send_c to the next rank and receives chunk recv_c from the previous one, segment
  // by segment; target(begin, len) gives the tensor a received segment lands in and what to do
  // with it then.
  template <class Target>
  void exchange(int send_c, int recv_c, Target target) {
    const int next = mod(r_ + 1, n_), prev = mod(r_ - 1, n_);
    const int64_t k_end = std::max(segments(send_c), segments(recv_c));
    for (int64_t k = 0; k < k_end; ++k) {
      const bool sending = k < segments(send_c), receiving = k < segments(recv_c);
      Tensor out;
      if (sending) {
        const int64_t b = chunks_[send_c].begin + k * seg_;
        out = flat_.narrow(0, b, std::min(seg_, chunks_[send_c].end - b));
      }
      if (receiving) {
        const int64_t b = chunks_[recv_c].begin + k * seg_;
        auto [in, then] = target(b, std::min(seg_, chunks_[recv_c].end - b));
        if (sending)
          comm_.sendrecv(out, next, in, prev, kRingTag);
        else
          comm_.recv(in, prev, kRingTag);
        then();
      } else {
        comm_.send(out, next, kRingTag);
      }
    }
  }

  void trace(int step, const char* phase, int send_c, int recv_c, const char* action) {
    if (!trace_) return;
    const RingChunk s = chunks_[send_c], r = chunks_[recv_c];
    trace_line(trace_, detail::str_cat(comm_.op_label(), " rank ", r_, "/", n_, " step ", step + 1,
                                       "/", total_steps_, " ", phase, ": send chunk ", send_c, " [",
                                       s.begin, ", ", s.end, ") to rank ", mod(r_ + 1, n_),
                                       ", recv chunk ", recv_c, " [", r.begin, ", ", r.end,
                                       ") from rank ", mod(r_ - 1, n_), ", ", action, "\n"));
  }

  Communicator& comm_;
  Tensor flat_;
  std::vector<RingChunk> chunks_;
  std::ostream* trace_;
  int total_steps_;
  int n_, r_;
  int64_t seg_ = 1;
};

std::vector<RingChunk> chunks_of(int64_t numel, int ranks) {
  std::vector<RingChunk> c(ranks);
  for (int i = 0; i < ranks; ++i) c[i] = ring_chunk(numel, ranks, i);
  return c;
}

void check_contiguous(const Tensor& t, const std::string& label, const char* what) {
  STOKE_CHECK(t.defined() && t.is_contiguous(), label.c_str(), what,
              " must be a defined, contiguous tensor");
}

// The operands of ring_reduce_scatter and ring_allgather: contiguous, in one dtype on one device,
// and the whole one (the input of reduce_scatter, the output of allgather) with size() x the
// other's elements.
void check_ring_sharded(const Communicator& comm, const Tensor& input, const Tensor& output,
                        bool input_is_whole) {
  const std::string& label = comm.op_label();
  check_contiguous(input, label, "the input");
  check_contiguous(output, label, "the output");
  const int n = comm.size();
  const Tensor& whole = input_is_whole ? input : output;
  const Tensor& part = input_is_whole ? output : input;
  STOKE_CHECK(whole.numel() == part.numel() * n, label.c_str(), "rank ", comm.rank(), ": the ",
              input_is_whole ? "input" : "output", " must have ", n, " x ", part.numel(),
              " elements, got ", whole.numel());
  STOKE_CHECK(input.dtype() == output.dtype(), label.c_str(), "input dtype ", input.dtype(),
              " differs from output dtype ", output.dtype());
  STOKE_CHECK(input.device() == output.device(), label.c_str(), "input on ", input.device(),
              " and output on ", output.device());
}

// Off the CPU the reduce step is stoke's elementwise kernels, which take f32, f16 and bf16: refused
// before any message moves, so that every rank fails alike instead of mid-ring.
void check_device_dtype(const Tensor& t, const std::string& label) {
  STOKE_CHECK(t.device().is_cpu() || t.dtype() != DType::f64, label.c_str(),
              "the ring reduces f64 on the CPU only (stoke's CUDA kernels take f32, f16 and bf16); "
              "got f64 on ",
              t.device());
}

// dst = src (same numel, dtype and device): memcpy on the CPU rather than copy_(), which may run
// on the thread pool shared by every rank thread; a device copy elsewhere.
void copy_flat(const Tensor& dst, const Tensor& src) {
  if (src.numel() == 0) return;
  if (src.device().is_cpu()) {
    std::memcpy(dst.data_ptr(), src.data_ptr(),
                static_cast<size_t>(src.numel()) * src.element_size());
  } else {
    Tensor d = dst;
    d.copy_(src);
  }
}

}  // namespace

RingChunk ring_chunk(int64_t numel, int ranks, int chunk) {
  const int64_t q = numel / ranks, rem = numel % ranks;
  const int64_t begin = chunk * q + std::min<int64_t>(chunk, rem);
  return {begin, begin + q + (chunk < rem ? 1 : 0)};
}

void ring_allreduce(Communicator& comm, Tensor& t, ReduceOp op, const RingOptions& options) {
  comm.run_in_order([&] {
    Communicator::Scope scope(comm, "ring_allreduce");
    check_contiguous(t, comm.op_label(), "the tensor");
    visit_floating(t.dtype(), comm.op_label(), [](auto) {});
    check_device_dtype(t, comm.op_label());
    const int n = comm.size();
    Ring ring(comm, t.view({t.numel()}), chunks_of(t.numel(), n), options, 2 * (n - 1));
    ring.reduce_scatter(op);
    if (op == ReduceOp::avg) ring.divide_own_chunk();
    ring.allgather(n - 1);
  });
}

void ring_reduce_scatter(Communicator& comm, const Tensor& input, Tensor& output, ReduceOp op,
                         const RingOptions& options) {
  comm.run_in_order([&] {
    Communicator::Scope scope(comm, "ring_reduce_scatter");
    check_ring_sharded(comm, input, output, true);
    const std::string& label = comm.op_label();
    const int n = comm.size();
    visit_floating(input.dtype(), label, [](auto) {});
    check_device_dtype(input, label);
    // A copy, so that the input is not overwritten.
    Tensor work = empty({input.numel()}, {.dtype = input.dtype(), .device = input.device()});
    copy_flat(work, input.view({input.numel()}));
    Ring ring(comm, work, chunks_of(work.numel(), n), options, n - 1);
    ring.reduce_scatter(op);
    if (op == ReduceOp::avg) ring.divide_own_chunk();
    const int64_t b = output.numel();
    copy_flat(output.view({b}), work.narrow(0, comm.rank() * b, b));
  });
}

void ring_allgather(Communicator& comm, const Tensor& input, Tensor& output,
                    const RingOptions& options) {
  comm.run_in_order([&] {
    Communicator::Scope scope(comm, "ring_allgather");
    check_ring_sharded(comm, input, output, false);
    const int n = comm.size();
    Tensor flat = output.view({output.numel()});
    const int64_t b = input.numel();
    copy_flat(flat.narrow(0, comm.rank() * b, b), input.view({b}));
    Ring ring(comm, flat, chunks_of(flat.numel(), n), options, n - 1);
    ring.allgather(0);
  });
}

}  // namespace stoke::dist
