#include "ops/device_kernels.h"

#include <array>

namespace stoke::ops {
namespace {

std::array<DeviceKernels*, 2>& registry() {
  static std::array<DeviceKernels*, 2> r{};
  return r;
}

}  // namespace

const char* binary_op_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::add:
      return "add";
    case BinaryOp::sub:
      return "sub";
    case BinaryOp::mul:
      return "mul";
    case BinaryOp::div:
      return "div";
    case BinaryOp::maximum:
      return "maximum";
    case BinaryOp::minimum:
      return "minimum";
  }
  return "binary";
}

const char* unary_op_name(UnaryOp op) {
  switch (op) {
    case UnaryOp::neg:
      return "neg";
    case UnaryOp::exp:
      return "exp";
    case UnaryOp::log:
      return "log";
    case UnaryOp::sqrt:
      return "sqrt";
    case UnaryOp::rsqrt:
      return "rsqrt";
    case UnaryOp::abs:
      return "abs";
    case UnaryOp::relu:
      return "relu";
    case UnaryOp::sigmoid:
      return "sigmoid";
    case UnaryOp::tanh:
      return "tanh";
    case UnaryOp::gelu:
      return "gelu";
    case UnaryOp::gelu_tanh:
      return "gelu";
    case UnaryOp::sign:
      return "sign";
    case UnaryOp::silu:
      return "silu";
    case UnaryOp::hardswish:
      return "hardswish";
  }
  return "unary";
}

void DeviceKernels::not_implemented(const char* op) const {
  STOKE_FAIL(op, "not implemented on ", Device{type(), 0}.is_cuda() ? "cuda" : "this device",
             " yet (move the tensors to the cpu with .to(Device::cpu()))");
}

void DeviceKernels::use_device(const char*, Device) const {}

void DeviceKernels::fill(const Tensor&, double) {
  not_implemented("fill_");
}
void DeviceKernels::copy_strided(const Tensor&, const Tensor&) {
  not_implemented("copy");
}
Tensor DeviceKernels::binary(BinaryOp op, const Tensor&, const Tensor&) {
  not_implemented(binary_op_name(op));
}
Tensor DeviceKernels::binary_scalar(BinaryOp op, const Tensor&, double, bool) {
  not_implemented(binary_op_name(op));
}
Tensor DeviceKernels::unary(UnaryOp op, const Tensor&) {
  not_implemented(unary_op_name(op));
}
Tensor DeviceKernels::leaky_relu(const Tensor&, double) {
  not_implemented("leaky_relu");
}
Tensor DeviceKernels::clamp(const Tensor&, std::optional<double>, std::optional<double>) {
  not_implemented("clamp");
}
Tensor DeviceKernels::relu_backward(const Tensor&, const Tensor&) {
  not_implemented("relu_backward");
}
void DeviceKernels::binary_(BinaryOp op, const Tensor&, const Tensor&, double) {
  not_implemented(binary_op_name(op));
}
void DeviceKernels::binary_scalar_(BinaryOp op, const Tensor&, double) {
  not_implemented(binary_op_name(op));
}
Tensor DeviceKernels::sum(const Tensor&, const std::vector<int64_t>&, bool) {
  not_implemented("sum");
}
Tensor DeviceKernels::mean(const Tensor&, const std::vector<int64_t>&, bool) {
  not_implemented("mean");
}
ValuesIndices DeviceKernels::max_with_indices(const Tensor&, int64_t, bool) {
  not_implemented("max");
}
ValuesIndices DeviceKernels::min_with_indices(const Tensor&, int64_t, bool) {
  not_implemented("min");
}
Tensor DeviceKernels::softmax(const Tensor&, int64_t, bool log) {
  not_implemented(log ? "log_softmax" : "softmax");
}
Tensor DeviceKernels::softmax_backward(const Tensor&, const Tensor&, int64_t, bool log) {
  not_implemented(log ? "log_softmax_backward" : "softmax_backward");
}
CrossEntropyForward DeviceKernels::cross_entropy_forward(const Tensor&, const Tensor&,
                                                         const CrossEntropyOptions&) {
  not_implemented("cross_entropy");
}
Tensor DeviceKernels::cross_entropy_backward(const Tensor&, const Tensor&, const Tensor&,
                                             const Tensor&, const CrossEntropyOptions&) {
  not_implemented("cross_entropy_backward");
}
Tensor DeviceKernels::matmul(const Tensor&, const Tensor&) {
  not_implemented("matmul");
}
Tensor DeviceKernels::linear(const Tensor&, const Tensor&, const Tensor&) {
  not_implemented("linear");
}

LinearGrads DeviceKernels::linear_backward(const Tensor&, const Tensor&, const Tensor&, bool, bool,
                                           bool) {
  not_implemented("linear_backward");
}

// --- convolution ---------------------------------------------------------------------------------
Tensor DeviceKernels::conv2d(const Tensor&, const Tensor&, const Tensor&, const Conv2dOptions&) {
  not_implemented("conv2d");
}
Conv2dGrads DeviceKernels::conv2d_backward(const Tensor&, const Tensor&, const Tensor&,
                                           const Conv2dOptions&, bool, bool, bool) {
  not_implemented("conv2d_backward");
}

