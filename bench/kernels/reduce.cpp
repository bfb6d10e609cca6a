// stoke-kernel-reduce: the sandbox of cuda/kernels/reduce.cu, reductions of a contiguous
// [outer, n, inner] tensor over n (sum, mean, max with its indices, argmin) in f32 and bf16.
//
//   stoke-kernel-reduce [--size 67108864] [--reps 20] [--warmup 3] [--validate 1]
//
// The launcher has three kernels and picks one from the shape: rows (inner == 1) of n <= 1024 take
// one warp per row (4 rows a 128-thread block), longer rows one 256-thread block per row, columns
// (inner > 1) a 32-column tile per block with 8 thread rows splitting n. The sweep is over shapes
// that select each kernel, including the extremes (a single row: one block for the whole tensor;
// a few wide columns: few blocks), so the table shows where each path stands.
// 1. Validation: every op x dtype x path on an odd modest shape against a CPU reference in double
//    (sum/mean within 1e-5 of sum |x| plus the output dtype's rounding; max/argmin exact, the
//    first extremum winning ties). A case that fails is not timed.
// 2. Timing: about --size elements per shape, median of --reps CUDA-event timings after --warmup,
//    the L2 flushed before each; GB/s (input read once + outputs written), the percentage of a
//    cudaMemcpy d2d with the same traffic and of the device's peak bandwidth. A table, then one
//    JSON line.
// Without a GPU (no driver, or no device) it prints "stoke-kernel-reduce: no CUDA device (why):
// skipped" and exits 0.
#include <cmath>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "bench/kernels/sandbox.h"
#include "cuda/kernels/reduce.h"
#include "cuda/runtime/device.h"

namespace {

using namespace stoke;
namespace sb = bench::sandbox;
using cuda::ReduceOp;

const char* kUsage =
    "usage: stoke-kernel-reduce [--size N] [--reps R] [--warmup W] [--validate 0|1]";

// A path of the launcher: the timed shape is built from the total size, the validation shape is
// small and odd but selects the same kernel.
struct Path {
  const char* name;
  int64_t n, inner;    // timed: outer = size / (n * inner)
  int64_t vo, vn, vi;  // validation shape
  bool n_from_size;    // timed n = size / (outer * inner) with outer = this->n
};

const Path kPaths[] = {
    {"all (1 x N)", 1, 1, 1, 100003, 1, true},
    {"rows warp (x 128)", 128, 1, 37, 100, 1, false},
    {"rows warp (x 1024)", 1024, 1, 13, 1024, 1, false},
    {"rows block (x 8192)", 8192, 1, 5, 5003, 1, false},
    {"rows block (64 x N/64)", 64, 1, 3, 20011, 1, true},
    {"cols (N/256 x 256, dim 0)", 1, 256, 1, 999, 67, true},
    {"cols (N/4096 x 4096, dim 0)", 1, 4096, 1, 301, 1029, true},
    {"cols batched (64 x n x 64)", 64, 64, 7, 129, 45, true},
};

// [outer, n, inner] of the timed shape for a total of about `size` elements.
void timed_shape(const Path& p, int64_t size, int64_t& outer, int64_t& n, int64_t& inner) {
  inner = p.inner;
  if (p.n_from_size) {
    outer = p.n;
    n = std::max<int64_t>(1, size / (outer * inner));
  } else {
    n = p.n;
    outer = std::max<int64_t>(1, size / (n * inner));
  }
}

struct Op {
  const char* name;
  ReduceOp op;
  bool values, indices;  // which outputs are written
};
const Op kOps[] = {{"sum", ReduceOp::sum, true, false},
                   {"mean", ReduceOp::mean, true, false},
                   {"max+argmax", ReduceOp::max, true, true},
                   {"argmin", ReduceOp::min, false, true}};

// The worst normalized error of one op/dtype on a path's validation shape.
double validate(const Op& op, DType d, const Path& p) {
  const int64_t outer = p.vo, n = p.vn, inner = p.vi, total = outer * n * inner;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> x(total);
  for (float& v : x) v = sb::round_to(d, dist(rng));
  sb::Bytes dx(total * dtype_size(d)), dout(outer * inner * dtype_size(d)), didx(outer * inner * 8);
  dx.upload(sb::encode(d, x));
  sb::Bytes ws(cuda::reduce_workspace_bytes(outer, n, inner));  // the two-stage path's partials
  cuda::reduce(op.op, d, dx.at(0), op.values ? dout.at(0) : nullptr,
               op.indices ? reinterpret_cast<int64_t*>(didx.at(0)) : nullptr, outer, n, inner,
               ws.at(0), nullptr);
  STOKE_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> got = sb::decode(d, dout.download(outer * inner * dtype_size(d)));
  std::vector<int64_t> got_idx(outer * inner);
  const auto raw = didx.download(outer * inner * 8);
  std::memcpy(got_idx.data(), raw.data(), raw.size());
  double worst = 0;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      double sum = 0, abs_sum = 0, ext = op.op == ReduceOp::min ? INFINITY : -INFINITY;
      int64_t at = -1;
      for (int64_t k = 0; k < n; ++k) {
        const double v = x[(o * n + k) * inner + i];
        sum += v;
        abs_sum += std::abs(v);
        if (op.op == ReduceOp::max ? v > ext : v < ext) {
          ext = v;
          at = k;
        }
      }
      const int64_t j = o * inner + i;
      double e = 0;
      if (op.op == ReduceOp::sum || op.op == ReduceOp::mean) {
        const double scale = op.op == ReduceOp::mean ? 1.0 / double(n) : 1.0;
        const double want = sb::round_to(d, float(sum * scale));
        const double rtol = d == DType::f32 ? 0 : d == DType::f16 ? 1e-3 : 8e-3;
        e = std::abs(got[j] - want) / (1e-5 * abs_sum * scale + rtol * std::abs(want) + 1e-30);
      } else {
        if (op.values && got[j] != float(ext)) e = INFINITY;
        if (op.indices && got_idx[j] != at) e = INFINITY;
      }
      if (!(e <= worst)) worst = std::isnan(e) ? INFINITY : e;
    }
  return worst;
}

}  // namespace

