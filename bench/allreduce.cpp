// stoke-bench-allreduce: MPI's own allreduce (MpiCommunicator::allreduce, "native") against stoke's
// algorithms over the same communicator (dist/ring.h, tree.h, rhd.h: the pipelined ring, the ring
// without pipelining, the binomial tree, recursive halving-doubling) and the tuner's choice
// ("auto", dist/tuner.h), size by size in the same run, in nccl-tests' table; then auto against
// the best and against native, the measured crossovers against the calibrated model's, and an
// alpha-beta model fitted to the ring and projected to 8 ... 1024 ranks.
//
//   mpirun --allow-run-as-root --oversubscribe -np 4 build/bench/stoke-bench-allreduce
//       [--min-bytes 8] [--max-bytes 256M] [--step-factor 4] [--dtype f32|f64|f16|bf16]
//       [--iters N] [--warmup N] [--budget-s S] [--segment-bytes 1M] [--no-arg-check] [--quick]
//       [--algos native,ring,ring_blocking,tree,rhd,auto]
//
// (with more ranks than cores, set OMPI_MCA_mpi_yield_when_idle=1: a rank waiting in MPI otherwise
// spins on the core the rank it waits for needs). Sizes are max-bytes / step-factor^k down to
// min-bytes, and min-bytes itself: the largest size (and 64 MiB under the defaults) is always on
// the list. For each size and algorithm: warm-up runs, then timed iterations, each after a
// barrier; a rank's time is from leaving the barrier to the end of its allreduce, an iteration's
// time is the slowest rank's, and the row shows the median over iterations (nccl-tests' "time").
// algbw = bytes / time; busbw = algbw * 2(n-1)/n, the bandwidth each rank's link must carry for
// a bandwidth-optimal allreduce, so busbw compares across rank counts. After the timed iterations
// one allreduce of known values is checked against its closed form: #wrong counts the elements
// (over all ranks) that differ. The program exits 1 when any #wrong is non-zero.
//
// msgs: the point-to-point messages one allreduce sends on a rank (the most over the ranks; native
// has none of stoke's). The tuner's calibration runs before the table and is printed first.
//
// Only rank 0 prints: the calibration, the table, the tuner's report, the ring/native ratio per
// size, the model, and one JSON line.
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "bench/allreduce.h"
#include "bench/bench_util.h"
#include "core/error.h"
#include "core/tensor.h"
#if defined(STOKE_HAS_MPI)
#include "dist/mpi.h"
#endif
#include "dist/reduce_dtype.h"
#include "dist/rhd.h"
#include "dist/ring.h"
#include "dist/tree.h"
#include "dist/tuner.h"
#include "ops/creation.h"

namespace {

using namespace stoke;
using bench::fmt;

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr const char* kProg = "stoke-bench-allreduce";

using Args = bench::AllreduceArgs;
using Row = bench::AllreduceRow;

constexpr const char* kAlgoNames[] = {"native", "ring", "ring_blocking", "tree", "rhd", "auto"};

// "8", "64K", "256M", "1G" (binary multiples) -> bytes; -1 when malformed.
int64_t parse_bytes(const std::string& s) {
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || end == s.c_str() || v < 0) return -1;
  const std::string unit = end;
  if (unit.empty() || unit == "B") return v;
  if (unit == "K" || unit == "KiB") return v << 10;
  if (unit == "M" || unit == "MiB") return v << 20;
  if (unit == "G" || unit == "GiB") return v << 30;
  return -1;
}

std::string human_bytes(int64_t b) {
  if (b >= kMiB && b % kMiB == 0) return detail::str_cat(b / kMiB, " MiB");
  if (b >= 1024 && b % 1024 == 0) return detail::str_cat(b / 1024, " KiB");
  return detail::str_cat(b, " B");
}

