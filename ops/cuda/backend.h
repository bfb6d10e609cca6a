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
  void use_device(const char* op, Device device) const override;
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
  ValuesIndices min_with_indices(const Tensor& x, int64_t dim, bool keepdim) override;
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
  Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias,
                const Conv2dOptions& options) override;
  Conv2dGrads conv2d_backward(const Tensor& grad_out, const Tensor& input, const Tensor& weight,
                              const Conv2dOptions& options, bool need_input, bool need_weight,
                              bool need_bias) override;

  // --- pooling, batch norm, dropout: ops/cuda/pool.cpp, batch_norm.cpp, dropout.cpp -------------
  MaxPool2dResult max_pool2d_with_indices(const Tensor& input,
                                          const Pool2dOptions& options) override;
  Tensor max_pool2d_backward(const Tensor& grad_output, const Tensor& indices,
                             const Shape& input_shape, const Pool2dOptions& options) override;
  Tensor avg_pool2d(const Tensor& input, const Pool2dOptions& options) override;
  Tensor avg_pool2d_backward(const Tensor& grad_output, const Shape& input_shape,
                             const Pool2dOptions& options) override;
  Tensor adaptive_avg_pool2d(const Tensor& input, std::array<int64_t, 2> output_size) override;
  Tensor adaptive_avg_pool2d_backward(const Tensor& grad_output, const Shape& input_shape) override;
  BatchNormForward batch_norm_forward(const Tensor& input, const Tensor& running_mean,
                                      const Tensor& running_var, const Tensor& weight,
                                      const Tensor& bias, const BatchNormOptions& options) override;
  BatchNormGrads batch_norm_backward(const Tensor& grad_output, const Tensor& input,
                                     const Tensor& weight, const Tensor& save_mean,
                                     const Tensor& save_invstd, bool training,
                                     std::array<bool, 3> output_mask) override;
  DropoutResult dropout_with_mask(const Tensor& input, double p, GeneratorState state) override;
  Tensor dropout_backward(const Tensor& grad_output, const Tensor& mask, double p) override;

  // --- comparisons, selection, elementwise backward: ops/cuda/elementwise.cpp ------------------
  Tensor unary_backward(UnaryGradOp op, const Tensor& grad, const Tensor& saved,
                        const UnaryGradParams& params) override;
  Tensor compare(CompareOp op, const Tensor& a, const Tensor& b) override;
  Tensor compare_scalar(CompareOp op, const Tensor& a, double s) override;
  Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) override;
  Tensor where_backward(const Tensor& grad, const Tensor& cond, bool for_a) override;
  Tensor pow(const Tensor& x, double exponent) override;
  Tensor pow_backward(const Tensor& grad, const Tensor& x, double exponent) override;
  Tensor div_backward_other(const Tensor& grad, const Tensor& a, const Tensor& b) override;
  Tensor minmax_backward(bool max, const Tensor& grad, const Tensor& a, const Tensor& b) override;
  void sqrt_(const Tensor& t) override;
  void clamp_(const Tensor& t, std::optional<double> min, std::optional<double> max) override;
  void lerp_(const Tensor& t, const Tensor& end, double weight) override;

  // --- more reductions, indexing, other losses: ops/cuda/reduce.cpp, index.cpp, loss.cpp -------
  void check_index_range(const char* op, const Tensor& index, int64_t bound,
                         std::function<std::string(int64_t)> describe) override;
  Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index,
                      const Shape& out_shape) override;
  Tensor index_select_backward(const Tensor& grad, int64_t dim, const Tensor& index,
                               const Shape& input_shape) override;
  Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) override;
  Tensor gather_backward(const Tensor& grad, int64_t dim, const Tensor& index,
                         const Shape& input_shape) override;

  // --- data: ops/cuda/normalize.cpp
  void normalize_u8_nhwc(const Tensor& images, const Tensor& out, const std::vector<float>& mean,
                         const std::vector<float>& std) override;
  // ---------------------------------------------------------------
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

}  // namespace stoke::ops::cuda_glue
