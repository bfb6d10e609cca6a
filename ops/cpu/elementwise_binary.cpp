// Binary elementwise CPU kernels: arithmetic, comparisons and where with NumPy broadcasting, the
// in-place updates optimizers use, and the backward kernels of binary ops. The entry points
// (ops/elementwise.cpp) have checked dtypes, broadcasting and in-place targets.
#include <cstring>
#include <type_traits>

#include "ops/check.h"
#include "ops/cpu/backend.h"
#include "ops/cpu/elementwise_kernels.h"
#include "ops/creation.h"
#include "ops/elementwise.h"

namespace stoke::ops::cpu {

namespace {

// out = f(a, b) over the broadcast shape. Float: f32/f64 only; otherwise the numeric dtypes.
template <bool Float, class F>
Tensor binary_kernel(const char* op, const Tensor& a, const Tensor& b, F f) {
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), op);
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
Tensor binary_scalar_kernel(const char* op, const Tensor& a, double s, F f) {
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
Tensor compare_kernel(const char* op, const Tensor& a, const Tensor& b, F f) {
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), op);
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
Tensor compare_scalar_kernel(const char* op, const Tensor& a, double s, F f) {
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

// Calls f with the comparison of `op` as a generic lambda.
template <class F>
decltype(auto) with_compare(CompareOp op, F&& f) {
  switch (op) {
    case CompareOp::eq:
      return f("eq", [](auto x, auto y) { return x == y; });
    case CompareOp::ne:
      return f("ne", [](auto x, auto y) { return x != y; });
    case CompareOp::lt:
      return f("lt", [](auto x, auto y) { return x < y; });
    case CompareOp::le:
      return f("le", [](auto x, auto y) { return x <= y; });
    case CompareOp::gt:
      return f("gt", [](auto x, auto y) { return x > y; });
    case CompareOp::ge:
      break;
  }
  return f("ge", [](auto x, auto y) { return x >= y; });
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
// integer kernels (cuda/kernels/elementwise_integer.cu): computed in the unsigned type, since
// signed overflow is undefined in C++. Floating types use their own operators.
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

// Gradient share of `a` in max/min(a, b): 1 where a wins (Win(a, b)), 1/2 on ties, else 0.
template <class Win>
Tensor minmax_backward_kernel(const char* op, const Tensor& grad, const Tensor& a, const Tensor& b,
                              Win win) {
  const Shape shape =
      broadcast_shapes(broadcast_shapes(grad.shape(), a.shape(), op), b.shape(), op);
  Tensor out = empty(shape, {.dtype = grad.dtype()});
  dispatch_float(grad.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    map<T, T, T, T>(out, {grad, a, b},
                    [win](T g, T x, T y) { return win(x, y) ? g : (x == y ? g * T(0.5) : T(0)); });
  });
  return out;
}

}  // namespace

// --- arithmetic -------------------------------------------------------------------------------

Tensor CpuBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = binary_op_name(op);
  switch (op) {
    case BinaryOp::add:
      return binary_kernel<false>(name, a, b, [](auto x, auto y) { return wrap_add(x, y); });
    case BinaryOp::sub:
      return binary_kernel<false>(name, a, b, [](auto x, auto y) { return wrap_sub(x, y); });
    case BinaryOp::mul:
      return binary_kernel<false>(name, a, b, [](auto x, auto y) { return wrap_mul(x, y); });
    case BinaryOp::div:
      return binary_kernel<true>(name, a, b, [](auto x, auto y) { return x / y; });
    case BinaryOp::maximum:
      return binary_kernel<false>(name, a, b, [](auto x, auto y) { return max_nan(x, y); });
    case BinaryOp::minimum:
      break;
  }
  return binary_kernel<false>(name, a, b, [](auto x, auto y) { return min_nan(x, y); });
}