void usage(std::ostream& os) {
  os << "usage: mpirun [--allow-run-as-root --oversubscribe] -np N " << kProg
     << " [options]\n"
        "  --min-bytes B      smallest size (default 8; suffixes K, M, G are binary)\n"
        "  --max-bytes B      largest size (default 256M)\n"
        "  --step-factor F    sizes are max-bytes / F^k down to min-bytes, and min-bytes (default "
        "4)\n"
        "  --dtype T          f32 (default), f64, f16 or bf16\n"
        "  --iters N          exactly N timed iterations per point (default: up to 200, about\n"
        "                     --budget-s seconds per point, at least 5; the algorithms of one\n"
        "                     size take turns, iteration by iteration)\n"
        "  --warmup N         untimed iterations first (default 3)\n"
        "  --budget-s S       seconds of timed iterations per point without --iters (default 2)\n"
        "  --segment-bytes B  the ring's pipelining segment (default 1M)\n"
        "  --no-arg-check     native without MpiOptions::check_args (its extra small allreduce)\n"
        "  --algos LIST       comma-separated, of native, ring, ring_blocking (the ring without\n"
        "                     pipelining), tree, rhd, auto (default: all)\n"
        "  --engine E         mpi (default: cpu tensors over MpiCommunicator) or nccl (cuda\n"
        "                     tensors over NcclCommunicator: one rank per GPU, under mpirun\n"
        "                     one process per GPU, else one thread per GPU of this process)\n"
        "  --gpus G           with --engine nccl outside mpirun: the first G GPUs (default all)\n"
        "  --quick            smoke run: up to 1 MiB, 3 iterations, 1 warm-up\n";
}

// Parses argv into `a`; returns an exit code (>= 0) when the program should stop.
int parse_args(int argc, char** argv, Args& a) {
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    auto value = [&](const char* flag) -> std::string {
      if (i + 1 >= argc) {
        std::cerr << kProg << ": " << flag << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    auto int_value = [&](const char* flag, long min) {
      const std::string v = value(flag);
      char* end = nullptr;
      const long n = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || n < min || n > 1000000000L) {
        std::cerr << kProg << ": " << flag << " expects an integer >= " << min << ", got '" << v
                  << "'\n";
        std::exit(2);
      }
      return static_cast<int>(n);
    };
    auto bytes_value = [&](const char* flag) {
      const std::string v = value(flag);
      const int64_t b = parse_bytes(v);
      if (b < 1) {
        std::cerr << kProg << ": " << flag << " expects a size such as 8, 64K or 256M, got '" << v
                  << "'\n";
        std::exit(2);
      }
      return b;
    };
    if (s == "--min-bytes") {
      a.min_bytes = bytes_value("--min-bytes");
    } else if (s == "--max-bytes") {
      a.max_bytes = bytes_value("--max-bytes");
    } else if (s == "--step-factor") {
      a.step_factor = int_value("--step-factor", 2);
    } else if (s == "--dtype") {
      const std::string d = value("--dtype");
      if (d == "f32") {
        a.dtype = DType::f32;
      } else if (d == "f64") {
        a.dtype = DType::f64;
      } else if (d == "f16") {
        a.dtype = DType::f16;
      } else if (d == "bf16") {
        a.dtype = DType::bf16;
      } else {
        std::cerr << kProg << ": --dtype expects f32, f64, f16 or bf16, got '" << d << "'\n";
        return 2;
      }
    } else if (s == "--iters") {
      a.iters = int_value("--iters", 1);
      a.iters_given = true;
    } else if (s == "--warmup") {
      a.warmup = int_value("--warmup", 0);
    } else if (s == "--budget-s") {
      const std::string v = value("--budget-s");
      char* end = nullptr;
      a.budget_s = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !(a.budget_s > 0)) {
        std::cerr << kProg << ": --budget-s expects a positive number, got '" << v << "'\n";
        return 2;
      }
    } else if (s == "--segment-bytes") {
      a.segment_bytes = bytes_value("--segment-bytes");
    } else if (s == "--engine") {
      a.engine = value("--engine");
      if (a.engine != "mpi" && a.engine != "nccl") {
        std::cerr << kProg << ": --engine expects mpi or nccl, got '" << a.engine << "'\n";
        return 2;
      }
    } else if (s == "--gpus") {
      a.gpus = int_value("--gpus", 1);
    } else if (s == "--algos") {
      const std::string v = value("--algos");
      a.algos = bench::split_commas(v);
      for (const std::string& name : a.algos)
        if (std::find(std::begin(kAlgoNames), std::end(kAlgoNames), name) == std::end(kAlgoNames)) {
          std::cerr << kProg << ": --algos: unknown algorithm '" << name
                    << "' (native, ring, ring_blocking, tree, rhd, auto)\n";
          return 2;
        }
    } else if (s == "--no-arg-check") {
      a.check_args = false;
    } else if (s == "--quick") {
      a.quick = true;
    } else if (s == "-h" || s == "--help") {
      usage(std::cout);
      return 0;
    } else {
      std::cerr << kProg << ": unknown argument '" << s << "'\n";
      usage(std::cerr);
      return 2;
    }
  }
  if (a.quick) {
    a.max_bytes = std::min(a.max_bytes, kMiB);
    a.min_bytes = std::min(a.min_bytes, a.max_bytes);
    if (!a.iters_given) a.iters = 3;
    a.iters_given = true;
    a.warmup = std::min(a.warmup, 1);
  }
  if (a.min_bytes > a.max_bytes) {
    std::cerr << kProg << ": --min-bytes " << a.min_bytes << " is above --max-bytes " << a.max_bytes
              << "\n";
    return 2;
  }
  return -1;
}

