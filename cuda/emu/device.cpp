// cuda/emu: the emulated devices' identity — kDeviceCount identical devices, "stoke emu", with
// sm_80-like limits —
// and the runtime's error names and strings. Split from runtime.cpp, which holds memory, streams
// and events.
#include <cstring>

#include "cuda/emu/internal.h"

namespace {

using stoke::emu::detail::device_memory_limit;
using stoke::emu::detail::kDefaultDynamicShared;
using stoke::emu::detail::kOptinShared;

thread_local int current_device = 0;

using stoke::emu::detail::fail;

void fill_properties(cudaDeviceProp& p) {
  std::memset(&p, 0, sizeof p);
  std::strncpy(p.name, "stoke emu", sizeof p.name - 1);
  p.totalGlobalMem = device_memory_limit();
  p.sharedMemPerBlock = kDefaultDynamicShared;
  p.sharedMemPerBlockOptin = kOptinShared;
  p.sharedMemPerMultiprocessor = 167936;
  p.regsPerBlock = 65536;
  p.regsPerMultiprocessor = 65536;
  p.warpSize = 32;
  p.memPitch = 2147483647;
  p.maxThreadsPerBlock = 1024;
  p.maxThreadsDim[0] = 1024;
  p.maxThreadsDim[1] = 1024;
  p.maxThreadsDim[2] = 64;
  p.maxGridSize[0] = 2147483647;
  p.maxGridSize[1] = 65535;
  p.maxGridSize[2] = 65535;
  p.totalConstMem = 65536;
  p.major = 8;
  p.minor = 0;
  p.textureAlignment = 512;
  // Few multiprocessors: grids sized "a few blocks per SM" stay small, and emu runs blocks
  // one after another.
  p.multiProcessorCount = 8;
  p.maxThreadsPerMultiProcessor = 2048;
  p.maxBlocksPerMultiProcessor = 32;
  p.l2CacheSize = 40 * 1024 * 1024;
  p.memoryBusWidth = 5120;
  p.concurrentKernels = 1;
  p.asyncEngineCount = 2;
  p.unifiedAddressing = 1;
  p.canMapHostMemory = 1;
  p.globalL1CacheSupported = 1;
  p.localL1CacheSupported = 1;
}

}  // namespace

namespace stoke::emu::detail {
int current_device() {
  return ::current_device;
}
}  // namespace stoke::emu::detail

extern "C" {

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
#define STOKE_EMU_ERROR(e) \
  case e:                  \
    return #e;
    STOKE_EMU_ERROR(cudaSuccess)
    STOKE_EMU_ERROR(cudaErrorInvalidValue)
    STOKE_EMU_ERROR(cudaErrorMemoryAllocation)
    STOKE_EMU_ERROR(cudaErrorInitializationError)
    STOKE_EMU_ERROR(cudaErrorInvalidConfiguration)
    STOKE_EMU_ERROR(cudaErrorInvalidDevice)
    STOKE_EMU_ERROR(cudaErrorInvalidDevicePointer)
    STOKE_EMU_ERROR(cudaErrorInvalidMemcpyDirection)
    STOKE_EMU_ERROR(cudaErrorInvalidResourceHandle)
    STOKE_EMU_ERROR(cudaErrorInvalidDeviceFunction)
    STOKE_EMU_ERROR(cudaErrorNotReady)
    STOKE_EMU_ERROR(cudaErrorLaunchFailure)
    STOKE_EMU_ERROR(cudaErrorLaunchOutOfResources)
    STOKE_EMU_ERROR(cudaErrorNotSupported)
    STOKE_EMU_ERROR(cudaErrorNoDevice)
    STOKE_EMU_ERROR(cudaErrorIllegalState)
    STOKE_EMU_ERROR(cudaErrorStreamCaptureUnsupported)
    STOKE_EMU_ERROR(cudaErrorStreamCaptureInvalidated)
    STOKE_EMU_ERROR(cudaErrorStreamCaptureUnmatched)
    STOKE_EMU_ERROR(cudaErrorStreamCaptureImplicit)
#undef STOKE_EMU_ERROR
    default:
      return "cudaErrorUnknown";
  }
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInitializationError:
      return "initialization error";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal";
    case cudaErrorInvalidDevicePointer:
      return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection:
      return "invalid copy direction for memcpy";
    case cudaErrorInvalidResourceHandle:
      return "invalid resource handle";
    case cudaErrorInvalidDeviceFunction:
      return "invalid device function";
    case cudaErrorNotReady:
      return "device not ready";
    case cudaErrorLaunchFailure:
      return "unspecified launch failure";
    case cudaErrorLaunchOutOfResources:
      return "too many resources requested for launch";
    case cudaErrorNotSupported:
      return "operation not supported";
    case cudaErrorNoDevice:
      return "no CUDA-capable device is detected";
    case cudaErrorIllegalState:
      return "the operation cannot be performed in the present state";
    case cudaErrorStreamCaptureUnsupported:
      return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated:
      return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureUnmatched:
      return "the capture was not initiated in this stream";
    case cudaErrorStreamCaptureImplicit:
      return "operation would make the legacy stream depend on a capturing blocking stream";
    default:
      return "unknown error";
  }
}