Tensor CpuBackend::binary_scalar(BinaryOp op, const Tensor& a, double s, bool scalar_first) {
  const char* name = binary_op_name(op);
  switch (op) {
    case BinaryOp::add:
      return binary_scalar_kernel<false>(name, a, s, [](auto x, auto c) { return wrap_add(x, c); });
    case BinaryOp::sub:
      if (scalar_first)
        return binary_scalar_kernel<false>(name, a, s,
                                           [](auto x, auto c) { return wrap_sub(c, x); });
      return binary_scalar_kernel<false>(name, a, s, [](auto x, auto c) { return wrap_sub(x, c); });
    case BinaryOp::mul:
      return binary_scalar_kernel<false>(name, a, s, [](auto x, auto c) { return wrap_mul(x, c); });
    case BinaryOp::div:
      if (scalar_first)
        return binary_scalar_kernel<true>(name, a, s, [](auto x, auto c) { return c / x; });
      return binary_scalar_kernel<true>(name, a, s, [](auto x, auto c) { return x / c; });
    case BinaryOp::maximum:
      return binary_scalar_kernel<false>(name, a, s, [](auto x, auto c) { return max_nan(x, c); });
    case BinaryOp::minimum:
      break;
  }
  return binary_scalar_kernel<false>(name, a, s, [](auto x, auto c) { return min_nan(x, c); });
}

// --- comparisons and where --------------------------------------------------------------------

Tensor CpuBackend::compare(CompareOp op, const Tensor& a, const Tensor& b) {
  return with_compare(op, [&](const char* name, auto f) { return compare_kernel(name, a, b, f); });
}

Tensor CpuBackend::compare_scalar(CompareOp op, const Tensor& a, double s) {
  return with_compare(
      op, [&](const char* name, auto f) { return compare_scalar_kernel(name, a, s, f); });
}

Tensor CpuBackend::where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  const Shape shape =
      broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  Tensor out = empty(shape, {.dtype = a.dtype()});
  dispatch_all(a.dtype(), "where", [&](auto tag) {
    using T = typename decltype(tag)::type;
    map<T, bool, T, T>(out, {cond, a, b}, [](bool c, T x, T y) { return c ? x : y; });
  });
  return out;
}

// --- in place ---------------------------------------------------------------------------------

void CpuBackend::binary_(BinaryOp op, const Tensor& t, const Tensor& other, double alpha) {
  const char* name = inplace_op_name(op);
  switch (op) {
    case BinaryOp::add:
      dispatch_numeric(t.dtype(), name, [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T a = scalar_as<T>(alpha, name);
        if (alpha == 1)
          map<T, T, T>(t, {t, other}, [](T x, T y) { return wrap_add(x, y); });
        else
          map<T, T, T>(t, {t, other}, [a](T x, T y) { return wrap_add(x, wrap_mul(a, y)); });
      });
      return;
    case BinaryOp::sub:
      dispatch_numeric(t.dtype(), name, [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T a = scalar_as<T>(alpha, name);
        if (alpha == 1)
          map<T, T, T>(t, {t, other}, [](T x, T y) { return wrap_sub(x, y); });
        else
          map<T, T, T>(t, {t, other}, [a](T x, T y) { return wrap_sub(x, wrap_mul(a, y)); });
      });
      return;
    case BinaryOp::mul:  // alpha is for add/sub only
      dispatch_numeric(t.dtype(), name, [&](auto tag) {
        using T = typename decltype(tag)::type;
        map<T, T, T>(t, {t, other}, [](T x, T y) { return wrap_mul(x, y); });
      });
      return;
    case BinaryOp::div:
      dispatch_float(t.dtype(), name, [&](auto tag) {
        using T = typename decltype(tag)::type;
        map<T, T, T>(t, {t, other}, [](T x, T y) { return x / y; });
      });
      return;
    case BinaryOp::maximum:
    case BinaryOp::minimum:
      dispatch_numeric(t.dtype(), name, [&](auto tag) {
        using T = typename decltype(tag)::type;
        if (op == BinaryOp::maximum)
          map<T, T, T>(t, {t, other}, [](T x, T y) { return max_nan(x, y); });
        else
          map<T, T, T>(t, {t, other}, [](T x, T y) { return min_nan(x, y); });
      });
      return;
  }
}