// The sizes to measure, ascending, each a whole number of elements (at least one).
std::vector<int64_t> sizes_of(const Args& a) {
  std::vector<int64_t> raw;
  for (int64_t b = a.max_bytes; b >= a.min_bytes; b /= a.step_factor) raw.push_back(b);
  if (raw.empty() || raw.back() != a.min_bytes) raw.push_back(a.min_bytes);
  const auto elem = static_cast<int64_t>(dtype_size(a.dtype));
  std::vector<int64_t> out;
  for (auto it = raw.rbegin(); it != raw.rend(); ++it) {
    const int64_t bytes = std::max<int64_t>(1, *it / elem) * elem;
    if (out.empty() || out.back() != bytes) out.push_back(bytes);
  }
  return out;
}

// The checked allreduce's input: rank r holds ((i % kPeriod) + r) % K at index i. Integers, and
// K is chosen so that every partial sum of n ranks' values fits the dtype's exact integers, so the
// result is exact whatever order the ranks are added in (MPI's order is its own). The prime period
// is not a multiple of any chunk or segment, so a chunk put in the wrong place shows.
constexpr int kPeriod = 1021;

// The largest integer below which all integers are exact in the dtype.
double exact_limit(DType dtype) {
  switch (dtype) {
    case DType::f64:
      return 9007199254740992.0;  // 2^53
    case DType::f16:
      return 2048;
    case DType::bf16:
      return 256;
    default:
      return 16777216;  // 2^24
  }
}

int modulus_for(DType dtype, int ranks) {
  const double k = std::floor(exact_limit(dtype) / ranks) + 1;  // n * (K - 1) <= limit
  return static_cast<int>(std::clamp(k, 2.0, static_cast<double>(kPeriod)));
}

void fill_check_input(Tensor& t, int rank, int ranks) {
  const int k = modulus_for(t.dtype(), ranks);
  dist::internal::visit_floating(t.dtype(), kProg, [&](auto zero) {
    using T = decltype(zero);
    T* p = t.data<T>();
    for (int64_t i = 0, n = t.numel(); i < n; ++i)
      p[i] = T(static_cast<float>(((i % kPeriod) + rank) % k));
  });
}

// Elements of t that differ from the sum over ranks of fill_check_input. Exact unless n(K-1)
// passes the dtype's exact integers (bf16 past 128 ranks): then within n-1 roundings.
int64_t count_wrong(const Tensor& t, int ranks) {
  const int k = modulus_for(t.dtype(), ranks);
  std::vector<double> want(kPeriod);
  double largest = 0;
  for (int j = 0; j < kPeriod; ++j) {
    for (int r = 0; r < ranks; ++r) want[j] += (j + r) % k;
    largest = std::max(largest, want[j]);
  }
  const double eps = t.dtype() == DType::f16 ? 0x1p-11 : t.dtype() == DType::bf16 ? 0x1p-8 : 0;
  const double rel_tol = largest <= exact_limit(t.dtype()) ? 0.0 : eps * (ranks - 1);
  int64_t wrong = 0;
  dist::internal::visit_floating(t.dtype(), kProg, [&](auto zero) {
    using T = decltype(zero);
    const T* p = t.data<T>();
    for (int64_t i = 0, n = t.numel(); i < n; ++i) {
      const double w = want[i % kPeriod];
      const double got = static_cast<double>(
          static_cast<std::conditional_t<std::is_same_v<T, double>, double, float>>(p[i]));
      if (!(std::fabs(got - w) <= rel_tol * w)) ++wrong;
    }
  });
  return wrong;
}

