// Binary elementwise CPU kernels: arithmetic, comparisons and where with NumPy broadcasting, the
// in-place updates optimizers use, and the backward kernels of binary ops.
#include <cstring>
#include <string_view>
#include <type_traits>

#include "ops/check.h"
#include "ops/cpu/elementwise_kernels.h"
#include "ops/creation.h"
#include "ops/backend.h"
#include "ops/elementwise.h"

namespace stoke::ops {

namespace {

using cpu::map;
using cpu::scalar_as;

// Checks two operands of a binary op and returns their broadcast shape.
Shape binary_shape(const char* op, const Tensor& a, const Tensor& b) {
  check_same_device(op, {&a, &b});
  check_same_dtype(op, a, "a", b, "b");
  return broadcast_shapes(a.shape(), b.shape(), op);
}

// out = f(a, b) over the broadcast shape. Float: f32/f64 only; otherwise the numeric dtypes.
template <bool Float, class F>
Tensor binary(const char* op, BinaryOp kind, const Tensor& a, const Tensor& b, F f) {
  if (auto* k = device_dispatch(op, {&a, &b})) return k->binary(kind, a, b);
  const Shape shape = binary_shape(op, a, b);
  Tensor out = empty(shape, {.dtype = a.dtype()});
  auto body = [&](auto tag) {
    using T = typename decltype(tag)::type;
    map<T, T, T>(out, {a, b}, [f](T x, T y) { return static_cast<T>(f(x, y)); });
  };
  if constexpr (Float)
    dispatch_float(a.dtype(), op, body);
  else
    dispatch_numeric(a.dtype(), op, body);
  return out;
}

// out = f(a, s) with s converted to a's dtype.
template <bool Float, class F>
Tensor binary_scalar(const char* op, BinaryOp kind, bool scalar_first, const Tensor& a, double s,
                     F f) {
  if (auto* k = device_dispatch(op, {&a})) return k->binary_scalar(kind, a, s, scalar_first);
  check_cpu(op, {&a});
  Tensor out = empty(a.shape(), {.dtype = a.dtype()});
  auto body = [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T c = scalar_as<T>(s, op);
    map<T, T>(out, {a}, [f, c](T x) { return static_cast<T>(f(x, c)); });
  };
  if constexpr (Float)
    dispatch_float(a.dtype(), op, body);
  else
    dispatch_numeric(a.dtype(), op, body);
  return out;
}

// Comparisons also accept bool tensors.
template <class F>
decltype(auto) dispatch_compare(DType t, const char* op, F&& f) {
  if (t == DType::boolean) return f(TypeTag<bool>{});
  return dispatch_numeric(t, op, f);
}

template <class F>
Tensor compare(const char* op, CompareOp kind, const Tensor& a, const Tensor& b, F f) {
  if (auto* k = device_dispatch(op, {&a, &b})) {
    check_same_dtype(op, a, "a", b, "b");
    return k->compare(kind, a, b);
  }
  const Shape shape = binary_shape(op, a, b);
  Tensor out = empty(shape, {.dtype = DType::boolean});
  dispatch_compare(a.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    map<bool, T, T>(out, {a, b}, [f](T x, T y) { return static_cast<bool>(f(x, y)); });
  });
  return out;
}

// Floating tensors compare with the scalar rounded to their dtype (as torch does); integer
// tensors compare exactly in double, so lt(i, 0.5) means i < 0.5.
template <class F>
Tensor compare_scalar(const char* op, CompareOp kind, const Tensor& a, double s, F f) {
  if (auto* k = device_dispatch(op, {&a})) return k->compare_scalar(kind, a, s);
  check_cpu(op, {&a});
  Tensor out = empty(a.shape(), {.dtype = DType::boolean});
  dispatch_compare(a.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<T>) {
      const T c = static_cast<T>(s);
      map<bool, T>(out, {a}, [f, c](T x) { return static_cast<bool>(f(x, c)); });
    } else {
      map<bool, T>(out, {a}, [f, s](T x) { return static_cast<bool>(f(double(x), s)); });
    }
  });
  return out;
}

