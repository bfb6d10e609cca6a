#include "dist/algorithm_util.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <string_view>
#include <type_traits>

#include "dist/reduce_dtype.h"
#include "ops/elementwise.h"

namespace stoke::dist::internal {

int mod(int a, int n) {
  return ((a % n) + n) % n;
}

void check_contiguous(const Tensor& t, const std::string& label, const char* what) {
  STOKE_CHECK(t.defined() && t.is_contiguous(), label.c_str(), what,
              " must be a defined, contiguous tensor");
}

void check_sharded(const Communicator& comm, const Tensor& input, const Tensor& output,
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

void check_reducible(const Tensor& t, const std::string& label) {
  visit_floating(t.dtype(), label, [](auto) {});
  STOKE_CHECK(t.device().is_cpu() || t.dtype() != DType::f64, label.c_str(),
              "stoke's collectives reduce f64 on the CPU only (stoke's CUDA kernels take f32, f16 "
              "and bf16); got f64 on ",
              t.device());
}

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

namespace {

template <class T>
using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;

bool half_type(DType t) {
  return t == DType::f16 || t == DType::bf16;
}

}  // namespace

void reduce_into(const Tensor& acc, const Tensor& in, ReduceOp op, const std::string& label) {
  const int64_t n = acc.numel();
  if (n == 0) return;
  if (!acc.device().is_cpu()) {
    // The elementwise kernels: a sum in place (f16/bf16 loaded as f32, rounded once); max through
    // f32 for the half types, so that each step rounds once as on the CPU.
    if (op != ReduceOp::max) {
      ops::add_(acc, in);
      return;
    }
    const bool half = half_type(acc.dtype());
    const Tensor a = half ? acc.to(DType::f32) : acc, b = half ? in.to(DType::f32) : in;
    const Tensor r = ops::maximum(a, b);
    Tensor out = acc;
    out.copy_(half ? r.to(acc.dtype()) : r);
    return;
  }
  visit_floating(acc.dtype(), label, [&](auto zero) {
    using T = decltype(zero);
    T* a = acc.data<T>();
    const T* b = in.data<T>();
    if (op == ReduceOp::max) {
      for (int64_t i = 0; i < n; ++i)
        a[i] = T(std::max(static_cast<Acc<T>>(a[i]), static_cast<Acc<T>>(b[i])));
    } else {
      for (int64_t i = 0; i < n; ++i)
        a[i] = T(static_cast<Acc<T>>(a[i]) + static_cast<Acc<T>>(b[i]));
    }
  });
}

void divide_by(const Tensor& p, int by, const std::string& label) {
  const int64_t n = p.numel();
  if (n == 0 || by == 1) return;
  if (!p.device().is_cpu()) {
    const bool half = half_type(p.dtype());
    const Tensor r = ops::div(half ? p.to(DType::f32) : p, static_cast<double>(by));
    Tensor out = p;
    out.copy_(half ? r.to(p.dtype()) : r);
    return;
  }
  visit_floating(p.dtype(), label, [&](auto zero) {
    using T = decltype(zero);
    T* x = p.data<T>();
    for (int64_t i = 0; i < n; ++i) x[i] = T(static_cast<Acc<T>>(x[i]) / static_cast<Acc<T>>(by));
  });
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// --- traces --------------------------------------------------------------------------------------

namespace {

// Every write to std::cerr or to a timeline file of STOKE_COLLECTIVE_TIMELINE goes under this lock:
// in-process ranks are threads of one process, and two groups' rank r share a file.
std::mutex& trace_mutex() {
  static std::mutex m;
  return m;
}

bool env_is_one(const char* name) {
  const char* v = std::getenv(name);
  return v && std::string_view(v) == "1";
}

// The file of STOKE_COLLECTIVE_TIMELINE=<prefix> for `rank`, opened once per process (append).
std::ostream* timeline_file(int rank) {
  const char* prefix = std::getenv("STOKE_COLLECTIVE_TIMELINE");
  if (!prefix || !*prefix) return nullptr;
  const std::string path = detail::str_cat(prefix, ".rank", rank, ".jsonl");
  static std::map<std::string, std::unique_ptr<std::ofstream>> files;
  std::lock_guard<std::mutex> lock(trace_mutex());
  std::unique_ptr<std::ofstream>& f = files[path];
  if (!f) {
    f = std::make_unique<std::ofstream>(path, std::ios::app);
    STOKE_CHECK(f->good(), "STOKE_COLLECTIVE_TIMELINE", "cannot open '", path, "' for appending");
  }
  return f.get();
}

bool shared_sink(const std::ostream* os) {
  return os == &std::cerr;
}

}  // namespace

Tracer::Tracer(const Communicator& comm, const char* coll, int64_t seq, int64_t element_bytes,
               const CollectiveOptions& o, bool ring_env)
    : coll_(coll),
      seq_(seq),
      rank_(comm.rank()),
      ranks_(comm.size()),
      element_bytes_(element_bytes) {
  text_ = o.trace;
  if (!text_ &&
      (env_is_one("STOKE_COLLECTIVE_TRACE") || (ring_env && env_is_one("STOKE_RING_TRACE"))))
    text_ = &std::cerr;
  timeline_ = o.timeline ? o.timeline : timeline_file(rank_);
  env_timeline_ = !o.timeline && timeline_;
}

void Tracer::step_line(int step, int total_steps, const std::string& what) {
  if (!text_) return;
  const std::string line = detail::str_cat(coll_, " #", seq_, " rank ", rank_, "/", ranks_,
                                           " step ", step, "/", total_steps, " ", what, "\n");
  if (shared_sink(text_)) {
    std::lock_guard<std::mutex> lock(trace_mutex());
    *text_ << line << std::flush;
  } else {
    *text_ << line;
  }
}

void Tracer::event(const char* phase, int step, const char* kind, int peer, Range r, int64_t t0,
                   int64_t t1) {
  if (!timeline_) return;
  const std::string line = detail::str_cat(
      "{\"coll\": \"", coll_, "\", \"seq\": ", seq_, ", \"rank\": ", rank_, ", \"ranks\": ", ranks_,
      ", \"phase\": \"", phase, "\", \"step\": ", step, ", \"kind\": \"", kind,
      "\", \"peer\": ", peer, ", \"begin\": ", r.begin, ", \"end\": ", r.end,
      ", \"bytes\": ", r.size() * element_bytes_, ", \"t0_ns\": ", t0, ", \"t1_ns\": ", t1, "}\n");
  if (env_timeline_) {
    std::lock_guard<std::mutex> lock(trace_mutex());
    *timeline_ << line << std::flush;
  } else {
    *timeline_ << line;
  }
}

std::string Tracer::describe(const char* phase, Range send, int dst, Range recv, int src,
                             const char* action) {
  std::string s = detail::str_cat(phase, ":");
  if (dst >= 0) s += detail::str_cat(" send [", send.begin, ", ", send.end, ") to rank ", dst);
  if (src >= 0)
    s += detail::str_cat(dst >= 0 ? "," : "", " recv [", recv.begin, ", ", recv.end, ") from rank ",
                         src, ", ", action);
  return s;
}

// --- the exchange --------------------------------------------------------------------------------

Exchanger::Exchanger(Communicator& comm, Tensor flat, const CollectiveOptions& o, Tracer& tracer)
    : comm_(comm), flat_(std::move(flat)), pipelined_(o.pipelined), tracer_(tracer) {
  seg_ = std::max<int64_t>(1, o.segment_bytes / static_cast<int64_t>(flat_.element_size()));
}

int64_t Exchanger::segments(Range r) const {
  return std::max<int64_t>(1, (r.size() + seg_ - 1) / seg_);
}

Range Exchanger::piece(Range r, int64_t k) const {
  const int64_t b = std::min(r.end, r.begin + k * seg_);
  return {b, std::min(r.end, b + seg_)};
}

Tensor& Exchanger::scratch() {
  if (!scratch_.defined())
    scratch_ = empty({2 * seg_}, {.dtype = flat_.dtype(), .device = flat_.device()});
  return scratch_;
}

void Exchanger::exchange(Range send, int dst, Range recv, int src, bool reduce, ReduceOp op,
                         const char* phase, int step) {
  const int64_t n_send = dst >= 0 ? segments(send) : 0, n_recv = src >= 0 ? segments(recv) : 0;
  const int64_t k_end = std::max(n_send, n_recv);
  const std::string& label = comm_.op_label();
  Slot slots[2];
  auto target = [&](int64_t k, Range r) {
    return reduce ? scratch().narrow(0, (k % 2) * seg_, r.size())
                  : flat_.narrow(0, r.begin, r.size());
  };
  auto finish_recv = [&](Slot& s) {
    const int64_t t1 = tracer_.now();
    tracer_.event(phase, step, "recv", src, s.recv_r, s.recv_t0, t1);
    if (!reduce) return;
    reduce_into(flat_.narrow(0, s.recv_r.begin, s.recv_r.size()), s.in, op, label);
    tracer_.event(phase, step, "reduce", -1, s.recv_r, t1, tracer_.now());
  };
  if (!pipelined_) {
    for (int64_t k = 0; k < k_end; ++k) {
      Slot& s = slots[0];
      const bool sending = k < n_send, receiving = k < n_recv;
      Tensor out;
      if (sending) {
        s.send_r = piece(send, k);
        out = flat_.narrow(0, s.send_r.begin, s.send_r.size());
      }
      s.send_t0 = s.recv_t0 = tracer_.now();
      if (receiving) {
        s.recv_r = piece(recv, k);
        s.in = target(k, s.recv_r);
        if (sending)
          comm_.sendrecv(out, dst, s.in, src, kAlgorithmTag);
        else
          comm_.recv(s.in, src, kAlgorithmTag);
      } else {
        comm_.send(out, dst, kAlgorithmTag);
      }
      if (sending) tracer_.event(phase, step, "send", dst, s.send_r, s.send_t0, tracer_.now());
      if (receiving) finish_recv(s);
    }
    return;
  }
  // Pipelined: segment k+1's receive and send are posted before segment k is reduced; its receive
  // lands in the other half of the scratch buffer, which segment k-1's reduce has finished with.
  auto post = [&](int64_t k) {
    Slot& s = slots[k % 2];
    if (k < n_recv) {
      s.recv_r = piece(recv, k);
      s.in = target(k, s.recv_r);
      s.recv_t0 = tracer_.now();
      s.recv = comm_.irecv(s.in, src, kAlgorithmTag);
    }
    if (k < n_send) {
      s.send_r = piece(send, k);
      s.send_t0 = tracer_.now();
      s.send = comm_.isend(flat_.narrow(0, s.send_r.begin, s.send_r.size()), dst, kAlgorithmTag);
    }
  };
  post(0);
  for (int64_t k = 0; k < k_end; ++k) {
    if (k + 1 < k_end) post(k + 1);
    Slot& s = slots[k % 2];
    if (k < n_recv) {
      comm_.wait(s.recv);
      finish_recv(s);
    }
    if (k < n_send) {
      comm_.wait(s.send);
      tracer_.event(phase, step, "send", dst, s.send_r, s.send_t0, tracer_.now());
    }
  }
}

}  // namespace stoke::dist::internal