void fill_zero(Tensor& t) {
  // The timed iterations reduce zeros: the cost of an add does not depend on the values (no
  // subnormals here), and repeated in-place sums of zeros stay zero, where anything else grows by
  // n each time and overflows f16 into inf within a few iterations.
  fill_(t, 0.0);
}

// v[i] = max over ranks of v[i] (the native collective; every rank gets the result).
void max_over_ranks(dist::Communicator& comm, Device device, std::vector<double>& v) {
  const auto n = static_cast<int64_t>(v.size());
  // f32 on a device (NCCL moves f64 too, but the ring and the emulator favour f32): times in
  // seconds keep 7 digits.
  Tensor t =
      from_vector<double>(v, {n}, {.dtype = device.is_cpu() ? DType::f64 : DType::f32}).to(device);
  comm.allreduce(t, dist::ReduceOp::max);
  v = t.to(Device::cpu()).to(DType::f64).to_vector<double>();
}

// Every algorithm of `algos` at one size, their timed iterations interleaved (iteration i of each
// in turn, the order shuffled), so that a slow phase of the machine (another process, a frequency
// change) falls on all of them alike instead of on whichever was being timed then: the rows of one
// size compare.
std::vector<Row> measure_size(const bench::AllreduceJob& job, const std::vector<std::string>& algos,
                              Tensor& t, const Args& a) {
  dist::Communicator& comm = *job.comm;
  const size_t k = algos.size();
  std::vector<dist::CollectiveOptions> options(k);
  std::vector<dist::AllreduceAlgorithm> which(k);
  for (size_t j = 0; j < k; ++j) {
    options[j] = {.segment_bytes = a.segment_bytes, .pipelined = algos[j] != "ring_blocking"};
    which[j] = algos[j] == "ring_blocking" ? dist::AllreduceAlgorithm::ring
                                           : dist::parse_allreduce_algorithm(algos[j], "--algos");
  }
  auto run = [&](size_t j) { dist::allreduce(comm, t, dist::ReduceOp::sum, which[j], options[j]); };
  // One allreduce after a barrier, seconds on this rank.
  auto timed = [&](size_t j) {
    comm.barrier();
    const double t0 = bench::now_ms();
    run(j);
    if (job.sync) job.sync();  // a device's collectives return once queued
    return (bench::now_ms() - t0) * 1e-3;
  };
  fill_zero(t);
  for (int i = 0; i < a.warmup; ++i)
    for (size_t j = 0; j < k; ++j) timed(j);
  int iters = a.iters;
  if (!a.iters_given) {
    // Every rank must run the same count: size it from the slowest rank's time of one more run of
    // the slowest algorithm, so that each algorithm gets about budget_s.
    std::vector<double> probe(k);
    for (size_t j = 0; j < k; ++j) probe[j] = timed(j);
    max_over_ranks(comm, job.device, probe);
    const double slowest = *std::max_element(probe.begin(), probe.end());
    iters = std::clamp(static_cast<int>(a.budget_s / std::max(slowest, 1e-9)), 5, a.iters);
  }
  std::vector<std::vector<double>> times(k, std::vector<double>(static_cast<size_t>(iters)));
  // Each iteration runs the algorithms in a shuffled order (the same on every rank: a generator
  // seeded by the iteration), so that each follows each other one about equally often: what a
  // collective leaves behind (messages still being completed, buffers, caches) otherwise slows its
  // fixed successor, by up to 13% at 1 MiB here. (A rotation of one order is not enough: it
  // changes who goes first, not who follows whom; auto, after rhd in every iteration, timed 3-7%
  // behind native at 8 B-4 KiB while running native itself.)
  std::vector<size_t> order(k);
  for (int i = 0; i < iters; ++i) {
    for (size_t j = 0; j < k; ++j) order[j] = j;
    std::mt19937 shuffle_gen(static_cast<uint32_t>(i));
    std::shuffle(order.begin(), order.end(), shuffle_gen);
    for (const size_t j : order) times[j][static_cast<size_t>(i)] = timed(j);
  }

  std::vector<Row> rows(k);
  for (size_t j = 0; j < k; ++j) {
    max_over_ranks(comm, job.device, times[j]);  // an iteration is done when its slowest rank is
    Row& row = rows[j];
    row.algo = algos[j];
    row.bytes = t.numel() * static_cast<int64_t>(t.element_size());
    row.count = t.numel();
    row.seconds = bench::median(times[j]);
    row.iters = iters;
    Tensor check = empty(t.shape(), {.dtype = t.dtype()});
    fill_check_input(check, comm.rank(), comm.size());
    t.copy_(check);
    const int64_t sent_before = comm.p2p_sent().messages;
    run(j);
    std::vector<double> sent = {static_cast<double>(comm.p2p_sent().messages - sent_before)};
    check.copy_(t);
    max_over_ranks(comm, job.device, sent);
    row.messages = static_cast<int64_t>(sent[0]);
    if (which[j] == dist::AllreduceAlgorithm::automatic)
      row.chosen = dist::allreduce_algorithm_name(
          dist::choose_allreduce(*dist::allreduce_model(comm, job.device), row.bytes));
    const double mine = static_cast<double>(count_wrong(check, comm.size()));
    Tensor w =
        from_vector<double>({mine}, {1}, {.dtype = job.device.is_cpu() ? DType::f64 : DType::f32})
            .to(job.device);
    comm.allreduce(w, dist::ReduceOp::sum);
    row.wrong = static_cast<int64_t>(w.to(Device::cpu()).to(DType::f64).to_vector<double>()[0]);
  }
  fill_zero(t);
  return rows;
}