// Elementwise max/min that propagate NaN like torch.maximum.
template <class T>
T max_nan(T x, T y) {
  if constexpr (std::is_floating_point_v<T>)
    if (x != x || y != y) return x + y;
  return x > y ? x : y;
}
template <class T>
T min_nan(T x, T y) {
  if constexpr (std::is_floating_point_v<T>)
    if (x != x || y != y) return x + y;
  return x < y ? x : y;
}

// Integer add/sub/mul wrap around on overflow (two's complement), as in torch and in the CUDA
// integer kernels (cuda/kernels/integer.cu): computed in the unsigned type, since signed overflow
// is undefined in C++. Floating types use their own operators.
template <class T>
T wrap_add(T x, T y) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(x) + static_cast<U>(y)));
  } else {
    return static_cast<T>(x + y);
  }
}
template <class T>
T wrap_sub(T x, T y) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(x) - static_cast<U>(y)));
  } else {
    return static_cast<T>(x - y);
  }
}
template <class T>
T wrap_mul(T x, T y) {
  if constexpr (std::is_integral_v<T>) {
    // u8 * u8 promotes to int and cannot overflow it; wider types multiply as unsigned.
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(x) * static_cast<U>(y)));
  } else {
    return static_cast<T>(x * y);
  }
}

// Device-independent checks of an in-place op with tensor operands (same device: checked by
// device_dispatch).
void check_inplace_operands(const char* op, const Tensor& t,
                            std::initializer_list<const Tensor*> others) {
  check_inplace_target(op, t);
  for (const Tensor* o : others) {
    check_same_dtype(op, t, "self", *o, "other");
    cpu::check_broadcasts_to(op, *o, t.shape());
  }
}

// The device's kernels for an in-place op with tensor operands (null on the CPU), after the checks
// every device shares.
Backend* inplace_dispatch(const char* op, const Tensor& t, const Tensor& a,
                                const Tensor* b = nullptr) {
  Backend* k = device_dispatch(op, {&t, &a, b});
  if (b)
    check_inplace_operands(op, t, {&a, b});
  else
    check_inplace_operands(op, t, {&a});
  return k;
}

// The same for an in-place op with a scalar operand.
Backend* inplace_dispatch(const char* op, const Tensor& t) {
  Backend* k = device_dispatch(op, {&t});
  check_inplace_target(op, t);
  return k;
}

}  // namespace

// --- arithmetic -------------------------------------------------------------------------------

Tensor add(const Tensor& a, const Tensor& b) {
  return binary<false>("add", BinaryOp::add, a, b, [](auto x, auto y) { return wrap_add(x, y); });
}
Tensor add(const Tensor& a, double s) {
  return binary_scalar<false>("add", BinaryOp::add, false, a, s,
                              [](auto x, auto c) { return wrap_add(x, c); });
}
Tensor sub(const Tensor& a, const Tensor& b) {
  return binary<false>("sub", BinaryOp::sub, a, b, [](auto x, auto y) { return wrap_sub(x, y); });
}
Tensor sub(const Tensor& a, double s) {
  return binary_scalar<false>("sub", BinaryOp::sub, false, a, s,
                              [](auto x, auto c) { return wrap_sub(x, c); });
}
Tensor sub(double s, const Tensor& a) {
  return binary_scalar<false>("sub", BinaryOp::sub, true, a, s,
                              [](auto x, auto c) { return wrap_sub(c, x); });
}
Tensor mul(const Tensor& a, const Tensor& b) {
  return binary<false>("mul", BinaryOp::mul, a, b, [](auto x, auto y) { return wrap_mul(x, y); });
}
Tensor mul(const Tensor& a, double s) {
  return binary_scalar<false>("mul", BinaryOp::mul, false, a, s,
                              [](auto x, auto c) { return wrap_mul(x, c); });
}
Tensor div(const Tensor& a, const Tensor& b) {
  return binary<true>("div", BinaryOp::div, a, b, [](auto x, auto y) { return x / y; });
}
Tensor div(const Tensor& a, double s) {
  return binary_scalar<true>("div", BinaryOp::div, false, a, s,
                             [](auto x, auto c) { return x / c; });
}
Tensor div(double s, const Tensor& a) {
  return binary_scalar<true>("div", BinaryOp::div, true, a, s,
                             [](auto x, auto c) { return c / x; });
}
Tensor maximum(const Tensor& a, const Tensor& b) {
  return binary<false>("maximum", BinaryOp::maximum, a, b,
                       [](auto x, auto y) { return max_nan(x, y); });
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  return binary<false>("minimum", BinaryOp::minimum, a, b,
                       [](auto x, auto y) { return min_nan(x, y); });
}

