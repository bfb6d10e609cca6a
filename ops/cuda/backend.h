// The CUDA backend of ops/: ops::Backend (ops/backend.h) implemented with the launchers of
// cuda/kernels/ on the current stream of cuda/runtime. Built twice (see the root CMakeLists.txt):
// against the real backend, where matmul/linear use cuBLAS, and against cuda/emu, where they use
// our SGEMM and every op runs on CPU threads — which is how tests/cuda checks this glue here.
#pragma once

#include "cuda/compat.h"
#include "ops/backend.h"

namespace stoke::ops::cuda_glue {

class CudaBackend final : public Backend {
 public:
  Device::Type type() const override { return Device::Type::cuda; }
  void use_device(const char* op, Device device) const override;
  bool stream_capturing() const override;
  // Every method of ops/backend_methods.h; a method of family F is defined in ops/cuda/F.cpp.
  STOKE_BACKEND_METHODS(STOKE_BACKEND_OVERRIDE)
};

// Which convolution kernels conv2d uses on cuda: cuDNN (the default where it is built in) or
// stoke's own (implicit-GEMM forward; im2col + SGEMM + col2im backward), for comparison and for
// the emulated build, which has only stoke's. STOKE_CUDA_CONV=stoke|cudnn sets the start value.
enum class ConvImpl { cudnn, stoke };
void set_conv_impl(ConvImpl impl);
ConvImpl conv_impl();
// The floats of column matrix stoke's conv backward holds at once (default 16 Mi = 64 MiB): a
// batch whose columns need more is done a chunk of samples at a time. Returns the old value; tests
// lower it to run several chunks, the last one shorter, on small shapes.
int64_t set_conv_column_budget(int64_t floats);

// Checks that t's dtype is one the CUDA float kernels take (f32, f16, bf16).
void check_float_dtype(const char* op, const Tensor& t);
// (outer, n, inner) of a contiguous tensor around dim.
struct Split {
  int64_t outer, n, inner;
};
Split split_at(const Tensor& t, int64_t dim);
// The stream every glue launch goes to (cuda/runtime's current stream).
cudaStream_t launch_stream();
// An uninitialized tensor on `device`.
Tensor empty_on(const Shape& shape, DType dtype, Device device);
// t's data as T* (the caller has checked the dtype).
template <class T>
T* typed(const Tensor& t) {
  return static_cast<T*>(t.data_ptr());
}

// The float pointer of an optional f32 tensor (BN's and GN's affine parameters), or null.
inline const float* f32_or_null(const Tensor& t) {
  return t.defined() ? typed<float>(t) : nullptr;
}

}  // namespace stoke::ops::cuda_glue
