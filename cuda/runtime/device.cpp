#include "cuda/runtime/device.h"

#include <cstdio>
#include <deque>
#include <iomanip>
#include <memory>
#include <mutex>
#include <sstream>

#include "core/error.h"
#include "cuda/compat.h"

namespace stoke::cuda {
namespace {

struct Discovery {
  int count = 0;
  std::string reason;
};

// Asks the runtime once: cudaGetDeviceCount is what fails (without crashing) when libcuda is
// missing or no device is visible, and its answer cannot change during the process.
const Discovery& discovery() {
  static const Discovery d = [] {
    Discovery r;
    int n = 0;
    const cudaError_t err = cudaGetDeviceCount(&n);
    // The failure is not sticky, but leave no error behind for the next launcher's check.
    (void)cudaGetLastError();
    if (err == cudaSuccess && n > 0) {
      r.count = n;
      return r;
    }
#ifndef STOKE_CUDA_EMU
    int driver = 0;
    if (cudaDriverGetVersion(&driver) == cudaSuccess && driver == 0) {
      r.reason = "CUDA driver not found";
      return r;
    }
    (void)cudaGetLastError();
#endif
    if (err == cudaErrorInsufficientDriver) {
      r.reason = "CUDA driver not found or older than the CUDA runtime";
    } else if (err == cudaErrorNoDevice || err == cudaSuccess) {
      r.reason = "no CUDA-capable device is detected";
    } else {
      r.reason = cudaGetErrorString(err);
    }
    return r;
  }();
  return d;
}

// Dense f32 FMA lanes per SM by compute capability.
int fp32_lanes_per_sm(int major, int minor) {
  if (major == 8 && minor == 0) return 64;
  if (major >= 8) return 128;
  if (major == 7) return 64;
  if (major == 6) return minor == 0 ? 64 : 128;
  return 0;
}

// Dense f16 tensor-core flops per SM per clock with f32 accumulation (published peaks divided by
// SMs x boost clock).
int tensor_flops_per_sm_clock(int major, int minor) {
  if (major == 7) return minor == 0 ? 1024 : 512;
  if (major == 8) return minor == 0 ? 2048 : 512;
  if (major == 9) return 4096;
  if (major == 10) return 8192;
  if (major == 12) return 512;
  return 0;
}

DeviceProperties query_properties(int index) {
  cudaDeviceProp p{};
  STOKE_CUDA_CHECK(cudaGetDeviceProperties(&p, index));
  DeviceProperties d;
  d.index = index;
  d.name = p.name;
  d.major = p.major;
  d.minor = p.minor;
  d.sm_count = p.multiProcessorCount;
  d.total_memory = p.totalGlobalMem;
  d.shared_memory_per_block = p.sharedMemPerBlock;
  d.shared_memory_per_sm = p.sharedMemPerMultiprocessor;
  d.l2_cache_bytes = static_cast<size_t>(p.l2CacheSize);
  d.max_threads_per_block = p.maxThreadsPerBlock;
  d.warp_size = p.warpSize;
  d.memory_bus_width_bits = p.memoryBusWidth;
#ifndef STOKE_CUDA_EMU
  // CUDA 13 removed the clock fields from cudaDeviceProp; the attributes remain.
  int khz = 0;
  if (cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, index) == cudaSuccess) {
    d.sm_clock_khz = khz;
  }
  if (cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, index) == cudaSuccess) {
    d.memory_clock_khz = khz;
  }
  (void)cudaGetLastError();
#endif
  return d;
}

}  // namespace

double DeviceProperties::peak_bandwidth_gbs() const {
  return 2.0 * memory_clock_khz * 1e3 * (memory_bus_width_bits / 8.0) / 1e9;
}

double DeviceProperties::peak_fp32_tflops() const {
  return 2.0 * fp32_lanes_per_sm(major, minor) * sm_count * sm_clock_khz * 1e3 / 1e12;
}

double DeviceProperties::peak_tensor_tflops() const {
  return static_cast<double>(tensor_flops_per_sm_clock(major, minor)) * sm_count * sm_clock_khz *
         1e3 / 1e12;
}

std::string DeviceProperties::summary() const {
  std::ostringstream os;
  os << name << " (sm_" << major << minor << ", " << sm_count << " SMs, " << std::fixed
     << std::setprecision(1) << static_cast<double>(total_memory) / (1 << 30) << " GiB)";
  return os.str();
}

int device_count() {
  return discovery().count;
}

std::string device_unavailable_reason() {
  return discovery().reason;
}

bool is_available() {
  return device_count() > 0;
}

const DeviceProperties& device_properties(int index) {
  const int n = device_count();
  STOKE_CHECK(index >= 0 && index < n, "cuda::device_properties", "expected a device index in [0, ",
              n, "), got ", index, n == 0 ? " (" : "",
              n == 0 ? device_unavailable_reason() : std::string(), n == 0 ? ")" : "");
  // A deque keeps references stable; filled once, in index order, under the lock.
  static std::mutex mutex;
  static std::deque<std::unique_ptr<DeviceProperties>> cache;
  std::lock_guard<std::mutex> lock(mutex);
  if (cache.empty()) cache.resize(static_cast<size_t>(n));
  auto& slot = cache[static_cast<size_t>(index)];
  if (!slot) slot = std::make_unique<DeviceProperties>(query_properties(index));
  return *slot;
}

Device best_available_device() {
  if (is_available()) return Device::cuda(0);
  static std::once_flag said;
  std::call_once(said, [] {
    std::fprintf(stderr, "stoke: no CUDA device (%s); using cpu\n",
                 device_unavailable_reason().c_str());
  });
  return Device::cpu();
}

int current_device() {
  int d = 0;
  STOKE_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

void set_device(int index) {
  const int n = device_count();
  STOKE_CHECK(index >= 0 && index < n, "cuda::set_device", "expected a device index in [0, ", n,
              "), got ", index);
  STOKE_CUDA_CHECK(cudaSetDevice(index));
}

DeviceGuard::DeviceGuard(int index) {
  if (index < 0) return;
  const int current = current_device();
  if (current == index) return;
  set_device(index);
  previous_ = current;
}

DeviceGuard::~DeviceGuard() {
  // Restoring cannot fail for an index that was current a moment ago; never throw here.
  if (previous_ >= 0) (void)cudaSetDevice(previous_);
}

}  // namespace stoke::cuda
