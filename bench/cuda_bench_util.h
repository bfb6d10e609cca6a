// What every CUDA benchmark shares (bench/ops_cuda*.cpp and the kernel sandboxes in
// bench/kernels/): the CUDA-event timer with its L2 flush, and float values encoded as the bytes
// of the storage dtypes (f32, f16, bf16) and back.
#pragma once

#include <algorithm>
#include <cstring>
#include <vector>

#include "bench/bench_util.h"
#include "core/dtype.h"
#include "core/half.h"
#include "cuda/compat.h"

namespace stoke::bench {

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

// v rounded to the nearest value of dtype d (round to nearest even), as f32.
inline float round_to(DType d, float v) {
  if (d == DType::f16) return detail::half_bits_to_float(detail::float_to_half_bits(v));
  if (d == DType::bf16) return detail::bf16_bits_to_float(detail::float_to_bf16_bits(v));
  return v;
}

// f32 values as the bytes of dtype d (f32, f16, bf16), and back.
inline std::vector<unsigned char> encode(DType d, const std::vector<float>& v) {
  std::vector<unsigned char> out(v.size() * dtype_size(d));
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
  std::vector<float> out(bytes.size() / dtype_size(d));
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

}  // namespace stoke::bench