double algbw_gbs(const Row& r) {
  return static_cast<double>(r.bytes) / r.seconds / 1e9;
}

double busbw_gbs(const Row& r, int n) {
  return algbw_gbs(r) * 2.0 * (n - 1) / n;
}

std::string row_line(const Row& r, int n, DType dtype) {
  char buf[320];
  const std::string algo = r.chosen.empty() ? r.algo : r.algo + ":" + r.chosen;
  std::snprintf(buf, sizeof buf,
                "%12" PRId64 "  %12" PRId64 "  %5s  %13s  %11s  %11s  %11s  %6" PRId64
                "  %6" PRId64,
                r.bytes, r.count, dtype_name(dtype), algo.c_str(), fmt(r.seconds * 1e6, 1).c_str(),
                fmt(algbw_gbs(r), 3).c_str(), fmt(busbw_gbs(r, n), 3).c_str(), r.wrong, r.messages);
  return buf;
}

// The ratio of ring to native busbw at each size (= native time / ring time, which also reads
// at one rank, where busbw is 0), and the sentence on where and why small messages lose.
void print_ratios(const std::vector<Row>& rows, int n, double alpha_s, bool nccl) {
  std::vector<std::vector<std::string>> table;
  std::vector<int64_t> losing;  // the sizes where ring/native < 0.9
  const Row* smallest_ring = nullptr;
  const Row* smallest_native = nullptr;
  for (const Row& ring : rows) {
    if (ring.algo != "ring") continue;
    for (const Row& native : rows) {
      if (native.algo != "native" || native.bytes != ring.bytes) continue;
      const double ratio = native.seconds / ring.seconds;
      table.push_back({human_bytes(ring.bytes), fmt(busbw_gbs(ring, n), 3),
                       fmt(busbw_gbs(native, n), 3), fmt(ratio, 2)});
      if (ratio < 0.9) losing.push_back(ring.bytes);
      if (!smallest_ring) {
        smallest_ring = &ring;
        smallest_native = &native;
      }
    }
  }
  std::cout << "\nring / native (MEASURED; busbw ratio = native time / ring time; >= 1: the ring "
               "is as fast or faster)\n";
  bench::print_table(std::cout, {"size", "ring busbw", "native busbw", "ring/native"}, table, "  ");
  if (n < 2) {
    std::cout << "  One rank: the ring takes no steps and the engine copies nothing, so both time "
                 "only their call overhead; busbw is 0 by definition.\n";
    return;
  }
  if (losing.empty()) {
    std::cout << "  The ring keeps within 0.9x of native at every size measured.\n";
    return;
  }
  const int steps = 2 * (n - 1);
  std::cout << "  The ring is below 0.9x of native at";
  for (size_t i = 0; i < losing.size(); ++i)
    std::cout << (i ? ", " : " ") << human_bytes(losing[i]);
  std::cout << ".\n  Small messages lose because the ring takes 2(n-1) = " << steps
            << " steps one after the other, each an exchange with\n"
               "  its neighbours that pays the per-message latency whatever the size"
            << (nccl
                    ? " (on NCCL each step is a grouped send/recv\n"
                      "  and a reduce kernel, host-issued), while NCCL's own allreduce is one "
                      "kernel that runs every step\n"
                      "  on the device.\n"
                    : " (stoke's send/recv over MPI sends\n"
                      "  a header, then the payload), while MPI's own allreduce of a small message "
                      "takes fewer rounds (e.g.\n"
                      "  recursive doubling: log2(n)) and no header.\n");
  if (smallest_ring && smallest_native) {
    std::cout << "  At " << human_bytes(smallest_ring->bytes) << ": ring "
              << fmt(smallest_ring->seconds * 1e6, 1) << " us = " << steps << " steps x "
              << fmt(smallest_ring->seconds * 1e6 / steps, 1) << " us, native "
              << fmt(smallest_native->seconds * 1e6, 1) << " us";
    if (alpha_s > 0)
      std::cout << "; the fitted latency per step is " << fmt(alpha_s * 1e6, 1) << " us (below)";
    std::cout << ".\n";
  }
}

