// Device dispatch for ops/: a backend (the CUDA glue in ops/cuda/) registers one DeviceKernels
// object per device type at start-up, and each ops:: entry point sends tensors that are not on the
// CPU to it. The methods mirror the ops:: functions one to one, so the glue is a thin translation
// from tensors to kernel launches; a method the backend does not override reports that the op is
// not implemented on that device (never a silent CPU fallback on device memory).
//
// Why virtual methods and not a switch in every op: ops/ cannot depend on cuda/ (the real and the
// emulated backend are two libraries with the same symbols, and a CPU-only build has neither), so
// the link goes the other way, through this registry, like core's allocator registry.
#pragma once

#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/random.h"
#include "core/tensor.h"
#include "ops/conv.h"
#include "ops/dropout.h"
#include "ops/elementwise.h"
#include "ops/index.h"
#include "ops/linalg.h"
#include "ops/loss.h"
#include "ops/norm.h"
#include "ops/pool.h"
#include "ops/reduce.h"

namespace stoke::ops {

enum class BinaryOp { add, sub, mul, div, maximum, minimum };
enum class UnaryOp {
  neg,
  exp,
  log,
  sqrt,
  rsqrt,
  abs,
  relu,
  sigmoid,
  tanh,
  gelu,
  gelu_tanh,
  sign,
  silu,
  hardswish
};
// Backward maps out = f(grad, saved), saved being the forward's input or output as
// ops::NAME_backward takes it.
enum class UnaryGradOp {
  leaky_relu,
  sigmoid,
  tanh,
  gelu,
  gelu_tanh,
  clamp,
  abs,
  sqrt,
  rsqrt,
  silu,
  hardswish
};
struct UnaryGradParams {
  double negative_slope = 0.01;  // leaky_relu
  double min = -INFINITY;        // clamp (missing bounds are infinite)
  double max = INFINITY;
};
// a (op) b -> bool, as ops::eq ... ops::ge.
enum class CompareOp { eq, ne, lt, le, gt, ge };

const char* binary_op_name(BinaryOp op);
const char* unary_op_name(UnaryOp op);

class DeviceKernels {
 public:
  virtual ~DeviceKernels() = default;
  // The device type these kernels serve, for messages.
  virtual Device::Type type() const = 0;
  // Called by every dispatch before the op's kernels: throws naming `op` when `device` cannot run
  // kernels (no such device, no driver), else makes it the device the op's launches, allocations
  // and library handles use. CUDA: the calling thread's current device becomes device.index (what
  // a torch op's device guard does; here it stays set, so the common one-device case never
  // switches).
  virtual void use_device(const char* op, Device device) const;

  // --- creation and copies --------------------------------------------------------------------
  virtual void fill(const Tensor& t, double value);
  // dst (device) <- src (same device, same shape): strided copy with dtype conversion.
  virtual void copy_strided(const Tensor& dst, const Tensor& src);

