// compare_kernel, compare_scalar_kernel, where_kernel and select_or_zero_kernel
// (cuda/kernels/elementwise_compare.cu) in cuda/emu against the CPU ops: broadcasting,
// non-contiguous operands, NaN, every dtype, and sizes that are not multiples of the 256-thread
// block.
#include <catch2/catch.hpp>

#include <cmath>

#include "core/random.h"
#include "cuda/kernels/elementwise_compare.h"
#include "ops/creation.h"
#include "ops/elementwise.h"

namespace {

using namespace stoke;

// Small integers (so that ties occur) with a NaN for float dtypes, as `dtype`.
Tensor values(const Shape& shape, DType dtype, uint64_t seed) {
  Generator g(seed);
  Tensor v = randint(0, 4, shape, {.dtype = DType::i64}, &g).to(DType::f32);
  if (is_floating(dtype) && v.numel() > 2) fill_(v.view({v.numel()}).select(0, 2), NAN);
  return dtype == DType::boolean ? ops::gt(v, 1.5) : v.to(dtype);
}

bool equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.to(DType::i64).contiguous().to_vector<int64_t>() ==
                                       b.to(DType::i64).contiguous().to_vector<int64_t>();
}

// Same values, NaN matching NaN.
bool same_values(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return false;
  const auto x = a.to(DType::f64).contiguous().to_vector<double>();
  const auto y = b.to(DType::f64).contiguous().to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i)
    if (!(x[i] == y[i] || (std::isnan(x[i]) && std::isnan(y[i])))) return false;
  return true;
}

Tensor run_compare(cuda::CompareOp op, const Tensor& a, const Tensor& b) {
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), "test");
  Tensor out = empty(shape, {.dtype = DType::boolean});
  const Shape as = broadcast_strides(a.shape(), a.strides(), shape);
  const Shape bs = broadcast_strides(b.shape(), b.strides(), shape);
  const int64_t* strides[3] = {out.strides().data(), as.data(), bs.data()};
  const auto offsets =
      cuda::make_strided_offsets<3>("test", shape.data(), static_cast<int>(shape.size()), strides);
  cuda::compare(op, a.dtype(), a.data_ptr(), b.data_ptr(), out.data<bool>(), offsets, out.numel(),
                nullptr);
  return out;
}

}  // namespace

TEST_CASE("cuda kernels: compare_kernel and compare_scalar_kernel match ops::eq..ge",
          "[kernels][compare]") {
  using CmpFn = Tensor (*)(const Tensor&, const Tensor&);
  using CmpScalarFn = Tensor (*)(const Tensor&, double);
  const std::pair<CmpFn, CmpScalarFn> refs[] = {{ops::eq, ops::eq}, {ops::ne, ops::ne},
                                                {ops::lt, ops::lt}, {ops::le, ops::le},
                                                {ops::gt, ops::gt}, {ops::ge, ops::ge}};
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64,
                      DType::u8, DType::boolean}) {
    for (auto [sa, sb] : std::vector<std::pair<Shape, Shape>>{
             {{3, 1, 5}, {4, 5}}, {{300}, {300}}, {{2, 7, 1}, {1, 1, 3}}}) {
      INFO(dtype << " " << sa << " vs " << sb);
      const Tensor a = values(sa, dtype, 1), b = values(sb, dtype, 2);
      for (int k = 0; k < 6; ++k) {
        const auto op = static_cast<cuda::CompareOp>(k);
        // The CPU reference compares f16/bf16 as f32 (the CPU has no half kernels).
        const bool half = dtype == DType::f16 || dtype == DType::bf16;
        const Tensor ra = half ? a.to(DType::f32) : a, rb = half ? b.to(DType::f32) : b;
        CHECK(equal(run_compare(op, a, b), refs[k].first(ra, rb)));
        // A non-contiguous operand against a contiguous one of the same shape.
        const Tensor at = a.transpose(0, -1), b2 = values(at.shape(), dtype, 9);
        CHECK(equal(run_compare(op, at, b2),
                    refs[k].first(ra.transpose(0, -1), half ? b2.to(DType::f32) : b2)));
        Tensor out = empty(a.shape(), {.dtype = DType::boolean});
        const Tensor ac = a.contiguous();
        cuda::compare_scalar(op, dtype, ac.data_ptr(), 1.0, out.data<bool>(), out.numel(), nullptr);
        CHECK(equal(out, refs[k].second(ra, 1.0)));
      }
    }
  }
}

