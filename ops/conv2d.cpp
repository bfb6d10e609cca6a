// conv2d entry points: the device-independent checks (shapes, options, dtypes agree), then the
// backend of the tensors' device (ops/cpu/conv2d.cpp, ops/cuda/conv2d.cpp). One sample (C, H, W)
// is a batch of one, as torch accepts it.
#include "ops/conv2d.h"

#include "core/profiler.h"
#include "ops/backend.h"
#include "ops/check.h"
#include "ops/creation.h"
#include "ops/elementwise.h"
#include "ops/memory_format.h"

namespace stoke::ops {
namespace {

void check_options(const char* op, const Conv2dOptions& o) {
  STOKE_CHECK(o.stride[0] >= 1 && o.stride[1] >= 1, op, "expected stride >= 1, got (", o.stride[0],
              ", ", o.stride[1], ")");
  STOKE_CHECK(o.dilation[0] >= 1 && o.dilation[1] >= 1, op, "expected dilation >= 1, got (",
              o.dilation[0], ", ", o.dilation[1], ")");
  STOKE_CHECK(o.padding[0] >= 0 && o.padding[1] >= 0, op, "expected padding >= 0, got (",
              o.padding[0], ", ", o.padding[1], ")");
  STOKE_CHECK(o.groups >= 1, op, "expected groups >= 1, got ", o.groups);
}

// Validates input/weight/bias and returns the output's spatial size (OH, OW).
std::array<int64_t, 2> check_conv(const char* op, const Tensor& input, const Tensor& weight,
                                  const Tensor& bias, const Conv2dOptions& o) {
  STOKE_CHECK(input.defined() && weight.defined(), op, "expected defined input and weight");
  check_same_dtype(op, input, "input", weight, "weight");
  check_dim(op, input, "input", 4, "(N, C, H, W) (or 3 dims (C, H, W) for one sample)");
  check_dim(op, weight, "weight", 4, "(K, C/groups, kh, kw)");
  check_options(op, o);
  const int64_t C = input.size(1), K = weight.size(0);
  STOKE_CHECK(C % o.groups == 0, op, "expected input channels divisible by groups=", o.groups,
              ", got input of shape ", input.shape());
  STOKE_CHECK(K % o.groups == 0, op, "expected output channels divisible by groups=", o.groups,
              ", got weight of shape ", weight.shape());
  STOKE_CHECK(weight.size(1) * o.groups == C, op, "expected weight of shape [", K, ", ",
              C / o.groups, ", kh, kw] (C/groups = ", C, "/", o.groups,
              " input channels per group) for input of shape ", input.shape(),
              ", got weight of shape ", weight.shape());
  if (bias.defined()) {
    check_same_dtype(op, input, "input", bias, "bias");
    check_shape(op, bias, "bias", {K});
  }
  return conv2d_output_size({input.size(2), input.size(3)}, {weight.size(2), weight.size(3)}, o);
}

}  // namespace

std::array<int64_t, 2> conv2d_output_size(const std::array<int64_t, 2>& input_size,
                                          const std::array<int64_t, 2>& kernel_size,
                                          const Conv2dOptions& o) {
  check_options("conv2d", o);
  std::array<int64_t, 2> out{};
  for (int d = 0; d < 2; ++d) {
    const int64_t span =
        input_size[d] + 2 * o.padding[d] - o.dilation[d] * (kernel_size[d] - 1) - 1;
    out[d] = span < 0 ? 0 : span / o.stride[d] + 1;
  }
  STOKE_CHECK(out[0] > 0 && out[1] > 0 && kernel_size[0] > 0 && kernel_size[1] > 0, "conv2d",
              "output size would be (", out[0], ", ", out[1], ") for input size (", input_size[0],
              ", ", input_size[1], "), kernel (", kernel_size[0], ", ", kernel_size[1],
              "), padding (", o.padding[0], ", ", o.padding[1], "), stride (", o.stride[0], ", ",
              o.stride[1], "), dilation (", o.dilation[0], ", ", o.dilation[1],
              "): the (padded) input must be at least as large as the dilated kernel");
  return out;
}

namespace {
// Multiply-adds x 2 of one convolution (for the profiler's GFLOP/s): each output element takes
// the weight's C/groups x KH x KW taps.
template <class Out>
double conv_flops(const Tensor& input, const Tensor& weight, const Out& out) {
  return 2.0 * static_cast<double>(input.size(0)) * static_cast<double>(out[0]) *
         static_cast<double>(out[1]) * static_cast<double>(weight.numel());
}
}  // namespace

Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias,
              const Conv2dOptions& options) {
  // One sample (C, H, W), as torch accepts it: a batch of one, then the batch dim dropped.
  if (input.defined() && input.dim() == 3)
    return conv2d(input.detach().unsqueeze(0), weight, bias, options).squeeze(0);
  const auto out = check_conv("conv2d", input, weight, bias, options);
  if (profiler::enabled()) profiler::next_range_flops(conv_flops(input, weight, out));
  // The output keeps the input's layout (a backend may compute NCHW or, like cuDNN's, NHWC).
  return in_format(
      dispatch("conv2d", {&input, &weight, &bias}).conv2d(input, weight, bias, options),
      input.suggest_memory_format());
}

