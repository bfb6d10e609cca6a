// stoke-kernel-elementwise: the sandbox of cuda/kernels/elementwise.cu and creation.cu, the
// memory-bound maps: binary add/mul, unary relu/exp/sigmoid/gelu, relu's backward and the casts
// between f32, f16 and bf16.
//
//   stoke-kernel-elementwise [--size 67108864] [--reps 20] [--warmup 3] [--validate 1]
//
// The launchers choose their code path themselves: 128-bit vectorized loads and stores when every
// pointer is 16-byte aligned, a scalar grid-stride loop otherwise. The sweep runs both paths (the
// "aligned" and "offset" versions: every pointer moved by one element) in every dtype.
// 1. Validation: every op x dtype x path at an odd size (100003 elements, so that the vector
//    tails run) against a CPU reference computed here in f32 from the same dtype-rounded inputs,
//    the result rounded to the dtype; tolerance 2 ulps of the dtype. A case that fails is not
//    timed.
// 2. Timing: --size elements, median of --reps CUDA-event timings after --warmup, the L2 flushed
//    before each; GB/s of the minimal traffic, the percentage of a cudaMemcpy d2d of the same
//    size (the practical roofline) and of the device's peak bandwidth. A table, then one JSON line.
// Without a GPU (no driver, or no device) it prints "stoke-kernel-elementwise: no CUDA device
// (why): skipped" and exits 0.
#include <cmath>
#include <cstring>
#include <functional>
#include <iostream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "bench/kernels/sandbox.h"
#include "core/dtype.h"
#include "cuda/kernels/creation.h"
#include "cuda/kernels/elementwise.h"
#include "cuda/runtime/device.h"

namespace {

using namespace stoke;
namespace sb = bench::sandbox;

const char* kUsage =
    "usage: stoke-kernel-elementwise [--size N] [--reps R] [--warmup W] [--validate 0|1]";

using sb::Bytes, sb::decode, sb::encode, sb::round_to;

// One case: a kernel over n elements of `in` dtype (1 or 2 operands) into `out` dtype.
struct Case {
  std::string name;
  DType in, out;
  int operands;                          // inputs read (1 or 2)
  std::function<float(float, float)> f;  // CPU reference on dtype-rounded inputs
  std::function<void(const void*, const void*, void*, int64_t)> run;
};

std::vector<Case> cases() {
  using cuda::BinaryOp, cuda::UnaryOp, cuda::UnaryBackwardOp;
  std::vector<Case> all;
  for (DType d : {DType::f32, DType::f16, DType::bf16}) {
    const std::string t = std::string(" ") + dtype_name(d);
    auto binary = [&](const char* name, BinaryOp op, float (*f)(float, float)) {
      all.push_back(
          {name + t, d, d, 2, f, [d, op](const void* a, const void* b, void* o, int64_t n) {
             cuda::binary(op, d, a, b, o, n, nullptr);
           }});
    };
    auto unary = [&](const char* name, UnaryOp op, float (*f)(float, float)) {
      all.push_back({name + t, d, d, 1, f, [d, op](const void* a, const void*, void* o, int64_t n) {
                       cuda::unary(op, d, a, o, n, nullptr);
                     }});
    };
    binary("add", BinaryOp::add, [](float a, float b) { return a + b; });
    binary("mul", BinaryOp::mul, [](float a, float b) { return a * b; });
    unary("relu", UnaryOp::relu, [](float a, float) { return a < 0.f ? 0.f : a; });
    // The transcendental references in double, rounded once.
    unary("exp", UnaryOp::exp, [](float a, float) { return float(std::exp(double(a))); });
    unary("sigmoid", UnaryOp::sigmoid,
          [](float a, float) { return float(1 / (1 + std::exp(-double(a)))); });
    unary("gelu", UnaryOp::gelu, [](float a, float) {
      return float(0.5 * a * std::erfc(-double(a) * 0.70710678118654752));
    });
    // relu backward: out = saved > 0 ? grad : 0 (operand a is grad, b the forward's output).
    all.push_back({"relu bwd" + t, d, d, 2, [](float g, float v) { return v > 0.f ? g : 0.f; },
                   [d](const void* g, const void* v, void* o, int64_t n) {
                     cuda::unary_backward(UnaryBackwardOp::relu, d, g, v, o, n, nullptr);
                   }});
  }
  for (auto [from, to] : {std::pair{DType::f32, DType::f16}, std::pair{DType::f16, DType::f32},
                          std::pair{DType::f32, DType::bf16}, std::pair{DType::bf16, DType::f32}}) {
    all.push_back({std::string("cast ") + dtype_name(from) + "->" + dtype_name(to), from, to, 1,
                   [](float a, float) { return a; },
                   [from, to](const void* a, const void*, void* o, int64_t n) {
                     cuda::cast(from, a, to, o, n, nullptr);
                   }});
  }
  return all;
}

// Minimal DRAM traffic of one run over n elements.
double traffic(const Case& c, int64_t n) {
  return double(n) * double(c.operands * dtype_size(c.in) + dtype_size(c.out));
}

// The worst normalized error of one case on one path at an odd size.
double validate(const Case& c, bool offset) {
  const int64_t n = 100003;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-3.f, 3.f);
  std::vector<float> a(n), b(n), want(n);
  for (int64_t i = 0; i < n; ++i) {
    a[i] = round_to(c.in, dist(rng));
    b[i] = round_to(c.in, dist(rng));
    want[i] = round_to(c.out, c.f(a[i], b[i]));
  }
  const size_t off_in = offset ? dtype_size(c.in) : 0, off_out = offset ? dtype_size(c.out) : 0;
  Bytes da(n * dtype_size(c.in)), db(n * dtype_size(c.in)), dout(n * dtype_size(c.out));
  da.upload(encode(c.in, a), off_in);
  db.upload(encode(c.in, b), off_in);
  c.run(da.at(off_in), db.at(off_in), dout.at(off_out), n);
  STOKE_CUDA_CHECK(cudaDeviceSynchronize());
  const auto got = dout.download(n * dtype_size(c.out), off_out);
  // 2 ulps of the output dtype (f32: a few ulps of expf/erff against the C library).
  const double rtol = c.out == DType::f32 ? 1e-5 : c.out == DType::f16 ? 2e-3 : 1.6e-2;
  return sb::worst_error(decode(c.out, got), want, rtol, 1e-6);
}

}  // namespace