  // --- elementwise ------------------------------------------------------------------------------
  virtual Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b);
  // scalar_first: s (op) a, as in sub(s, a) and div(s, a).
  virtual Tensor binary_scalar(BinaryOp op, const Tensor& a, double s, bool scalar_first);
  virtual Tensor unary(UnaryOp op, const Tensor& x);
  virtual Tensor leaky_relu(const Tensor& x, double negative_slope);
  virtual Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max);
  virtual Tensor relu_backward(const Tensor& grad, const Tensor& x);
  // In place: t = t op (alpha * other) (alpha for add/sub only), other broadcast to t's shape.
  virtual void binary_(BinaryOp op, const Tensor& t, const Tensor& other, double alpha);
  // In place: t = t op s.
  virtual void binary_scalar_(BinaryOp op, const Tensor& t, double s);

  // --- reductions -------------------------------------------------------------------------------
  virtual Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim);
  virtual Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim);
  virtual ValuesIndices max_with_indices(const Tensor& x, int64_t dim, bool keepdim);
  virtual ValuesIndices min_with_indices(const Tensor& x, int64_t dim, bool keepdim);

  // --- softmax and losses -----------------------------------------------------------------------
  virtual Tensor softmax(const Tensor& x, int64_t dim, bool log);
  virtual Tensor softmax_backward(const Tensor& grad, const Tensor& output, int64_t dim, bool log);
  virtual CrossEntropyForward cross_entropy_forward(const Tensor& logits, const Tensor& target,
                                                    const CrossEntropyOptions& options);
  virtual Tensor cross_entropy_backward(const Tensor& grad, const Tensor& logits,
                                        const Tensor& target, const Tensor& lse,
                                        const CrossEntropyOptions& options);

  // --- linear algebra ---------------------------------------------------------------------------
  virtual Tensor matmul(const Tensor& a, const Tensor& b);
  virtual Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias);
  virtual LinearGrads linear_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight,
                                      bool need_input, bool need_weight, bool need_bias);

  // --- convolution (ops/conv.h) -----------------------------------------------------------------
  // Called after the entry point's device-independent checks (shapes, options, dtypes agree).
  virtual Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias,
                        const Conv2dOptions& options);
  virtual Conv2dGrads conv2d_backward(const Tensor& grad_out, const Tensor& input,
                                      const Tensor& weight, const Conv2dOptions& options,
                                      bool need_input, bool need_weight, bool need_bias);

  // --- pooling, batch norm, dropout (ops/pool.h, ops/norm.h, ops/dropout.h) ---------------------
  // Called after the device-independent argument checks of the ops:: entry point.
  virtual MaxPool2dResult max_pool2d_with_indices(const Tensor& input,
                                                  const Pool2dOptions& options);
  virtual Tensor max_pool2d_backward(const Tensor& grad_output, const Tensor& indices,
                                     const Shape& input_shape, const Pool2dOptions& options);
  virtual Tensor avg_pool2d(const Tensor& input, const Pool2dOptions& options);
  virtual Tensor avg_pool2d_backward(const Tensor& grad_output, const Shape& input_shape,
                                     const Pool2dOptions& options);
  virtual Tensor adaptive_avg_pool2d(const Tensor& input, std::array<int64_t, 2> output_size);
  virtual Tensor adaptive_avg_pool2d_backward(const Tensor& grad_output, const Shape& input_shape);
  virtual BatchNormForward batch_norm_forward(const Tensor& input, const Tensor& running_mean,
                                              const Tensor& running_var, const Tensor& weight,
                                              const Tensor& bias, const BatchNormOptions& options);
  virtual BatchNormGrads batch_norm_backward(const Tensor& grad_output, const Tensor& input,
                                             const Tensor& weight, const Tensor& save_mean,
                                             const Tensor& save_invstd, bool training,
                                             std::array<bool, 3> output_mask);
  // 0 < p < 1; `state` is the generator reservation the CPU kernel would have used, so both
  // devices draw the same mask.
  virtual DropoutResult dropout_with_mask(const Tensor& input, double p, GeneratorState state);
  virtual Tensor dropout_backward(const Tensor& grad_output, const Tensor& mask, double p);

  // --- comparisons, selection, elementwise backward (ops/elementwise.h) -------------------------
  // grad and saved broadcast against each other (as the CPU's backward maps do).
  virtual Tensor unary_backward(UnaryGradOp op, const Tensor& grad, const Tensor& saved,
                                const UnaryGradParams& params);
  // Comparisons with broadcasting, any dtype (both operands the same); a bool result.
  virtual Tensor compare(CompareOp op, const Tensor& a, const Tensor& b);
  virtual Tensor compare_scalar(CompareOp op, const Tensor& a, double s);
  // cond (bool) ? a : b with broadcasting; a and b of one dtype.
  virtual Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
  // grad where cond == for_a, else 0 (ops::where_backward); grad and cond broadcast.
  virtual Tensor where_backward(const Tensor& grad, const Tensor& cond, bool for_a);
  // x ** exponent and grad * exponent * x^(exponent - 1), as ops::pow and ops::pow_backward.
  virtual Tensor pow(const Tensor& x, double exponent);
  virtual Tensor pow_backward(const Tensor& grad, const Tensor& x, double exponent);
  // -grad * a / b^2 (ops::div_backward_other), and a's share of the gradient of maximum(a, b)
  // (max) or minimum(a, b) (!max); the three operands broadcast, of one dtype (checked).
  virtual Tensor div_backward_other(const Tensor& grad, const Tensor& a, const Tensor& b);
  virtual Tensor minmax_backward(bool max, const Tensor& grad, const Tensor& a, const Tensor& b);
  // In place, after the entry point's in-place checks (not expanded, no grad; end of t's dtype
  // broadcasting to t): t = sqrt(t), t = clamp(t, min, max) (one bound at least), and
  // t += weight * (end - t).
  virtual void sqrt_(const Tensor& t);
  virtual void clamp_(const Tensor& t, std::optional<double> min, std::optional<double> max);
  virtual void lerp_(const Tensor& t, const Tensor& end, double weight);

  // --- more reductions, indexing, other losses (ops/reduce.h, ops/index.h, ops/loss.h) ----------
  // Checks every value of `index` (contiguous i64 on this device) is in [0, bound). A failure is
  // stoke::Error("stoke::<op>: " + describe(first bad position)), the CPU's message; a device may
  // raise it at the calling thread's next synchronization instead of now (CUDA: no read-back per
  // call), its kernels skipping the bad values meanwhile.
  virtual void check_index_range(const char* op, const Tensor& index, int64_t bound,
                                 std::function<std::string(int64_t)> describe);
  // x viewed as (outer, x.size(dim), inner) -> out (outer, index.numel(), inner) reshaped to
  // out_shape; index checked, contiguous i64.
  virtual Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index,
                              const Shape& out_shape);
  // zeros(input_shape), then grad's rows added at index along dim.
  virtual Tensor index_select_backward(const Tensor& grad, int64_t dim, const Tensor& index,
                                       const Shape& input_shape);
  virtual Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
  virtual Tensor gather_backward(const Tensor& grad, int64_t dim, const Tensor& index,
                                 const Shape& input_shape);

  // --- data: uint8 batches normalized on the device (data/normalize.h) --------------------------
  // out (N, C, H, W) = (images (N, H, W, C) u8 / 255 - mean[c]) / std[c]; C values in each vector,
  // both tensors contiguous on this device (checked by data::normalize_into).
  virtual void normalize_u8_nhwc(const Tensor& images, const Tensor& out,
                                 const std::vector<float>& mean, const std::vector<float>& std);

 protected:
  // Throws "stoke::OP: not implemented on DEVICE yet".
  [[noreturn]] void not_implemented(const char* op) const;
};

// Registers the kernels for a device type (null unregisters). Called by backends at start-up.
void register_device_kernels(Device::Type type, DeviceKernels* kernels);
// The kernels for `device`, or throws naming the op and the device when none are registered.
DeviceKernels& device_kernels(const char* op, Device device);

}  // namespace stoke::ops
