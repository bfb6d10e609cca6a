// stoke-bench-ops-cuda: per op and shape, stoke's CUDA kernels next to the vendor libraries.
// Sections (each one table; --only picks some):
//   gemm       cuBLAS f32/tf32/f16/bf16 vs every version of our SGEMM, square n = 512 ... 8192
//   conv       cuDNN f32/tf32/f16/bf16 vs ours (implicit-GEMM forward; im2col + SGEMM + col2im
//              backward data and filter) on the conv layers of ResNet-18/CIFAR and VGG-16, batch
//              128 (bench/ops_cuda_conv.cpp)
//   memory     cudaMemcpy d2d, our binary add, unary relu/exp, casts f32<->f16, reductions (all,
//              rows, columns) at 1 K ... 256 M elements, against a copy of the same traffic
//              (bench/ops_cuda_memory.cpp)
//   pool       our max/avg/global-avg pooling vs cuDNN, forward and backward, ResNet-18/CIFAR
//              activations at batch 128 (bench/ops_cuda_nn.cpp)
//   batchnorm  our batch norm vs cuDNN: training forward, eval forward, backward (same shapes);
//              and batch norm + ReLU fused (forward and backward) vs the unfused chain
//   softmax    our softmax / log-softmax and fused cross-entropy, GB/s (bench/ops_cuda_nn.cpp)
//   optim      multi-tensor SGD/AdamW/unscale over ResNet-18's parameters vs one launch per tensor
//              (bench/ops_cuda_optim.cpp)
//   data       u8 NHWC -> crop + flip + normalize -> f16 NCHW in one kernel vs the unfused
//              normalize f32 + cast chain (bench/ops_cuda_data.cpp)
// Each case: inputs filled with random values, 3 warm-up runs, then the median of N runs timed
// with CUDA events, the L2 cache flushed before each run; TFLOP/s or GB/s, the percentage of the
// device's peak (from its properties: SM count and clock, memory clock and bus width) and of the
// section's reference (the vendor library, or for memory-bound ops a cudaMemcpy moving the same
// bytes). Prints a table per section, then one JSON line for the run. Without a GPU it says so
// and exits 0.
//
//   stoke-bench-ops-cuda [--quick] [--reps N] [--batch N] [--cudnn-benchmark] [--only
//   gemm,conv,...]
//
// --quick: GEMMs 512 and 1024, batch 8, sizes 1 K and 1 M, two softmax shapes (a smoke run).
// --batch: the conv/pool/batch-norm batch (default 128). --cudnn-benchmark: cuDNN times every
// algorithm per shape and keeps the fastest (torch.backends.cudnn.benchmark).
#include "bench/ops_cuda.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "bench/bench_util.h"
#include "cuda/kernels/sgemm.h"
#include "cuda/vendor/cublas_gemm.h"
#include "cuda/vendor/cudnn_conv.h"

namespace stoke::bench::ops_cuda {

void bench_gemm(Bench& b) {
  const cuda::DeviceProperties& p = b.props();
  std::vector<int64_t> sizes = {512, 1024, 2048, 4096, 8192};
  if (b.o.quick) sizes = {512, 1024};
  for (int64_t n : sizes) {
    const double flop = 2.0 * n * n * n;
    const std::string shape = std::to_string(n) + "^3";
    double ref = 0;  // cuBLAS f32: what our SGEMM competes with
    for (auto [dt, tf32, name, peak] :
         {std::tuple{DType::f32, false, "cublas f32", p.peak_fp32_tflops()},
          std::tuple{DType::f32, true, "cublas tf32", p.peak_tensor_tflops() / 2},
          std::tuple{DType::f16, false, "cublas f16", p.peak_tensor_tflops()},
          std::tuple{DType::bf16, false, "cublas bf16", p.peak_tensor_tflops()}}) {
      const size_t bytes = n * n * dtype_size(dt);
      Buffer a(bytes, dt), bb(bytes, dt), c(bytes, dt, Fill::zero);
      const double rate = b.flops("gemm", "matmul", shape, name, flop, peak, ref, [&] {
        cuda::gemm(dt, n, n, n, a.ptr, n, bb.ptr, n, c.ptr, n, {.allow_tf32 = tf32}, nullptr);
      });
      if (ref == 0) ref = rate;
    }
    Buffer a(n * n * 4), bb(n * n * 4), c(n * n * 4, DType::f32, Fill::zero);
    for (cuda::SgemmVersion v : cuda::kSgemmVersions) {
      if (v == cuda::SgemmVersion::naive && n > 2048) continue;  // seconds per run; nothing new
      b.flops("gemm", "matmul", shape, std::string("stoke sgemm ") + cuda::sgemm_version_name(v),
              flop, p.peak_fp32_tflops(), ref, [&] {
                cuda::sgemm(false, false, n, n, n, 1.0f, a.as<float>(), n, bb.as<float>(), n, 0.0f,
                            c.as<float>(), n, nullptr, {.version = v});
              });
    }
  }
}

namespace {

std::string pct_text(double v) {
  if (std::isnan(v)) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", v);
  return buf;
}

// The rows of `group` as a table under a title that says what "vs ref" compares with.
void print_table(const std::vector<Row>& rows, const char* group, const char* title) {
  size_t wop = 2, wshape = 5, wimpl = 4;
  for (const Row& r : rows)
    if (r.group == group) {
      wop = std::max(wop, r.op.size());
      wshape = std::max(wshape, r.shape.size());
      wimpl = std::max(wimpl, r.impl.size());
    }
  if (wop == 2 && wshape == 5) return;  // no rows
  const int a = static_cast<int>(wop), s = static_cast<int>(wshape), m = static_cast<int>(wimpl);
  std::printf("\n== %s: %s\n", group, title);
  std::printf("%-*s  %-*s  %-*s  %10s  %9s %-7s  %7s  %7s  %s\n", a, "op", s, "shape", m, "impl",
              "ms", "rate", "", "%peak", "vs ref", "note");
  for (const Row& r : rows) {
    if (r.group != group) continue;
    std::printf("%-*s  %-*s  %-*s  %10.4f  %9.2f %-7s  %7s  %7s  %s\n", a, r.op.c_str(), s,
                r.shape.c_str(), m, r.impl.c_str(), r.ms, r.rate, r.unit,
                pct_text(r.peak_pct).c_str(), pct_text(r.ref_pct).c_str(), r.note.c_str());
  }
  std::fflush(stdout);
}

void print_json(const Bench& b) {
  const cuda::DeviceProperties& p = b.props();
  std::vector<std::string> rows;
  rows.reserve(b.rows.size());
  for (const Row& r : b.rows)
    rows.push_back(JsonObject()
                       .add("group", r.group)
                       .add("op", r.op)
                       .add("shape", r.shape)
                       .add("impl", r.impl)
                       .add("ms", r.ms)
                       .add("rate", r.rate)
                       .add("unit", r.unit)
                       .add("peak_pct", r.peak_pct)
                       .add("ref_pct", r.ref_pct)
                       .add("note", r.note)
                       .str());
  std::printf("%s\n", JsonObject()
                          .add("bench", "ops_cuda")
                          .add("device", p.name)
                          .add("peak_fp32_tflops", p.peak_fp32_tflops())
                          .add("peak_tensor_tflops", p.peak_tensor_tflops())
                          .add("peak_bandwidth_gbs", p.peak_bandwidth_gbs())
                          .add("quick", b.o.quick)
                          .add("reps", b.o.reps)
                          .add("batch", static_cast<double>(b.o.batch_size()))
                          .add("cudnn_benchmark", b.o.cudnn_benchmark)
                          .raw("rows", json_array(rows))
                          .str()
                          .c_str());
}

}  // namespace
}  // namespace stoke::bench::ops_cuda