TEST_CASE("cuda kernels: where_kernel selects with broadcasting for every element size",
          "[kernels][compare]") {
  for (DType dtype : {DType::u8, DType::f16, DType::f32, DType::i64}) {
    INFO(dtype);
    const Tensor cond = ops::gt(values({4, 1, 6}, DType::f32, 3), 1.5);
    const Tensor a = values({1, 5, 6}, dtype, 4), b = values({6}, dtype, 5);
    const Shape shape{4, 5, 6};
    Tensor out = empty(shape, {.dtype = dtype});
    const Shape cs = broadcast_strides(cond.shape(), cond.strides(), shape);
    const Shape as = broadcast_strides(a.shape(), a.strides(), shape);
    const Shape bs = broadcast_strides(b.shape(), b.strides(), shape);
    const int64_t* strides[4] = {out.strides().data(), cs.data(), as.data(), bs.data()};
    const auto offsets = cuda::make_strided_offsets<4>("test", shape.data(), 3, strides);
    cuda::where(cond.data<bool>(), a.data_ptr(), b.data_ptr(), out.data_ptr(), a.element_size(),
                offsets, out.numel(), nullptr);
    const bool half = dtype == DType::f16;
    const Tensor want = ops::where(cond, half ? a.to(DType::f32) : a, half ? b.to(DType::f32) : b);
    CHECK(same_values(out, want));
  }
}

TEST_CASE("cuda kernels: select_or_zero_kernel (where's backward) matches ops::where_backward",
          "[kernels][compare]") {
  for (DType dtype : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
    for (auto [sg, sc] : std::vector<std::pair<Shape, Shape>>{
             {{300}, {300}}, {{4, 5, 6}, {4, 1, 6}}, {{5, 1}, {1, 7}}, {{6, 5}, {6, 5}}}) {
      // values() puts a NaN in float grads: where it is dropped the result is 0, as on the CPU.
      Tensor grad = values(sg, dtype, 6);
      if (sg == Shape{6, 5}) grad = values({5, 6}, dtype, 6).t();  // transposed grad
      const Tensor cond = values(sc, DType::boolean, 7);
      const Shape shape = broadcast_shapes(grad.shape(), cond.shape(), "test");
      for (bool keep : {true, false}) {
        INFO(dtype << " " << grad.shape() << " " << sc << " keep " << keep);
        Tensor out = full(shape, 7.0, {.dtype = dtype});
        const Shape gs = broadcast_strides(grad.shape(), grad.strides(), shape);
        const Shape cs = broadcast_strides(cond.shape(), cond.strides(), shape);
        const int64_t* strides[3] = {out.strides().data(), gs.data(), cs.data()};
        const auto offsets = cuda::make_strided_offsets<3>("test", shape.data(),
                                                           static_cast<int>(shape.size()), strides);
        cuda::select_or_zero(cond.data<bool>(), keep, grad.data_ptr(), out.data_ptr(),
                             grad.element_size(), offsets, out.numel(), nullptr);
        const bool half = dtype == DType::f16 || dtype == DType::bf16;
        CHECK(same_values(out, ops::where_backward(half ? grad.to(DType::f32) : grad, cond, keep)));
      }
    }
  }
  const Tensor b = zeros({2}, {.dtype = DType::boolean});
  CHECK_THROWS_WITH(cuda::select_or_zero(b.data<bool>(), true, nullptr, nullptr, 3, {}, 2, nullptr),
                    Catch::Contains("cuda::select_or_zero") && Catch::Contains("got 3"));
}