// --- comparisons ------------------------------------------------------------------------------

Tensor eq(const Tensor& a, const Tensor& b) {
  return compare("eq", CompareOp::eq, a, b, [](auto x, auto y) { return x == y; });
}
Tensor ne(const Tensor& a, const Tensor& b) {
  return compare("ne", CompareOp::ne, a, b, [](auto x, auto y) { return x != y; });
}
Tensor lt(const Tensor& a, const Tensor& b) {
  return compare("lt", CompareOp::lt, a, b, [](auto x, auto y) { return x < y; });
}
Tensor le(const Tensor& a, const Tensor& b) {
  return compare("le", CompareOp::le, a, b, [](auto x, auto y) { return x <= y; });
}
Tensor gt(const Tensor& a, const Tensor& b) {
  return compare("gt", CompareOp::gt, a, b, [](auto x, auto y) { return x > y; });
}
Tensor ge(const Tensor& a, const Tensor& b) {
  return compare("ge", CompareOp::ge, a, b, [](auto x, auto y) { return x >= y; });
}
Tensor eq(const Tensor& a, double s) {
  return compare_scalar("eq", CompareOp::eq, a, s, [](auto x, auto y) { return x == y; });
}
Tensor ne(const Tensor& a, double s) {
  return compare_scalar("ne", CompareOp::ne, a, s, [](auto x, auto y) { return x != y; });
}
Tensor lt(const Tensor& a, double s) {
  return compare_scalar("lt", CompareOp::lt, a, s, [](auto x, auto y) { return x < y; });
}
Tensor le(const Tensor& a, double s) {
  return compare_scalar("le", CompareOp::le, a, s, [](auto x, auto y) { return x <= y; });
}
Tensor gt(const Tensor& a, double s) {
  return compare_scalar("gt", CompareOp::gt, a, s, [](auto x, auto y) { return x > y; });
}
Tensor ge(const Tensor& a, double s) {
  return compare_scalar("ge", CompareOp::ge, a, s, [](auto x, auto y) { return x >= y; });
}

// --- where ------------------------------------------------------------------------------------

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  STOKE_CHECK(cond.dtype() == DType::boolean, "where", "expected cond of dtype bool, got ",
              cond.dtype());
  check_same_dtype("where", a, "a", b, "b");
  const Shape shape =
      broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  if (auto* k = device_dispatch("where", {&cond, &a, &b})) return k->where(cond, a, b);
  check_same_device("where", {&cond, &a, &b});
  Tensor out = empty(shape, {.dtype = a.dtype()});
  dispatch_all(a.dtype(), "where", [&](auto tag) {
    using T = typename decltype(tag)::type;
    map<T, bool, T, T>(out, {cond, a, b}, [](bool c, T x, T y) { return c ? x : y; });
  });
  return out;
}

// --- in place ---------------------------------------------------------------------------------

Tensor add_(const Tensor& t, const Tensor& other, double alpha) {
  if (auto* k = inplace_dispatch("add_", t, other)) {
    k->binary_(BinaryOp::add, t, other, alpha);
    return t;
  }
  dispatch_numeric(t.dtype(), "add_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T a = scalar_as<T>(alpha, "add_");
    if (alpha == 1)
      map<T, T, T>(t, {t, other}, [](T x, T y) { return wrap_add(x, y); });
    else
      map<T, T, T>(t, {t, other}, [a](T x, T y) { return wrap_add(x, wrap_mul(a, y)); });
  });
  return t;
}

Tensor add_(const Tensor& t, double s) {
  if (auto* k = inplace_dispatch("add_", t)) {
    k->binary_scalar_(BinaryOp::add, t, s);
    return t;
  }
  dispatch_numeric(t.dtype(), "add_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T c = scalar_as<T>(s, "add_");
    map<T, T>(t, {t}, [c](T x) { return wrap_add(x, c); });
  });
  return t;
}

