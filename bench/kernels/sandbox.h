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
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "core/dtype.h"
#include "core/half.h"
#include "cuda/compat.h"
#include "cuda/runtime/device.h"

namespace stoke::bench::sandbox {

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

// Writes over a device buffer twice the L2 size (allocated on first use, kept for the program's
// life) on the default stream, so that the next timed run finds none of its data in the cache.
inline void flush_l2(int salt) {
  static size_t bytes = 0;
  static void* buffer = nullptr;
  if (!buffer) {
    int l2 = 0;
    STOKE_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
    bytes = std::max<size_t>(2 * static_cast<size_t>(l2), size_t{1} << 20);
    STOKE_CUDA_CHECK(cudaMalloc(&buffer, bytes));
  }
  STOKE_CUDA_CHECK(cudaMemsetAsync(buffer, salt & 0xff, bytes, nullptr));
}

// Bytes of one element of the float storage dtypes the sandboxes use (f32, f16, bf16).
inline size_t elem(DType d) {
  return d == DType::f32 ? 4 : 2;
}

// v rounded to the nearest value of dtype d (round to nearest even), as f32.
inline float round_to(DType d, float v) {
  if (d == DType::f16) return detail::half_bits_to_float(detail::float_to_half_bits(v));
  if (d == DType::bf16) return detail::bf16_bits_to_float(detail::float_to_bf16_bits(v));
  return v;
}

// f32 values as the bytes of dtype d (f32, f16, bf16), and back.
inline std::vector<unsigned char> encode(DType d, const std::vector<float>& v) {
  std::vector<unsigned char> out(v.size() * elem(d));
  for (size_t i = 0; i < v.size(); ++i) {
    if (d == DType::f32) {
      std::memcpy(&out[4 * i], &v[i], 4);
    } else {
      const uint16_t h =
          d == DType::f16 ? detail::float_to_half_bits(v[i]) : detail::float_to_bf16_bits(v[i]);
      std::memcpy(&out[2 * i], &h, 2);
    }
  }
  return out;
}
inline std::vector<float> decode(DType d, const std::vector<unsigned char>& bytes) {
  std::vector<float> out(bytes.size() / elem(d));
  for (size_t i = 0; i < out.size(); ++i) {
    if (d == DType::f32) {
      std::memcpy(&out[i], &bytes[4 * i], 4);
    } else {
      uint16_t h;
      std::memcpy(&h, &bytes[2 * i], 2);
      out[i] = d == DType::f16 ? detail::half_bits_to_float(h) : detail::bf16_bits_to_float(h);
    }
  }
  return out;
}

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

// Median milliseconds of fn() measured with CUDA events on the default stream, after `warmup`
// untimed calls; the L2 cache is flushed (flush_l2) before each timed call, outside the events.
template <class Fn>
double median_event_ms(Fn&& fn, int reps, int warmup) {
  cudaEvent_t start, stop;
  STOKE_CUDA_CHECK(cudaEventCreate(&start));
  STOKE_CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < warmup; ++i) fn();
  STOKE_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) {
    flush_l2(i);
    STOKE_CUDA_CHECK(cudaEventRecord(start, nullptr));
    fn();
    STOKE_CUDA_CHECK(cudaEventRecord(stop, nullptr));
    STOKE_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.f;
    STOKE_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return median(std::move(times));
}

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
