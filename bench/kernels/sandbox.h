// Helpers shared by the kernel sandboxes (bench/kernels/*.cpp): the no-GPU check, device buffers,
// CUDA-event timing (median of N after a warm-up, L2 flushed before each run) and the validation
// against the CPU reference. Each sandbox validates every version of its kernel before timing any
// of them.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "bench/cuda_bench_util.h"
#include "core/dtype.h"
#include "core/half.h"
#include "cuda/compat.h"
#include "cuda/runtime/device.h"

namespace stoke::bench::sandbox {

// The shared CUDA benchmark helpers (bench/cuda_bench_util.h), as sb:: in the sandboxes.
using bench::decode, bench::encode, bench::flush_l2, bench::median_event_ms, bench::round_to;

// The first device's name, or "" when there is no usable device (no driver, no device: never a
// failure).
inline std::string device_name() {
  if (!cuda::is_available()) return "";
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky error for anyone after us
    return "";
  }
  return prop.name;
}

// Every sandbox's start without a GPU: prints "PROGRAM: no CUDA device (why): skipped", the same
// line as stoke-gpu-selftest's, and returns true (the caller exits 0); with a GPU, sets device to
// its name and returns false.
inline bool skip_without_device(const char* program, std::string& device) {
  device = device_name();
  if (!device.empty()) return false;
  const std::string why = cuda::device_unavailable_reason();
  std::printf("%s: no CUDA device (%s): skipped\n", program,
              why.empty() ? "cudaGetDeviceProperties failed" : why.c_str());
  return true;
}

// A device buffer of n floats (freed on scope exit).
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n) : n_(n) {
    STOKE_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&p_), std::max<size_t>(n, 1) * 4));
  }
  ~DeviceBuffer() { cudaFree(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  float* get() const { return p_; }
  void upload(const float* host) {
    STOKE_CUDA_CHECK(cudaMemcpy(p_, host, n_ * 4, cudaMemcpyHostToDevice));
  }
  std::vector<float> download() const {
    std::vector<float> out(n_);
    STOKE_CUDA_CHECK(cudaMemcpy(out.data(), p_, n_ * 4, cudaMemcpyDeviceToHost));
    return out;
  }

 private:
  float* p_ = nullptr;
  size_t n_;
};

// Untyped device memory of `bytes` plus 16 spare bytes (room to misalign by one element).
struct Bytes {
  DeviceBuffer buf;
  explicit Bytes(size_t bytes) : buf((bytes + 16 + 3) / 4) {}
  unsigned char* at(size_t offset) const {
    return reinterpret_cast<unsigned char*>(buf.get()) + offset;
  }
  void upload(const std::vector<unsigned char>& host, size_t offset = 0) {
    STOKE_CUDA_CHECK(cudaMemcpy(at(offset), host.data(), host.size(), cudaMemcpyHostToDevice));
  }
  std::vector<unsigned char> download(size_t bytes, size_t offset = 0) const {
    std::vector<unsigned char> host(bytes);
    STOKE_CUDA_CHECK(cudaMemcpy(host.data(), at(offset), bytes, cudaMemcpyDeviceToHost));
    return host;
  }
};

// Median milliseconds of a cudaMemcpyAsync d2d of `bytes` (2 * bytes of traffic: a read and a
// write each), the practical roofline of a memory-bound kernel.
inline double copy_ms(void* dst, const void* src, size_t bytes, int reps, int warmup) {
  return median_event_ms(
      [&] {
        STOKE_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, nullptr));
      },
      reps, warmup);
}

// The table and the JSON line of a memory-bound sandbox: per row the key columns, "valid", ms,
// GB/s and its percentage of the reference copy's GB/s and of the device's peak bandwidth.
class BandwidthReport {
 public:
  // keys: the columns that name a row (also their JSON keys); peak_gbs <= 0: unknown.
  BandwidthReport(std::vector<std::string> keys, double peak_gbs)
      : keys_(keys), peak_gbs_(peak_gbs), table_(columns(std::move(keys))) {}

  // The first row: the d2d copy (copy_ms) that moved `bytes` in `ms`, which the "% copy" column
  // of every row compares with.
  void add_copy_reference(std::vector<std::string> key_values, double ms, double bytes) {
    copy_gbs_ = bytes / (ms * 1e-3) / 1e9;
    add(std::move(key_values), "ref", ms, bytes);
  }

  // One row: `bytes` of DRAM traffic moved in `ms` (NaN: not timed).
  void add(std::vector<std::string> key_values, const std::string& valid, double ms, double bytes) {
    const double gbs = bytes / (ms * 1e-3) / 1e9;
    JsonObject json;
    for (size_t i = 0; i < keys_.size(); ++i) json.add(keys_[i], key_values[i]);
    rows_.push_back(json.add("valid", valid)
                        .add("ms", ms)
                        .add("gbs", gbs)
                        .add("copy_pct", 100 * gbs / copy_gbs_)
                        .str());
    key_values.insert(key_values.end(),
                      {valid, fmt(ms, 4), fmt(gbs, 1), fmt(100 * gbs / copy_gbs_, 1),
                       fmt(peak_gbs_ > 0 ? 100 * gbs / peak_gbs_ : NAN, 1)});
    table_.add(std::move(key_values));
  }

  // The table, then one JSON line with the run's settings and every row.
  void print(const char* bench, const std::string& device, int size, int reps, int failed) const {
    table_.print(std::cout);
    std::cout << JsonObject()
                     .add("bench", bench)
                     .add("device", device)
                     .add("size", size)
                     .add("reps", reps)
                     .add("peak_bandwidth_gbs", peak_gbs_)
                     .add("copy_gbs", copy_gbs_)
                     .add("validation_failures", failed)
                     .raw("rows", json_array(rows_))
                     .str()
              << std::endl;
  }

 private:
  static std::vector<std::string> columns(std::vector<std::string> keys) {
    keys.insert(keys.end(), {"valid", "ms", "GB/s", "% copy", "% peak"});
    return keys;
  }

  std::vector<std::string> keys_;
  double peak_gbs_, copy_gbs_ = NAN;
  Table table_;
  std::vector<std::string> rows_;
};

// The largest |got - want| / (atol + rtol * |want|) over all elements (<= 1: within tolerance;
// NaN counts as a failure).
inline double worst_error(const std::vector<float>& got, const std::vector<float>& want,
                          double rtol, double atol) {
  double worst = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    const double e = std::abs(double(got[i]) - double(want[i])) / (atol + rtol * std::abs(want[i]));
    if (!(e <= worst)) worst = std::isnan(e) ? INFINITY : e;
  }
  return got.size() == want.size() ? worst : INFINITY;
}

// Reads "--name value" integer flags; returns false (after printing usage) on an unknown flag.
inline bool parse_int_flags(int argc, char** argv, const std::vector<std::string>& names,
                            std::vector<int*> values, const char* usage) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf("%s\n", usage);
      std::exit(0);
    }
    bool known = false;
    for (size_t j = 0; j < names.size(); ++j)
      if (a == "--" + names[j] && i + 1 < argc) {
        *values[j] = std::atoi(argv[++i]);
        known = true;
      }
    if (!known) {
      std::fprintf(stderr, "unknown argument %s\n%s\n", a.c_str(), usage);
      return false;
    }
  }
  return true;
}

}  // namespace stoke::bench::sandbox
