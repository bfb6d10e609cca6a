// What the parts of stoke-bench-ops-cuda share (bench/ops_cuda*.cpp): options, device buffers
// filled with random values, the CUDA-event timer with its L2 flush, and the rows every section
// appends (printed as one table per section, then one JSON line for the run).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "bench/cuda_bench_util.h"
#include "core/dtype.h"
#include "cuda/runtime/caching_allocator.h"
#include "cuda/runtime/device.h"

namespace stoke::bench::ops_cuda {

using cuda::caching_allocator;
using cuda::device_properties;

struct Options {
  bool quick = false;
  int reps = 20;
  bool cudnn_benchmark = false;  // cuDNN times every algorithm per shape (cudnnFind*Ex)
  std::string only;              // comma-separated sections to run; empty: all
  int64_t batch = 0;             // conv/pool/batchnorm batch; 0: 128 (8 with --quick)

  int64_t batch_size() const { return batch > 0 ? batch : quick ? 8 : 128; }

  bool wants(const std::string& section) const {
    if (only.empty()) return true;
    return ("," + only + ",").find("," + section + ",") != std::string::npos;
  }
};

// What a buffer holds before the benchmark: zeros, uniform values in [-1, 1) (never memset 0:
// zeros flatter tensor cores and data-dependent kernels), or uniform values in [0.5, 1.5) (for
// variances).
enum class Fill { zero, uniform, positive };

// Fills `bytes` of device memory with `fill` values of `dtype` (f32, f16, bf16; other dtypes get
// zeros): a 4 MiB pattern generated once on the host (fixed seed) is uploaded, then the filled
// prefix is doubled by device-to-device copies.
inline void fill_device(void* ptr, size_t bytes, DType dtype, Fill fill) {
  if (bytes == 0) return;
  const bool floating = dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16;
  if (fill == Fill::zero || !floating) {
    STOKE_CUDA_CHECK(cudaMemset(ptr, 0, bytes));
    return;
  }
  static std::map<std::pair<int, int>, std::vector<unsigned char>> patterns;
  std::vector<unsigned char>& pattern = patterns[{static_cast<int>(dtype), static_cast<int>(fill)}];
  if (pattern.empty()) {
    std::vector<float> values((size_t{4} << 20) / dtype_size(dtype));
    std::mt19937 rng(1234);
    std::uniform_real_distribution<float> dist(fill == Fill::positive ? 0.5f : -1.f,
                                               fill == Fill::positive ? 1.5f : 1.f);
    for (float& v : values) v = dist(rng);
    pattern = encode(dtype, values);
  }
  auto* p = static_cast<unsigned char*>(ptr);
  size_t filled = std::min(bytes, pattern.size());
  STOKE_CUDA_CHECK(cudaMemcpy(p, pattern.data(), filled, cudaMemcpyHostToDevice));
  while (filled < bytes) {
    const size_t n = std::min(filled, bytes - filled);
    STOKE_CUDA_CHECK(cudaMemcpy(p + filled, p, n, cudaMemcpyDeviceToDevice));
    filled += n;
  }
}

// Device scratch from the caching allocator, filled on creation, freed with the object.
struct Buffer {
  void* ptr = nullptr;
  size_t bytes = 0;
  explicit Buffer(size_t nbytes, DType dtype = DType::f32, Fill fill = Fill::uniform)
      : ptr(caching_allocator().allocate(std::max<size_t>(nbytes, 1), 0, nullptr)), bytes(nbytes) {
    fill_device(ptr, bytes, dtype, fill);
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { caching_allocator().free(ptr); }
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr);
  }
};

// Times `fn` on the legacy stream: 3 warm-up runs, then the median of reps runs, each preceded
// by a write over a buffer twice the L2 size so that no run starts with the previous one's data
// in the cache (bench/cuda_bench_util.h's median_event_ms).
class Timer {
 public:
  explicit Timer(int reps) : reps_(reps) {}
  double median_ms(const std::function<void()>& fn) const { return median_event_ms(fn, reps_, 3); }

 private:
  int reps_;
};

