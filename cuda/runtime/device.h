// CUDA device discovery and selection. Nothing here throws for lack of a GPU: device_count()
// returns 0 (with the reason in device_unavailable_reason()) when the driver or the device is
// missing, and best_available_device() falls back to the CPU, saying so once on stderr.
#pragma once

#include <cstddef>
#include <string>

#include "core/device.h"

namespace stoke::cuda {

// What the runtime reports about one device, plus the peaks a roofline needs.
struct DeviceProperties {
  int index = 0;
  std::string name;
  int major = 0;  // compute capability
  int minor = 0;
  int sm_count = 0;
  size_t total_memory = 0;             // bytes
  size_t shared_memory_per_block = 0;  // bytes (the default limit, without opt-in)
  size_t shared_memory_per_sm = 0;     // bytes
  size_t l2_cache_bytes = 0;
  int max_threads_per_block = 0;
  int warp_size = 32;
  int memory_bus_width_bits = 0;
  double sm_clock_khz = 0;      // peak SM clock; 0 when the runtime does not say
  double memory_clock_khz = 0;  // peak memory clock; 0 when the runtime does not say

  // Peak DRAM bandwidth in GB/s (2 transfers per memory clock, bus width in bytes); 0 if unknown.
  double peak_bandwidth_gbs() const;
  // Peak dense f32 FMA throughput (CUDA cores) in TFLOP/s; 0 if unknown.
  double peak_fp32_tflops() const;
  // Peak dense f16/bf16 tensor-core throughput with f32 accumulation in TFLOP/s; 0 if unknown.
  // TF32 is half of it. Per-SM rates are the published ones per architecture (approximate for
  // consumer parts, which run f32 accumulation at a lower rate).
  double peak_tensor_tflops() const;
  // "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 79.1 GiB)".
  std::string summary() const;
};

// Number of CUDA devices; 0 (never an exception) when there is no driver or no device.
int device_count();
// Why device_count() is 0 ("CUDA driver not found", "no CUDA-capable device is detected", ...);
// empty when a device is present.
std::string device_unavailable_reason();
// True when device_count() > 0.
bool is_available();

// Properties of device `index` (cached after the first query); throws naming the index and the
// count when it is out of range.
const DeviceProperties& device_properties(int index);

// cuda(0) when a device is present, else cpu() after printing once to stderr
// "stoke: no CUDA device (<reason>); using cpu".
Device best_available_device();

// The calling thread's current device (cudaGetDevice) and selecting it (cudaSetDevice); set_device
// checks the index against device_count().
int current_device();
void set_device(int index);

// Makes `index` current for a scope and restores the previous device on exit (a no-op when the
// index is already current or negative).
class DeviceGuard {
 public:
  explicit DeviceGuard(int index);
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  ~DeviceGuard();

 private:
  int previous_ = -1;
};

}  // namespace stoke::cuda
