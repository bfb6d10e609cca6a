// The CUDA backend of ops/: DeviceKernels (ops/device_kernels.h) implemented with the launchers of
// cuda/kernels/ on the current stream of cuda/runtime. Built twice (see the root CMakeLists.txt):
// against the real backend, where matmul/linear use cuBLAS, and against cuda/emu, where they use
// our SGEMM and every op runs on CPU threads — which is how tests/cuda checks this glue here.
#pragma once

#include "cuda/compat.h"
#include "ops/device_kernels.h"

namespace stoke::ops::cuda_glue {

class CudaKernels final : public DeviceKernels {
 public:
  Device::Type type() const override { return Device::Type::cuda; }
  void check_device(const char* op, Device device) const override;
  void fill(const Tensor& t, double value) override;
  void copy_strided(const Tensor& dst, const Tensor& src) override;
  Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) override;
  Tensor binary_scalar(BinaryOp op, const Tensor& a, double s, bool scalar_first) override;
  void binary_(BinaryOp op, const Tensor& t, const Tensor& other, double alpha) override;
  void binary_scalar_(BinaryOp op, const Tensor& t, double s) override;
  Tensor unary(UnaryOp op, const Tensor& x) override;
  Tensor leaky_relu(const Tensor& x, double negative_slope) override;
  Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max) override;
  Tensor relu_backward(const Tensor& grad, const Tensor& out) override;
  Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) override;
  Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) override;
  ValuesIndices max_with_indices(const Tensor& x, int64_t dim, bool keepdim) override;
  Tensor softmax(const Tensor& x, int64_t dim, bool log) override;
  Tensor softmax_backward(const Tensor& grad, const Tensor& output, int64_t dim, bool log) override;
  CrossEntropyForward cross_entropy_forward(const Tensor& logits, const Tensor& target,
                                            const CrossEntropyOptions& options) override;
  Tensor cross_entropy_backward(const Tensor& grad, const Tensor& logits, const Tensor& target,
                                const Tensor& lse, const CrossEntropyOptions& options) override;
  Tensor matmul(const Tensor& a, const Tensor& b) override;
  Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) override;
  LinearGrads linear_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight,
                              bool need_input, bool need_weight, bool need_bias) override;

  // --- convolution: ops/cuda/conv.cpp ----------------------------------------------------------

  // --- pooling, batch norm, dropout: ops/cuda/pool.cpp, batch_norm.cpp, dropout.cpp -------------

  // --- comparisons, selection, elementwise backward: ops/cuda/elementwise.cpp ------------------

  // --- more reductions, indexing, other losses: ops/cuda/reduce.cpp, index.cpp, loss.cpp -------

  // --- data: ops/cuda/normalize.cpp ---------------------------------------------------------------
};

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

}  // namespace stoke::ops::cuda_glue
