// Creating tensors. These make leaves (requires_grad via TensorOptions) and live in namespace
// stoke directly: zeros({2, 3}), randn({64, 3, 32, 32}, {.dtype = DType::f64}).
#pragma once

#include <vector>

#include "core/random.h"
#include "core/tensor.h"

namespace stoke {

Tensor zeros(const Shape& shape, TensorOptions options = {});
Tensor ones(const Shape& shape, TensorOptions options = {});
Tensor full(const Shape& shape, double value, TensorOptions options = {});
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);
// Scalar (0-dim) tensor.
Tensor scalar_tensor(double value, TensorOptions options = {});
// [start, end) in steps of `step`, like torch.arange (default dtype i64 for whole numbers is not
// guessed: pass .dtype; f32 by default).
Tensor arange(double start, double end, double step = 1, TensorOptions options = {});
inline Tensor arange(double end, TensorOptions options = {}) {
  return arange(0, end, 1, options);
}
// Uniform in [0, 1) and standard normal, from `generator` (the default generator if null).
Tensor rand(const Shape& shape, TensorOptions options = {}, Generator* generator = nullptr);
Tensor randn(const Shape& shape, TensorOptions options = {}, Generator* generator = nullptr);
// Uniform in [low, high).
Tensor uniform(const Shape& shape, double low, double high, TensorOptions options = {},
               Generator* generator = nullptr);
// Random integers in [low, high) (dtype i64 unless given).
Tensor randint(int64_t low, int64_t high, const Shape& shape,
               TensorOptions options = {.dtype = DType::i64}, Generator* generator = nullptr);

// A tensor holding a copy of `values` (converted to options.dtype) with the given shape.
template <class T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, TensorOptions options = {});

// Fills in place (no autograd).
void fill_(const Tensor& t, double value);

namespace ops::cpu {
// Fills a contiguous f32/f64 buffer of n values with uniform [0,1) (normal=false) or N(0,1), from
// Philox (seed, first block): value i uses block first + i / 4, output i % 4 (normals: Box-Muller
// on the block's two pairs).
void fill_random(const Tensor& t, bool normal, GeneratorState state);
}  // namespace ops::cpu

template <class T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, TensorOptions options) {
  STOKE_CHECK(static_cast<int64_t>(values.size()) == shape.numel(), "from_vector", "got ",
              values.size(), " values for shape ", shape, " (", shape.numel(), " elements)");
  Tensor src = empty(shape, {.dtype = dtype_of<T>()});
  std::copy(values.begin(), values.end(), src.template data<T>());
  Tensor out = empty(shape, {.dtype = options.dtype, .device = options.device});
  copy_strided(out, src);
  if (options.requires_grad) out.set_requires_grad(true);
  return out;
}

}  // namespace stoke