// --- pooling, batch norm, dropout ----------------------------------------------------------------
MaxPool2dResult DeviceKernels::max_pool2d_with_indices(const Tensor&, const Pool2dOptions&) {
  not_implemented("max_pool2d");
}
Tensor DeviceKernels::max_pool2d_backward(const Tensor&, const Tensor&, const Shape&,
                                          const Pool2dOptions&) {
  not_implemented("max_pool2d_backward");
}
Tensor DeviceKernels::avg_pool2d(const Tensor&, const Pool2dOptions&) {
  not_implemented("avg_pool2d");
}
Tensor DeviceKernels::avg_pool2d_backward(const Tensor&, const Shape&, const Pool2dOptions&) {
  not_implemented("avg_pool2d_backward");
}
Tensor DeviceKernels::adaptive_avg_pool2d(const Tensor&, std::array<int64_t, 2>) {
  not_implemented("adaptive_avg_pool2d");
}
Tensor DeviceKernels::adaptive_avg_pool2d_backward(const Tensor&, const Shape&) {
  not_implemented("adaptive_avg_pool2d_backward");
}
BatchNormForward DeviceKernels::batch_norm_forward(const Tensor&, const Tensor&, const Tensor&,
                                                   const Tensor&, const Tensor&,
                                                   const BatchNormOptions&) {
  not_implemented("batch_norm");
}
BatchNormGrads DeviceKernels::batch_norm_backward(const Tensor&, const Tensor&, const Tensor&,
                                                  const Tensor&, const Tensor&, bool,
                                                  std::array<bool, 3>) {
  not_implemented("batch_norm_backward");
}
DropoutResult DeviceKernels::dropout_with_mask(const Tensor&, double, GeneratorState) {
  not_implemented("dropout");
}
Tensor DeviceKernels::dropout_backward(const Tensor&, const Tensor&, double) {
  not_implemented("dropout_backward");
}

// --- comparisons, selection, elementwise backward ------------------------------------------------
Tensor DeviceKernels::unary_backward(UnaryGradOp, const Tensor&, const Tensor&,
                                     const UnaryGradParams&) {
  not_implemented("backward of a unary op");
}
Tensor DeviceKernels::compare(CompareOp, const Tensor&, const Tensor&) {
  not_implemented("compare");
}
Tensor DeviceKernels::compare_scalar(CompareOp, const Tensor&, double) {
  not_implemented("compare");
}
Tensor DeviceKernels::where(const Tensor&, const Tensor&, const Tensor&) {
  not_implemented("where");
}
Tensor DeviceKernels::where_backward(const Tensor&, const Tensor&, bool) {
  not_implemented("where_backward");
}
Tensor DeviceKernels::pow(const Tensor&, double) {
  not_implemented("pow");
}
Tensor DeviceKernels::pow_backward(const Tensor&, const Tensor&, double) {
  not_implemented("pow_backward");
}
Tensor DeviceKernels::div_backward_other(const Tensor&, const Tensor&, const Tensor&) {
  not_implemented("div_backward");
}
Tensor DeviceKernels::minmax_backward(bool max, const Tensor&, const Tensor&, const Tensor&) {
  not_implemented(max ? "maximum_backward" : "minimum_backward");
}
void DeviceKernels::sqrt_(const Tensor&) {
  not_implemented("sqrt_");
}
void DeviceKernels::clamp_(const Tensor&, std::optional<double>, std::optional<double>) {
  not_implemented("clamp_");
}
void DeviceKernels::lerp_(const Tensor&, const Tensor&, double) {
  not_implemented("lerp_");
}

// --- more reductions, indexing, other losses -----------------------------------------------------
void DeviceKernels::check_index_range(const char*, const Tensor&, int64_t,
                                      std::function<std::string(int64_t)>) {
  not_implemented("index check");
}
Tensor DeviceKernels::index_select(const Tensor&, int64_t, const Tensor&, const Shape&) {
  not_implemented("index_select");
}
Tensor DeviceKernels::index_select_backward(const Tensor&, int64_t, const Tensor&, const Shape&) {
  not_implemented("index_select_backward");
}
Tensor DeviceKernels::gather(const Tensor&, int64_t, const Tensor&) {
  not_implemented("gather");
}
Tensor DeviceKernels::gather_backward(const Tensor&, int64_t, const Tensor&, const Shape&) {
  not_implemented("gather_backward");
}

// --- data: uint8 batches normalized on the device ------------------------------------------------
void DeviceKernels::normalize_u8_nhwc(const Tensor&, const Tensor&, const std::vector<float>&,
                                      const std::vector<float>&) {
  not_implemented("data::normalize");
}

void register_device_kernels(Device::Type type, DeviceKernels* kernels) {
  registry()[static_cast<size_t>(type)] = kernels;
}

DeviceKernels& device_kernels(const char* op, Device device) {
  DeviceKernels* k = registry()[static_cast<size_t>(device.type)];
  STOKE_CHECK(k != nullptr, op, "got a tensor on ", device,
              ", but this build has no kernels for that device (built without CUDA)");
  k->use_device(op, device);
  return *k;
}

}  // namespace stoke::ops