int main(int argc, char** argv) {
  int size = 1 << 26, reps = 20, warmup = 3, do_validate = 1;
  if (!sb::parse_int_flags(argc, argv, {"size", "reps", "warmup", "validate"},
                           {&size, &reps, &warmup, &do_validate}, kUsage))
    return 2;
  std::string device;
  if (sb::skip_without_device("stoke-kernel-reduce", device)) return 0;
  const double peak = cuda::device_properties(0).peak_bandwidth_gbs();
  std::printf(
      "stoke-kernel-reduce on %s (peak %.0f GB/s): time about %d elements per shape, median of "
      "%d after %d warm-up, L2 flushed\n",
      device.c_str(), peak, size, reps, warmup);

  const DType kDtypes[] = {DType::f32, DType::bf16};
  struct Config {
    const Path* path;
    const Op* op;
    DType dtype;
    double error = 0;
  };
  std::vector<Config> configs;
  for (const Path& p : kPaths)
    for (DType d : kDtypes)
      for (const Op& op : kOps) configs.push_back({&p, &op, d});
  int failed = 0;
  if (do_validate)
    for (Config& c : configs) {
      c.error = validate(*c.op, c.dtype, *c.path);
      if (!(c.error <= 1)) {
        ++failed;
        std::printf("VALIDATION FAILED: %s %s %s (worst error %.3g x tolerance)\n", c.path->name,
                    c.op->name, dtype_name(c.dtype), c.error);
      }
    }

  // Random inputs in both dtypes; outputs sized for the largest case (outer * inner <= size).
  const int64_t total = size;
  sb::Bytes x32(total * 4), x16(total * 2), out(total * 4), idx(total * 8);
  {
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> dist(-1.f, 1.f);
    std::vector<float> host(total);
    for (float& v : host) v = dist(rng);
    x32.upload(sb::encode(DType::f32, host));
    x16.upload(sb::encode(DType::bf16, host));
  }
  // The memcpy roofline: a copy of half the input (read + write = the input's bytes).
  sb::BandwidthReport report({"path", "op", "dtype", "shape"}, peak);
  report.add_copy_reference({"cudaMemcpy d2d", "copy", "f32", std::to_string(total / 2)},
                            sb::copy_ms(out.at(0), x32.at(0), total * 2, reps, warmup),
                            4.0 * total);
  for (const Config& c : configs) {
    int64_t outer, n, inner;
    timed_shape(*c.path, total, outer, n, inner);
    const std::string shape =
        std::to_string(outer) + "x" + std::to_string(n) + "x" + std::to_string(inner);
    const size_t e = dtype_size(c.dtype);
    const double bytes = double(outer * n * inner) * double(e) +
                         double(outer * inner) * ((c.op->values ? e : 0) + (c.op->indices ? 8 : 0));
    if (do_validate && !(c.error <= 1)) {
      report.add({c.path->name, c.op->name, dtype_name(c.dtype), shape}, "FAIL", NAN, bytes);
      continue;
    }
    const void* x = (c.dtype == DType::f32 ? x32 : x16).at(0);
    sb::Bytes ws(cuda::reduce_workspace_bytes(outer, n, inner));
    const double ms = sb::median_event_ms(
        [&] {
          cuda::reduce(c.op->op, c.dtype, x, c.op->values ? out.at(0) : nullptr,
                       c.op->indices ? reinterpret_cast<int64_t*>(idx.at(0)) : nullptr, outer, n,
                       inner, ws.at(0), nullptr);
        },
        reps, warmup);
    report.add({c.path->name, c.op->name, dtype_name(c.dtype), shape}, do_validate ? "ok" : "-", ms,
               bytes);
  }
  report.print("stoke-kernel-reduce", device, size, reps, failed);
  return failed ? 1 : 0;
}