Tensor sub_(const Tensor& t, const Tensor& other, double alpha) {
  if (auto* k = inplace_dispatch("sub_", t, other)) {
    k->binary_(BinaryOp::sub, t, other, alpha);
    return t;
  }
  dispatch_numeric(t.dtype(), "sub_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T a = scalar_as<T>(alpha, "sub_");
    if (alpha == 1)
      map<T, T, T>(t, {t, other}, [](T x, T y) { return wrap_sub(x, y); });
    else
      map<T, T, T>(t, {t, other}, [a](T x, T y) { return wrap_sub(x, wrap_mul(a, y)); });
  });
  return t;
}

Tensor sub_(const Tensor& t, double s) {
  if (auto* k = inplace_dispatch("sub_", t)) {
    k->binary_scalar_(BinaryOp::sub, t, s);
    return t;
  }
  dispatch_numeric(t.dtype(), "sub_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T c = scalar_as<T>(s, "sub_");
    map<T, T>(t, {t}, [c](T x) { return wrap_sub(x, c); });
  });
  return t;
}

Tensor mul_(const Tensor& t, const Tensor& other) {
  if (auto* k = inplace_dispatch("mul_", t, other)) {
    k->binary_(BinaryOp::mul, t, other, 1.0);
    return t;
  }
  dispatch_numeric(t.dtype(), "mul_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    map<T, T, T>(t, {t, other}, [](T x, T y) { return wrap_mul(x, y); });
  });
  return t;
}

Tensor mul_(const Tensor& t, double s) {
  if (auto* k = inplace_dispatch("mul_", t)) {
    k->binary_scalar_(BinaryOp::mul, t, s);
    return t;
  }
  dispatch_numeric(t.dtype(), "mul_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T c = scalar_as<T>(s, "mul_");
    map<T, T>(t, {t}, [c](T x) { return wrap_mul(x, c); });
  });
  return t;
}

Tensor div_(const Tensor& t, const Tensor& other) {
  if (auto* k = inplace_dispatch("div_", t, other)) {
    k->binary_(BinaryOp::div, t, other, 1.0);
    return t;
  }
  dispatch_float(t.dtype(), "div_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    map<T, T, T>(t, {t, other}, [](T x, T y) { return x / y; });
  });
  return t;
}

Tensor div_(const Tensor& t, double s) {
  if (auto* k = inplace_dispatch("div_", t)) {
    k->binary_scalar_(BinaryOp::div, t, s);
    return t;
  }
  dispatch_float(t.dtype(), "div_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T c = static_cast<T>(s);
    map<T, T>(t, {t}, [c](T x) { return x / c; });
  });
  return t;
}

Tensor addcmul_(const Tensor& t, const Tensor& a, const Tensor& b, double value) {
  if (auto* k = inplace_dispatch("addcmul_", t, a, &b)) {
    // Two launches on the device: the product (quotient), then the scaled in-place add.
    k->binary_(BinaryOp::add, t, k->binary(BinaryOp::mul, a, b), value);
    return t;
  }
  dispatch_numeric(t.dtype(), "addcmul_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T v = scalar_as<T>(value, "addcmul_");
    map<T, T, T, T>(t, {t, a, b},
                    [v](T x, T p, T q) { return wrap_add(x, wrap_mul(wrap_mul(v, p), q)); });
  });
  return t;
}

Tensor addcdiv_(const Tensor& t, const Tensor& a, const Tensor& b, double value) {
  if (auto* k = inplace_dispatch("addcdiv_", t, a, &b)) {
    // Two launches on the device: the product (quotient), then the scaled in-place add.
    k->binary_(BinaryOp::add, t, k->binary(BinaryOp::div, a, b), value);
    return t;
  }
  dispatch_float(t.dtype(), "addcdiv_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T v = static_cast<T>(value);
    map<T, T, T, T>(t, {t, a, b}, [v](T x, T p, T q) { return x + v * p / q; });
  });
  return t;
}

