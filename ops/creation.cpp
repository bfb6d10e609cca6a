#include "ops/creation.h"

#include <cmath>
#include <numbers>

#include "ops/backend.h"

#include "core/parallel.h"

namespace stoke {

namespace {

Tensor finish(Tensor t, const TensorOptions& options) {
  if (options.requires_grad) t.set_requires_grad(true);
  return t;
}

// Tensors of values made on the host (arange, random draws) go to their device afterwards: the
// same generator state then gives the same values on every device, and the copy is one transfer.
// The device must exist (its kernels are looked up, which names a missing device or backend).
Tensor on_device(Tensor t, Device d, const char* op) {
  if (d.is_cpu()) return t;
  ops::backend_for(op, d);
  // Non-blocking: the backend stages a small pageable source through pinned memory, so creating
  // a tensor on a device does not wait for the device.
  return t.to(d, /*non_blocking=*/true);
}

}  // namespace

void fill_(const Tensor& t, double value) {
  ops::dispatch("fill_", {&t}).fill(t, value);
}

Tensor full(const Shape& shape, double value, TensorOptions options) {
  Tensor t = empty(shape, {.dtype = options.dtype, .device = options.device});
  fill_(t, value);
  return finish(t, options);
}

Tensor zeros(const Shape& shape, TensorOptions options) {
  return full(shape, 0, options);
}
Tensor ones(const Shape& shape, TensorOptions options) {
  return full(shape, 1, options);
}
Tensor zeros_like(const Tensor& t) {
  return zeros(t.shape(), {.dtype = t.dtype(), .device = t.device()});
}
Tensor ones_like(const Tensor& t) {
  return ones(t.shape(), {.dtype = t.dtype(), .device = t.device()});
}
Tensor full_like(const Tensor& t, double value) {
  return full(t.shape(), value, {.dtype = t.dtype(), .device = t.device()});
}
Tensor scalar_tensor(double value, TensorOptions options) {
  return full({}, value, options);
}

Tensor arange(double start, double end, double step, TensorOptions options) {
  STOKE_CHECK(step != 0, "arange", "step must be nonzero");
  const double span = (end - start) / step;
  const int64_t n = span > 0 ? static_cast<int64_t>(std::ceil(span)) : 0;
  Tensor src = empty({n}, {.dtype = DType::f64});
  double* p = src.data<double>();
  for (int64_t i = 0; i < n; ++i) p[i] = start + static_cast<double>(i) * step;
  Tensor out = empty({n}, {.dtype = options.dtype});
  copy_strided(out, src);
  return finish(on_device(out, options.device, "arange"), options);
}

namespace ops::cpu {

void fill_random(const Tensor& t, bool normal, GeneratorState state) {
  const int64_t n = t.numel();
  dispatch_float(t.dtype(), "rand", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = t.data<T>();
    parallel_for(0, (n + 3) / 4, 1 << 12, [&](int64_t b, int64_t e) {
      for (int64_t block = b; block < e; ++block) {
        const auto r = philox4x32(state.offset + static_cast<uint64_t>(block), 0, state.seed);
        T v[4];
        if (normal) {
          for (int k = 0; k < 2; ++k) {
            // u1 in (0, 1] so log(u1) is finite.
            const double u1 = 1.0 - uint32_to_unit_float(r[2 * k]);
            const double u2 = uint32_to_unit_float(r[2 * k + 1]);
            const double radius = std::sqrt(-2.0 * std::log(u1));
            v[2 * k] = static_cast<T>(radius * std::cos(2 * std::numbers::pi * u2));
            v[2 * k + 1] = static_cast<T>(radius * std::sin(2 * std::numbers::pi * u2));
          }
        } else {
          for (int k = 0; k < 4; ++k) v[k] = static_cast<T>(uint32_to_unit_float(r[k]));
        }
        for (int k = 0; k < 4 && block * 4 + k < n; ++k) p[block * 4 + k] = v[k];
      }
    });
  });
}

}  // namespace ops::cpu

namespace {

Tensor random_tensor(const Shape& shape, bool normal, const TensorOptions& options,
                     Generator* generator, const char* op) {
  Generator& g = generator ? *generator : default_generator();
  const int64_t n = shape.numel();
  const GeneratorState state = g.reserve(static_cast<uint64_t>((n + 3) / 4));
  const DType compute = options.dtype == DType::f64 ? DType::f64 : DType::f32;
  STOKE_CHECK(is_floating(options.dtype), op, "expected a floating dtype, got ", options.dtype);
  Tensor t = empty(shape, {.dtype = compute});
  ops::cpu::fill_random(t, normal, state);
  return on_device(t.to(options.dtype), options.device, op);
}

}  // namespace

Tensor rand(const Shape& shape, TensorOptions options, Generator* generator) {
  return finish(random_tensor(shape, false, options, generator, "rand"), options);
}

Tensor randn(const Shape& shape, TensorOptions options, Generator* generator) {
  return finish(random_tensor(shape, true, options, generator, "randn"), options);
}

Tensor uniform(const Shape& shape, double low, double high, TensorOptions options,
               Generator* generator) {
  STOKE_CHECK(low <= high, "uniform", "expected low <= high, got ", low, " and ", high);
  Tensor t = random_tensor(shape, false, {.dtype = DType::f64}, generator, "uniform");
  double* p = t.data<double>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = low + (high - low) * p[i];
  return finish(on_device(t.to(options.dtype), options.device, "uniform"), options);
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions options,
               Generator* generator) {
  STOKE_CHECK(low < high, "randint", "expected low < high, got ", low, " and ", high);
  Tensor t = random_tensor(shape, false, {.dtype = DType::f64}, generator, "randint");
  double* p = t.data<double>();
  const double range = static_cast<double>(high - low);
  for (int64_t i = 0; i < t.numel(); ++i)
    p[i] = static_cast<double>(
        low + std::min<int64_t>(static_cast<int64_t>(p[i] * range), high - low - 1));
  return finish(on_device(t.to(options.dtype), options.device, "randint"), options);
}

}  // namespace stoke