void CpuBackend::binary_scalar_(BinaryOp op, const Tensor& t, double s) {
  const char* name = inplace_op_name(op);
  if (op == BinaryOp::div) {
    dispatch_float(t.dtype(), name, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T c = static_cast<T>(s);
      map<T, T>(t, {t}, [c](T x) { return x / c; });
    });
    return;
  }
  dispatch_numeric(t.dtype(), name, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T c = scalar_as<T>(s, name);
    switch (op) {
      case BinaryOp::add:
        map<T, T>(t, {t}, [c](T x) { return wrap_add(x, c); });
        break;
      case BinaryOp::sub:
        map<T, T>(t, {t}, [c](T x) { return wrap_sub(x, c); });
        break;
      case BinaryOp::mul:
        map<T, T>(t, {t}, [c](T x) { return wrap_mul(x, c); });
        break;
      case BinaryOp::maximum:
        map<T, T>(t, {t}, [c](T x) { return max_nan(x, c); });
        break;
      case BinaryOp::minimum:
        map<T, T>(t, {t}, [c](T x) { return min_nan(x, c); });
        break;
      case BinaryOp::div:  // above
        break;
    }
  });
}

void CpuBackend::lerp_(const Tensor& t, const Tensor& end, double weight) {
  dispatch_float(t.dtype(), "lerp_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T w = static_cast<T>(weight);
    map<T, T, T>(t, {t, end}, [w](T x, T e) { return x + w * (e - x); });
  });
}

// Fused on the CPU (one pass, no temporary, and the rounding of v * p * q, v * p / q); the CUDA
// backend composes binary and binary_.
void CpuBackend::addcmul_(const Tensor& t, const Tensor& a, const Tensor& b, double value) {
  dispatch_numeric(t.dtype(), "addcmul_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T v = scalar_as<T>(value, "addcmul_");
    map<T, T, T, T>(t, {t, a, b},
                    [v](T x, T p, T q) { return wrap_add(x, wrap_mul(wrap_mul(v, p), q)); });
  });
}

void CpuBackend::addcdiv_(const Tensor& t, const Tensor& a, const Tensor& b, double value) {
  dispatch_float(t.dtype(), "addcdiv_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T v = static_cast<T>(value);
    map<T, T, T, T>(t, {t, a, b}, [v](T x, T p, T q) { return x + v * p / q; });
  });
}

// A memset where t is contiguous.
void CpuBackend::zero_(const Tensor& t) {
  if (t.is_contiguous()) {
    std::memset(t.data_ptr(), 0, t.numel() * t.element_size());
    return;
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
}

// --- backward kernels of binary ops -----------------------------------------------------------

Tensor CpuBackend::div_backward_other(const Tensor& grad, const Tensor& a, const Tensor& b) {
  const Shape shape = broadcast_shapes(broadcast_shapes(grad.shape(), a.shape(), "div_backward"),
                                       b.shape(), "div_backward");
  Tensor out = empty(shape, {.dtype = grad.dtype()});
  dispatch_float(grad.dtype(), "div_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    map<T, T, T, T>(out, {grad, a, b}, [](T g, T x, T y) { return -g * x / (y * y); });
  });
  return out;
}

Tensor CpuBackend::minmax_backward(bool max, const Tensor& grad, const Tensor& a, const Tensor& b) {
  if (max)
    return minmax_backward_kernel("maximum_backward", grad, a, b,
                                  [](auto x, auto y) { return x > y; });
  return minmax_backward_kernel("minimum_backward", grad, a, b,
                                [](auto x, auto y) { return x < y; });
}

Tensor CpuBackend::where_backward(const Tensor& grad, const Tensor& cond, bool for_a) {
  const Shape shape = broadcast_shapes(grad.shape(), cond.shape(), "where_backward");
  Tensor out = empty(shape, {.dtype = grad.dtype()});
  dispatch_float(grad.dtype(), "where_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    map<T, T, bool>(out, {grad, cond}, [for_a](T g, bool c) { return c == for_a ? g : T(0); });
  });
  return out;
}

}  // namespace stoke::ops::cpu