int main(int argc, char** argv) {
  int size = 1 << 26, reps = 20, warmup = 3, do_validate = 1;
  if (!sb::parse_int_flags(argc, argv, {"size", "reps", "warmup", "validate"},
                           {&size, &reps, &warmup, &do_validate}, kUsage))
    return 2;
  std::string device;
  if (sb::skip_without_device("stoke-kernel-elementwise", device)) return 0;
  const double peak = cuda::device_properties(0).peak_bandwidth_gbs();
  std::printf(
      "stoke-kernel-elementwise on %s (peak %.0f GB/s): validate 100003 elements, time %d "
      "elements, median of %d after %d warm-up, L2 flushed\n",
      device.c_str(), peak, size, reps, warmup);

  const std::vector<Case> all = cases();
  int failed = 0;
  std::vector<double> errors(2 * all.size(), 0.0);
  if (do_validate)
    for (size_t i = 0; i < errors.size(); ++i) {
      errors[i] = validate(all[i / 2], i % 2 == 1);
      if (!(errors[i] <= 1)) {
        ++failed;
        std::printf("VALIDATION FAILED: %s %s (worst error %.3g x tolerance)\n",
                    all[i / 2].name.c_str(), i % 2 ? "offset" : "aligned", errors[i]);
      }
    }

  // Random operands, f32 bytes enough for every dtype; the inputs stay as uploaded.
  const int64_t n = size;
  Bytes a(n * 4), b(n * 4), out(n * 4);
  {
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> dist(-1.f, 1.f);
    std::vector<float> host(n);
    for (float& v : host) v = dist(rng);
    a.upload(encode(DType::f32, host));
    for (float& v : host) v = dist(rng);
    b.upload(encode(DType::f32, host));
  }
  // Half views of random f32 bits would hold NaNs and infinities: f16 and bf16 operands get their
  // own values.
  Bytes ah(n * 2), bh(n * 2), ab(n * 2), bb(n * 2);
  {
    std::vector<float> host(n);
    std::mt19937 rng(2);
    std::uniform_real_distribution<float> dist(-1.f, 1.f);
    for (float& v : host) v = dist(rng);
    for (auto [d, x, y] : {std::tuple{DType::f16, &ah, &bh}, std::tuple{DType::bf16, &ab, &bb}}) {
      const auto e = encode(d, host);
      x->upload(e);
      y->upload(e);
    }
  }
  sb::BandwidthReport report({"case", "path"}, peak);
  report.add_copy_reference({"cudaMemcpy d2d f32", "-"},
                            sb::copy_ms(out.at(0), a.at(0), n * 4, reps, warmup), 8.0 * n);
  for (size_t i = 0; i < errors.size(); ++i) {
    const Case& c = all[i / 2];
    const bool offset = i % 2 == 1;
    const std::string path = offset ? "offset" : "aligned";
    if (do_validate && !(errors[i] <= 1)) {
      report.add({c.name, path}, "FAIL", NAN, traffic(c, n));
      continue;
    }
    const size_t oi = offset ? dtype_size(c.in) : 0, oo = offset ? dtype_size(c.out) : 0;
    const Bytes& first = c.in == DType::f16 ? ah : c.in == DType::bf16 ? ab : a;
    const Bytes& second = c.in == DType::f16 ? bh : c.in == DType::bf16 ? bb : b;
    const void* pa = first.at(oi);
    const void* pb = second.at(oi);
    const int64_t m = offset ? n - 1 : n;
    const double ms = sb::median_event_ms([&] { c.run(pa, pb, out.at(oo), m); }, reps, warmup);
    report.add({c.name, path}, do_validate ? "ok" : "-", ms, traffic(c, m));
  }
  report.print("stoke-kernel-elementwise", device, size, reps, failed);
  return failed ? 1 : 0;
}