std::string int_json(int64_t v) {
  return std::to_string(v);
}

}  // namespace

int stoke::bench::run_allreduce_bench(const AllreduceJob& job, const AllreduceArgs& a) {
  dist::Communicator& comm = *job.comm;
  const int n = comm.size(), rank = comm.rank();
  const bool root = rank == 0;
  const std::vector<int64_t> sizes = sizes_of(a);

  if (root) {
    const unsigned cores = std::thread::hardware_concurrency();
    std::cout << kProg << ": " << n << " rank" << (n == 1 ? "" : "s") << " (" << job.engine
              << "), dtype " << dtype_name(a.dtype) << ", sizes " << human_bytes(sizes.front())
              << " ... " << human_bytes(sizes.back()) << " (" << sizes.size() << "), "
              << (a.iters_given ? detail::str_cat(a.iters, " iterations")
                                : detail::str_cat("up to ", a.iters, " iterations (about ",
                                                  a.budget_s, " s, at least 5)"))
              << " per point after " << a.warmup << " warm-up, ring segment "
              << human_bytes(a.segment_bytes) << ", native " << (a.check_args ? "with" : "without")
              << " its argument check"
              << (a.quick ? " (quick smoke run: times are not meaningful)" : "") << "\n";
    if (n == 1 && job.device.is_cpu() && !std::getenv("OMPI_COMM_WORLD_SIZE"))
      std::cout << "  Not started by mpirun: one rank, where the ring is trivial (no steps) and "
                   "busbw is 0. Run it as mpirun -np N "
                << kProg << ".\n";
    const char* yield = std::getenv("OMPI_MCA_mpi_yield_when_idle");
    if (cores > 0 && static_cast<unsigned>(n) > cores && !(yield && std::string(yield) == "1"))
      std::cout << "  warning: " << n << " ranks on " << cores
                << " cores without OMPI_MCA_mpi_yield_when_idle=1: waiting ranks spin on the "
                   "cores the others need\n";
    if (a.engine == "mpi" && (a.dtype == DType::f16 || a.dtype == DType::bf16))
      std::cout << "  note: native reduces f32 copies of " << dtype_name(a.dtype)
                << " (MPI has no half types), moving twice the bytes; the ring moves them at their "
                   "size\n";
  }
  // The tuner's calibration (a collective, cached on the communicator), before any timing.
  // Its largest size: 64 MiB, or the largest size measured if smaller (a --quick run stays quick).
  // Past 16 MiB the engine's own allreduce leaves the caches and slows 2x here: a model that
  // stopped at 16 MiB extended native's faster slope and picked it at 64 and 256 MiB.
  const std::shared_ptr<const dist::AllreduceModel> tuned =
      dist::allreduce_model(comm, job.device,
                            {.large_bytes = std::clamp<int64_t>(a.max_bytes, 64 << 10, 64 << 20),
                             .segment_bytes = a.segment_bytes});
  if (root)
    std::cout << "\nMEASURED calibration (dist/tuner.h), " << dist::describe(*tuned) << "\n"
              << "        size         count   type           algo     time(us)  algbw(GB/s)  "
                 "busbw(GB/s)  #wrong    msgs\n"
              << std::flush;

  std::vector<Row> rows;
  for (int64_t bytes : sizes) {
    Tensor t = empty({bytes / static_cast<int64_t>(dtype_size(a.dtype))},
                     {.dtype = a.dtype, .device = job.device});
    for (const Row& r : measure_size(job, a.algos, t, a)) {
      rows.push_back(r);
      if (root) std::cout << row_line(rows.back(), n, a.dtype) << std::endl;
    }
  }
  if (root)
    std::cout << "(MEASURED: time = median over iterations of the slowest rank; algbw = size / "
                 "time; busbw = algbw * 2(n-1)/n; GB = 1e9 B; #wrong summed over ranks; msgs = "
                 "messages one allreduce sends, most over the ranks; auto:X = the tuner chose X)\n";

  std::vector<bench::AllreducePoint> ring_points;
  for (const Row& r : rows)
    if (r.algo == "ring") ring_points.push_back({r.bytes, r.seconds});
  const bench::RingFit fit = bench::fit_ring(ring_points, n);

  int64_t wrong_total = 0;
  for (const Row& r : rows) wrong_total += r.wrong;
  if (root) {
    const std::string tuner = bench::print_tuner_report(std::cout, rows, *tuned, n);
    print_ratios(rows, n, fit.ok ? fit.alpha_s : 0.0, a.engine == "nccl");
    const std::string model = bench::print_model(
        std::cout, fit, n,
        {.measured_over = a.engine == "nccl" ? "NCCL, stoke's ring over its send/recv"
                                             : "MPI over shared memory, stoke's send/recv"});
    if (wrong_total > 0)
      std::cout << "\n" << kProg << ": " << wrong_total << " wrong elements (see #wrong)\n";
    std::vector<std::string> json_rows;
    for (const Row& r : rows) {
      bench::JsonObject row;
      row.add("algo", r.algo)
          .add("ranks", n)
          .raw("bytes", int_json(r.bytes))
          .raw("count", int_json(r.count))
          .add("time_us", r.seconds * 1e6)
          .add("algbw_gbs", algbw_gbs(r))
          .add("busbw_gbs", busbw_gbs(r, n))
          .raw("wrong", int_json(r.wrong))
          .add("iters", r.iters)
          .raw("messages", int_json(r.messages));
      if (!r.chosen.empty()) row.add("chosen", r.chosen);
      json_rows.push_back(row.str());
    }
    std::cout << "\n"
              << bench::JsonObject()
                     .add("bench", "allreduce")
                     .add("ranks", n)
                     .add("engine", a.engine)
                     .add("dtype", dtype_name(a.dtype))
                     .raw("rows", bench::json_array(json_rows))
                     .raw("model", model)
                     .raw("tuner", tuner)
                     .add("quick", a.quick)
                     .raw("segment_bytes", int_json(a.segment_bytes))
                     .add("native_arg_check", a.check_args)
                     .raw("wrong_total", int_json(wrong_total))
                     .str()
              << std::endl;
  }
  return wrong_total > 0 ? 1 : 0;
}