cudaError_t cudaGetDeviceCount(int* count) {
  if (count == nullptr) return fail(cudaErrorInvalidValue);
  *count = stoke::emu::kDeviceCount;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= stoke::emu::kDeviceCount) return fail(cudaErrorInvalidDevice);
  current_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  if (device == nullptr) return fail(cudaErrorInvalidValue);
  *device = current_device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp* prop, int device) {
  if (prop == nullptr) return fail(cudaErrorInvalidValue);
  if (device < 0 || device >= stoke::emu::kDeviceCount) return fail(cudaErrorInvalidDevice);
  fill_properties(*prop);
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, enum cudaDeviceAttr attr, int device) {
  if (value == nullptr) return fail(cudaErrorInvalidValue);
  if (device < 0 || device >= stoke::emu::kDeviceCount) return fail(cudaErrorInvalidDevice);
  cudaDeviceProp p;
  fill_properties(p);
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock:
      *value = p.maxThreadsPerBlock;
      break;
    case cudaDevAttrMaxBlockDimX:
      *value = p.maxThreadsDim[0];
      break;
    case cudaDevAttrMaxBlockDimY:
      *value = p.maxThreadsDim[1];
      break;
    case cudaDevAttrMaxBlockDimZ:
      *value = p.maxThreadsDim[2];
      break;
    case cudaDevAttrMaxGridDimX:
      *value = p.maxGridSize[0];
      break;
    case cudaDevAttrMaxGridDimY:
      *value = p.maxGridSize[1];
      break;
    case cudaDevAttrMaxGridDimZ:
      *value = p.maxGridSize[2];
      break;
    case cudaDevAttrMaxSharedMemoryPerBlock:
      *value = static_cast<int>(p.sharedMemPerBlock);
      break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
      *value = static_cast<int>(p.sharedMemPerBlockOptin);
      break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor:
      *value = static_cast<int>(p.sharedMemPerMultiprocessor);
      break;
    case cudaDevAttrWarpSize:
      *value = p.warpSize;
      break;
    case cudaDevAttrMultiProcessorCount:
      *value = p.multiProcessorCount;
      break;
    case cudaDevAttrMaxThreadsPerMultiProcessor:
      *value = p.maxThreadsPerMultiProcessor;
      break;
    case cudaDevAttrComputeCapabilityMajor:
      *value = p.major;
      break;
    case cudaDevAttrComputeCapabilityMinor:
      *value = p.minor;
      break;
    case cudaDevAttrL2CacheSize:
      *value = p.l2CacheSize;
      break;
    case cudaDevAttrMaxRegistersPerBlock:
      *value = p.regsPerBlock;
      break;
    case cudaDevAttrUnifiedAddressing:
      *value = 1;
      break;
    case cudaDevAttrConcurrentKernels:
      *value = 1;
      break;
    default:
      return fail(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int* driverVersion) {
  if (driverVersion == nullptr) return fail(cudaErrorInvalidValue);
  *driverVersion = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int* runtimeVersion) {
  if (runtimeVersion == nullptr) return fail(cudaErrorInvalidValue);
  *runtimeVersion = CUDART_VERSION;
  return cudaSuccess;
}

}  // extern "C"
