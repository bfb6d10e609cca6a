// cpu_backend(): the CPU kernels (CpuBackend) behind a decorator that gives them f16 and bf16.
// The CPU has no half-precision arithmetic and its kernels are written for f32 and f64 (see
// core/dtype.h, dispatch_float), so a method that receives an f16/bf16 tensor runs on f32 copies of
// its low-precision operands and its f32 results are rounded back to that dtype: f32 arithmetic on
// values stored in low precision, which is what a GPU's f16/bf16 kernels do (they load, accumulate
// in f32 and round on store). This is what lets autocast (autograd/autocast.h) run on CPU tensors;
// it costs two conversions per low-precision operand, which is why CPU mixed precision is slower
// than f32 here. In-place methods run on an f32 copy of their target and copy it back.
#include "ops/cpu/backend.h"

#include <string_view>
#include <tuple>
#include <type_traits>

namespace stoke::ops {
namespace cpu {
namespace {

bool is_low(const Tensor& t) {
  return t.defined() && (t.dtype() == DType::f16 || t.dtype() == DType::bf16);
}

// The low-precision dtype of the first f16/bf16 tensor among the arguments, or f32 when none is.
// (The methods taking tensor lists all pass through: see passes_through.)
DType low_dtype_of(const Tensor& t) {
  return is_low(t) ? t.dtype() : DType::f32;
}
template <class T>
DType low_dtype_of(const T&) {
  return DType::f32;
}
template <class... A>
DType low_dtype(const A&... a) {
  DType low = DType::f32;
  ((low = low == DType::f32 ? low_dtype_of(a) : low), ...);
  return low;
}

// Methods that take f16/bf16 natively (copies, fills, the optimizer lists, integer-only ops), and
// batch_norm_forward, whose running statistics are updated in place and must not be copies.
constexpr bool passes_through(std::string_view name) {
  constexpr std::string_view kNative[] = {"fill",
                                          "copy_strided",
                                          "check_index_range",
                                          "one_hot",
                                          "class_targets",
                                          "normalize_u8_nhwc",
                                          "fused_sgd_",
                                          "fused_adam_",
                                          "non_finite_check_and_unscale_",
                                          "zero_",
                                          "sum_of_squares",
                                          "batch_norm_forward",
                                          "crop_flip_normalize_u8_nhwc"};
  for (std::string_view n : kNative)
    if (n == name) return true;
  return false;
}

// The arguments as the f32 kernels get them: f16/bf16 tensors as f32 copies, the rest unchanged.
// `target` is the first tensor argument (an in-place method's target), `target_f32` what the
// kernel got for it.
struct Widened {
  const Tensor* target = nullptr;
  Tensor target_f32;
};
Tensor widen(Widened& w, const Tensor& t) {
  Tensor out = is_low(t) ? t.detach().to(DType::f32) : t;
  if (!w.target) {
    w.target = &t;
    w.target_f32 = out;
  }
  return out;
}
template <class T>
const T& widen(Widened&, const T& v) {
  return v;
}

// Rounds the f32 results back to the operands' low dtype (integer and bool results stay).
void narrow(Tensor& t, DType low) {
  if (t.defined() && t.dtype() == DType::f32) t = t.to(low);
}
void narrow(ValuesIndices& r, DType low) {
  narrow(r.values, low);
}
void narrow(CrossEntropyForward& r, DType low) {
  narrow(r.loss, low);
  narrow(r.lse, low);
}
void narrow(MatmulGrads& r, DType low) {
  narrow(r.grad_a, low);
  narrow(r.grad_b, low);
}
template <class Grads>
requires requires(Grads g) {
  g.grad_input, g.grad_weight, g.grad_bias;
}
void narrow(Grads& r, DType low) {
  narrow(r.grad_input, low);
  narrow(r.grad_weight, low);
  narrow(r.grad_bias, low);
}
void narrow(MaxPool2dResult& r, DType low) {
  narrow(r.output, low);
}
void narrow(BatchNormForward& r, DType low) {
  narrow(r.output, low);
  narrow(r.save_mean, low);
  narrow(r.save_invstd, low);
}
void narrow(GroupNormForward& r, DType low) {
  narrow(r.output, low);
  narrow(r.save_mean, low);
  narrow(r.save_rstd, low);
}
void narrow(DropoutResult& r, DType low) {
  narrow(r.output, low);
  narrow(r.mask, low);
}

template <class F, class... A>
decltype(auto) call_widened(Backend& k, DType low, F&& f, const A&... a) {
  Widened w;
  // Braced initialization evaluates in order, so the target is the first tensor argument.
  std::tuple<decltype(widen(w, a))...> args{widen(w, a)...};
  using R = decltype(std::apply(f, args));
  if constexpr (std::is_void_v<R>) {
    std::apply(f, args);
    if (w.target && is_low(*w.target)) k.copy_strided(*w.target, w.target_f32);
  } else {
    R r = std::apply(f, args);
    narrow(r, low);
    return r;
  }
}

#define STOKE_UNPAREN(...) __VA_ARGS__

struct LowPrecisionCpuBackend final : Backend {
  CpuBackend k;

  Device::Type type() const override { return Device::Type::cpu; }
  void use_device(const char*, Device) const override {}

#define STOKE_WIDENED_FORWARD(ret, name, params, args, family)                              \
  ret name params override {                                                                \
    if constexpr (!passes_through(#name)) {                                                 \
      const DType low = low_dtype(STOKE_UNPAREN args);                                      \
      if (low != DType::f32)                                                                \
        return call_widened(                                                                \
            k, low, [this](const auto&... w) { return k.name(w...); }, STOKE_UNPAREN args); \
    }                                                                                       \
    return k.name args;                                                                     \
  }
  STOKE_BACKEND_METHODS(STOKE_WIDENED_FORWARD)
#undef STOKE_WIDENED_FORWARD
};

#undef STOKE_UNPAREN

}  // namespace
}  // namespace cpu

Backend& cpu_backend() {
  // No state: a function-local static needs no registration order.
  static cpu::LowPrecisionCpuBackend backend;
  return backend;
}

}  // namespace stoke::ops