int main(int argc, char** argv) {
  Args a;
  if (const int rc = parse_args(argc, argv, a); rc >= 0) return rc;
  if (a.engine == "nccl") {
#if defined(STOKE_BENCH_NCCL)
    return stoke::bench::run_allreduce_bench_nccl(a);
#else
    std::cerr << kProg
              << ": --engine nccl: this build has no NCCL (CUDA and NCCL are found at "
                 "configure time)\n";
    return 2;
#endif
  }
#if defined(STOKE_HAS_MPI)
  std::unique_ptr<dist::MpiCommunicator> comm;
  try {
    comm = std::make_unique<dist::MpiCommunicator>(dist::MpiOptions{.check_args = a.check_args});
    return stoke::bench::run_allreduce_bench(
        {comm.get(), Device::cpu(), "MpiCommunicator, cpu tensors", nullptr}, a);
  } catch (const std::exception& e) {
    std::cerr << kProg << ": " << e.what() << std::endl;
    // The other ranks may be waiting in a collective this rank will never join: end the job now
    // rather than at their watchdog's timeout (while the communicator, and so MPI, is alive).
    if (comm) MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
  }
#else
  std::cerr << kProg << ": --engine mpi: this build has no MPI (install libopenmpi-dev)\n";
  return 2;
#endif
}