// One measurement. rate is TFLOP/s or GB/s (unit); peak_pct is the percentage of the device's
// peak for that unit and precision; ref_pct the percentage of the section's reference
// implementation's rate on the same case (NaN: no reference); note is free text (cuDNN's
// algorithm, the code path).
struct Row {
  std::string group, op, shape, impl;
  double ms = 0, rate = 0, peak_pct = 0, ref_pct = NAN;
  const char* unit = "TFLOP/s";
  std::string note;
};

// The state the sections share: options, the timer, the rows.
class Bench {
 public:
  explicit Bench(const Options& options) : o(options), timer(options.reps) {}

  Options o;
  Timer timer;
  std::vector<Row> rows;

  const cuda::DeviceProperties& props() const { return device_properties(0); }

  // Times fn, appends a TFLOP/s row (against peak_tflops, and ref_tflops when > 0) and returns
  // the rate.
  double flops(const std::string& group, const std::string& op, const std::string& shape,
               const std::string& impl, double flop, double peak_tflops, double ref_tflops,
               const std::function<void()>& fn) {
    const double ms = timer.median_ms(fn);
    const double rate = flop / (ms * 1e-3) / 1e12;
    rows.push_back({group, op, shape, impl, ms, rate, pct(rate, peak_tflops), pct(rate, ref_tflops),
                    "TFLOP/s", ""});
    return rate;
  }

  // Times fn, appends a GB/s row for `bytes` of DRAM traffic (reads + writes, the op's minimum)
  // against the device's peak bandwidth and ref_gbs when > 0; returns the rate.
  double bytes(const std::string& group, const std::string& op, const std::string& shape,
               const std::string& impl, double traffic, double ref_gbs,
               const std::function<void()>& fn) {
    const double ms = timer.median_ms(fn);
    const double rate = traffic / (ms * 1e-3) / 1e9;
    rows.push_back({group, op, shape, impl, ms, rate, pct(rate, props().peak_bandwidth_gbs()),
                    pct(rate, ref_gbs), "GB/s", ""});
    return rate;
  }

  // GB/s of a device-to-device cudaMemcpyAsync with the same traffic (it copies traffic / 2
  // bytes: a read and a write each), the practical roofline of a memory-bound op; cached per size.
  double memcpy_gbs(double traffic) {
    const size_t half = std::max<size_t>(static_cast<size_t>(traffic / 2), 256);
    auto it = memcpy_cache_.find(half);
    if (it != memcpy_cache_.end()) return it->second;
    Buffer a(half, DType::u8, Fill::zero), b(half, DType::u8, Fill::zero);
    const double ms = timer.median_ms([&] {
      STOKE_CUDA_CHECK(cudaMemcpyAsync(b.ptr, a.ptr, half, cudaMemcpyDeviceToDevice, nullptr));
    });
    const double rate = 2.0 * half / (ms * 1e-3) / 1e9;
    memcpy_cache_[half] = rate;
    return rate;
  }

  static double pct(double rate, double ref) { return ref > 0 ? 100 * rate / ref : NAN; }

 private:
  std::map<size_t, double> memcpy_cache_;
};

// The sections (bench/ops_cuda_*.cpp). Each appends rows with its group name.
void bench_gemm(Bench& b);        // "gemm":      cuBLAS vs our SGEMM versions
void bench_conv(Bench& b);        // "conv":      cuDNN vs ours, forward, backward data and filter
void bench_memory(Bench& b);      // "memory":    copy, elementwise, cast, reductions vs cudaMemcpy
void bench_pool(Bench& b);        // "pool":      ours vs cuDNN at ResNet-18/CIFAR activations
void bench_batch_norm(Bench& b);  // "batchnorm": ours vs cuDNN, the same shapes
void bench_softmax(Bench& b);     // "softmax":   softmax and cross-entropy (ours)
void bench_optim(Bench& b);       // "optim":     multi-tensor optimizer kernels vs per tensor
void bench_data(Bench& b);        // "data":      fused crop+flip+normalize vs the unfused chain

}  // namespace stoke::bench::ops_cuda