Tensor zero_(const Tensor& t) {
  if (auto* k = inplace_dispatch("zero_", t)) {
    k->fill(t, 0.0);
    return t;
  }
  if (t.is_contiguous()) {
    std::memset(t.data_ptr(), 0, t.numel() * t.element_size());
    return t;
  }
  // Zero bits are 0 in every dtype: write them through a same-width integer type.
  auto fill = [&](auto zero) {
    using U = decltype(zero);
    map<U>(t, {}, [] { return U(0); });
  };
  switch (t.element_size()) {
    case 1:
      fill(uint8_t{});
      break;
    case 2:
      fill(uint16_t{});
      break;
    case 4:
      fill(uint32_t{});
      break;
    default:
      fill(uint64_t{});
      break;
  }
  return t;
}

Tensor lerp_(const Tensor& t, const Tensor& end, double weight) {
  if (auto* k = inplace_dispatch("lerp_", t, end)) {
    k->lerp_(t, end, weight);
    return t;
  }
  dispatch_float(t.dtype(), "lerp_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T w = static_cast<T>(weight);
    map<T, T, T>(t, {t, end}, [w](T x, T e) { return x + w * (e - x); });
  });
  return t;
}

// --- backward kernels of binary ops -----------------------------------------------------------

Tensor div_backward_other(const Tensor& grad, const Tensor& a, const Tensor& b) {
  Backend* k = device_dispatch("div_backward", {&grad, &a, &b});
  check_same_dtype("div_backward", grad, "grad", a, "a");
  check_same_dtype("div_backward", grad, "grad", b, "b");
  const Shape shape = broadcast_shapes(broadcast_shapes(grad.shape(), a.shape(), "div_backward"),
                                       b.shape(), "div_backward");
  if (k) return k->div_backward_other(grad, a, b);
  Tensor out = empty(shape, {.dtype = grad.dtype()});
  dispatch_float(grad.dtype(), "div_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    map<T, T, T, T>(out, {grad, a, b}, [](T g, T x, T y) { return -g * x / (y * y); });
  });
  return out;
}

namespace {
// Gradient share of `a` in max/min(a, b): 1 where a wins (Win(a, b)), 1/2 on ties, else 0.
template <class Win>
Tensor minmax_backward(const char* op, const Tensor& grad, const Tensor& a, const Tensor& b,
                       Win win) {
  Backend* k = device_dispatch(op, {&grad, &a, &b});
  check_same_dtype(op, grad, "grad", a, "a");
  check_same_dtype(op, grad, "grad", b, "b");
  const Shape shape =
      broadcast_shapes(broadcast_shapes(grad.shape(), a.shape(), op), b.shape(), op);
  if (k) return k->minmax_backward(std::string_view(op) == "maximum_backward", grad, a, b);
  Tensor out = empty(shape, {.dtype = grad.dtype()});
  dispatch_float(grad.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    map<T, T, T, T>(out, {grad, a, b},
                    [win](T g, T x, T y) { return win(x, y) ? g : (x == y ? g * T(0.5) : T(0)); });
  });
  return out;
}
}  // namespace

Tensor maximum_backward(const Tensor& grad, const Tensor& a, const Tensor& b) {
  return minmax_backward("maximum_backward", grad, a, b, [](auto x, auto y) { return x > y; });
}

Tensor minimum_backward(const Tensor& grad, const Tensor& a, const Tensor& b) {
  return minmax_backward("minimum_backward", grad, a, b, [](auto x, auto y) { return x < y; });
}

Tensor where_backward(const Tensor& grad, const Tensor& cond, bool for_a) {
  STOKE_CHECK(cond.dtype() == DType::boolean, "where_backward", "expected cond of dtype bool, got ",
              cond.dtype());
  Backend* k = device_dispatch("where_backward", {&grad, &cond});
  const Shape shape = broadcast_shapes(grad.shape(), cond.shape(), "where_backward");
  if (k) return k->where_backward(grad, cond, for_a);
  Tensor out = empty(shape, {.dtype = grad.dtype()});
  dispatch_float(grad.dtype(), "where_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    map<T, T, bool>(out, {grad, cond}, [for_a](T g, bool c) { return c == for_a ? g : T(0); });
  });
  return out;
}

}  // namespace stoke::ops