int main(int argc, char** argv) {
  using namespace stoke::bench::ops_cuda;
  namespace cuda = stoke::cuda;
  Options o;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      o.quick = true;
    } else if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
      o.reps = std::max(1, std::atoi(argv[++i]));
    } else if (std::strcmp(argv[i], "--cudnn-benchmark") == 0) {
      o.cudnn_benchmark = true;
    } else if (std::strcmp(argv[i], "--batch") == 0 && i + 1 < argc) {
      o.batch = std::max(1, std::atoi(argv[++i]));
    } else if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
      o.only = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: %s [--quick] [--reps N] [--batch N] [--cudnn-benchmark] "
                   "[--only gemm,conv,memory,pool,batchnorm,softmax,optim,data]\n",
                   argv[0]);
      return 2;
    }
  }
  if (!cuda::is_available()) {
    std::printf("stoke-bench-ops-cuda: no CUDA device (%s): skipped\n",
                cuda::device_unavailable_reason().c_str());
    return 0;
  }
  cuda::register_cuda_allocator();
  cuda::set_cudnn_benchmark(o.cudnn_benchmark);
  const cuda::DeviceProperties& p = device_properties(0);
  std::printf("%s: peak %.1f TFLOP/s f32, %.1f TFLOP/s f16 tensor, %.0f GB/s%s\n",
              p.summary().c_str(), p.peak_fp32_tflops(), p.peak_tensor_tflops(),
              p.peak_bandwidth_gbs(), o.cudnn_benchmark ? "; cuDNN benchmark mode" : "");
  Bench b(o);
  // Each section prints its table as soon as it is done (a long run shows progress).
  if (o.wants("gemm")) {
    bench_gemm(b);
    print_table(b.rows, "gemm", "TFLOP/s; vs ref = % of cuBLAS f32");
  }
  if (o.wants("conv")) {
    bench_conv(b);
    print_table(b.rows, "conv",
                "TFLOP/s (2 N K OH OW C R S for every direction); vs ref = % of cuDNN f32 of the "
                "same direction; note = cuDNN's algorithm");
  }
  if (o.wants("memory")) {
    bench_memory(b);
    print_table(b.rows, "memory",
                "GB/s of minimal DRAM traffic; vs ref = % of a cudaMemcpy d2d moving the same "
                "bytes");
  }
  if (o.wants("pool")) {
    bench_pool(b);
    print_table(b.rows, "pool", "GB/s (x + y forward, dy + dx backward); vs ref = % of cuDNN");
  }
  if (o.wants("batchnorm")) {
    bench_batch_norm(b);
    print_table(b.rows, "batchnorm",
                "GB/s (x + y forward, x + dy + dx backward); vs ref = % of cuDNN");
  }
  if (o.wants("softmax")) {
    bench_softmax(b);
    print_table(b.rows, "softmax",
                "GB/s of minimal traffic; vs ref = % of a cudaMemcpy d2d moving the same bytes");
  }
  if (o.wants("optim")) {
    bench_optim(b);
    print_table(b.rows, "optim",
                "GB/s of minimal traffic over ResNet-18's parameters; vs ref = % of the same "
                "kernel launched once per tensor");
  }
  if (o.wants("data")) {
    bench_data(b);
    print_table(b.rows, "data",
                "GB/s of the fused op's minimal traffic (u8 in, f16 out); vs ref = % of the fused "
                "kernel");
  }
  std::printf("\n");
  print_json(b);
  return 0;
}