Conv2dGrads conv2d_backward(const Tensor& grad_out, const Tensor& input, const Tensor& weight,
                            const Conv2dOptions& options, bool need_input, bool need_weight,
                            bool need_bias) {
  if (input.defined() && input.dim() == 3) {  // one sample (C, H, W): see conv2d
    STOKE_CHECK(grad_out.defined() && grad_out.dim() == 3, "conv2d_backward",
                "expected grad_out with 3 dims (K, OH, OW) for input of shape ", input.shape(),
                ", got ", grad_out.defined() ? grad_out.shape() : Shape{});
    Conv2dGrads r = conv2d_backward(grad_out.detach().unsqueeze(0), input.detach().unsqueeze(0),
                                    weight, options, need_input, need_weight, need_bias);
    if (r.grad_input.defined()) r.grad_input = r.grad_input.squeeze(0);
    return r;
  }
  const auto out = check_conv("conv2d_backward", input, weight, Tensor(), options);
  STOKE_CHECK(grad_out.defined(), "conv2d_backward", "expected a defined grad_out");
  check_same_dtype("conv2d_backward", grad_out, "grad_out", input, "input");
  check_shape("conv2d_backward", grad_out, "grad_out",
              {input.size(0), weight.size(0), out[0], out[1]});
  if (profiler::enabled())
    profiler::next_range_flops(conv_flops(input, weight, out) *
                               (int{need_input} + int{need_weight}));
  Conv2dGrads r =
      dispatch("conv2d_backward", {&grad_out, &input, &weight})
          .conv2d_backward(grad_out, input, weight, options, need_input, need_weight, need_bias);
  r.grad_input = in_format(r.grad_input, input.suggest_memory_format());
  return r;
}

Tensor conv2d_backward_input(const Tensor& grad_out, const Tensor& input, const Tensor& weight,
                             const Conv2dOptions& options) {
  return conv2d_backward(grad_out, input, weight, options, true, false, false).grad_input;
}

Tensor conv2d_backward_weight(const Tensor& grad_out, const Tensor& input, const Tensor& weight,
                              const Conv2dOptions& options) {
  return conv2d_backward(grad_out, input, weight, options, false, true, false).grad_weight;
}

Tensor conv2d_backward_bias(const Tensor& grad_out) {
  STOKE_CHECK(grad_out.defined(), "conv2d_backward_bias", "expected a defined grad_out");
  if (grad_out.dim() == 3) return conv2d_backward_bias(grad_out.detach().unsqueeze(0));
  check_dim("conv2d_backward_bias", grad_out, "grad_out", 4,
            "(N, K, OH, OW) (or 3 dims (K, OH, OW) for one sample)");
  return dispatch("conv2d_backward_bias", {&grad_out}).conv2d_backward_bias(grad_out);
}

Conv2dOptions conv_transpose2d_as_conv(const ConvTranspose2dOptions& o) {
  return {.stride = o.stride, .padding = o.padding, .dilation = o.dilation, .groups = o.groups};
}

Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const Tensor& bias,
                        const ConvTranspose2dOptions& options) {
  const char* op = "conv_transpose2d";
  STOKE_CHECK(input.defined() && weight.defined(), op, "expected defined input and weight");
  if (input.dim() == 3)  // one sample (C_in, H, W), as torch accepts it
    return conv_transpose2d(input.detach().unsqueeze(0), weight, bias, options).squeeze(0);
  STOKE_CHECK(input.dim() == 4, op, "expected input (N, C_in, H, W) or (C_in, H, W), got shape ",
              input.shape());
  STOKE_CHECK(weight.dim() == 4, op, "expected weight (C_in, C_out/groups, kh, kw), got shape ",
              weight.shape());
  const ConvTranspose2dOptions& o = options;
  STOKE_CHECK(o.groups > 0 && input.size(1) % o.groups == 0, op, "input channels ", input.size(1),
              " must be divisible by groups ", o.groups);
  STOKE_CHECK(weight.size(0) == input.size(1), op, "weight of shape ", weight.shape(), " expects ",
              weight.size(0), " input channels (its dim 0), got input of shape ", input.shape());
  std::array<int64_t, 2> out{};
  for (int i = 0; i < 2; ++i) {
    STOKE_CHECK(
        o.stride[i] > 0 && o.dilation[i] > 0 && o.padding[i] >= 0 && o.output_padding[i] >= 0, op,
        "expected positive stride and dilation, non-negative padding and "
        "output_padding");
    // torch also takes output_padding < dilation at stride 1; stoke computes the transposed
    // convolution as a convolution's input gradient, which needs it below the stride.
    STOKE_CHECK(o.output_padding[i] < o.stride[i], op, "output_padding (", o.output_padding[0],
                ", ", o.output_padding[1], ") must be smaller than the stride (", o.stride[0], ", ",
                o.stride[1], ")");
    out[i] = (input.size(2 + i) - 1) * o.stride[i] - 2 * o.padding[i] +
             o.dilation[i] * (weight.size(2 + i) - 1) + o.output_padding[i] + 1;
    STOKE_CHECK(out[i] > 0, op, "the output would be empty: input ", input.shape(), ", weight ",
                weight.shape(), ", padding (", o.padding[0], ", ", o.padding[1], ")");
  }
  const int64_t out_channels = weight.size(1) * o.groups;
  if (bias.defined())
    STOKE_CHECK(bias.dim() == 1 && bias.size(0) == out_channels, op, "expected bias (",
                out_channels, "), got shape ", bias.shape());
  // The input gradient of conv2d(y, weight) at grad_out = input: y only lends its shape.
  const Tensor like = empty({input.size(0), out_channels, out[0], out[1]},
                            {.dtype = input.dtype(), .device = input.device()});
  Tensor y = conv2d_backward_input(input, like, weight, conv_transpose2d_as_conv(o));
  if (bias.defined()) y = add(y, bias.reshape({1, out_channels, 1, 1}));
  return y;
}

}  // namespace stoke::ops
