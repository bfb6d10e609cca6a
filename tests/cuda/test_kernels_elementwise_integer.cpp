// int_binary_kernel, int_binary_scalar_kernel and int_sum_kernel
// (cuda/kernels/elementwise_integer.cu) in cuda/emu against the CPU ops on i32, i64 and u8
// (wrapping overflow included) and bool sums.
#include <catch2/catch.hpp>

#include "core/random.h"
#include "cuda/kernels/elementwise_integer.h"
#include "ops/creation.h"
#include "ops/elementwise.h"
#include "ops/reduce.h"

namespace {

using namespace stoke;

Tensor ints(const Shape& shape, DType dtype, int64_t lo, int64_t hi, uint64_t seed) {
  Generator g(seed);
  return randint(lo, hi, shape, {.dtype = dtype}, &g);
}

bool equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         a.to(DType::i64).contiguous().to_vector<int64_t>() ==
             b.to(DType::i64).contiguous().to_vector<int64_t>();
}

}  // namespace

TEST_CASE("cuda kernels: int_binary_kernel and int_binary_scalar_kernel match the CPU ops",
          "[kernels][integer]") {
  using Fn = Tensor (*)(const Tensor&, const Tensor&);
  const std::pair<cuda::BinaryOp, Fn> ops_[] = {{cuda::BinaryOp::add, ops::add},
                                                {cuda::BinaryOp::sub, ops::sub},
                                                {cuda::BinaryOp::mul, ops::mul},
                                                {cuda::BinaryOp::maximum, ops::maximum},
                                                {cuda::BinaryOp::minimum, ops::minimum}};
  for (DType dtype : {DType::i32, DType::i64, DType::u8}) {
    const int64_t hi = dtype == DType::u8 ? 256 : 100000;  // u8 products wrap
    const Tensor a = ints({3, 1, 300}, dtype, 0, hi, 1), b = ints({4, 300}, dtype, 0, hi, 2);
    const Shape shape{3, 4, 300};
    const Shape as = broadcast_strides(a.shape(), a.strides(), shape);
    const Shape bs = broadcast_strides(b.shape(), b.strides(), shape);
    for (const auto& [op, ref] : ops_) {
      INFO(dtype << " op " << static_cast<int>(op));
      Tensor out = empty(shape, {.dtype = dtype});
      const auto offsets =
          cuda::make_binary_offsets(shape.data(), 3, out.strides().data(), as.data(), bs.data());
      cuda::int_binary(op, dtype, a.data_ptr(), b.data_ptr(), out.data_ptr(), offsets, out.numel(),
                       1, nullptr);
      CHECK(equal(out, ref(a, b)));
      Tensor so = empty(a.shape(), {.dtype = dtype});
      cuda::int_binary_scalar(op, dtype, a.data_ptr(), 7, so.data_ptr(), a.numel(), true, nullptr);
      CHECK(equal(so, ref(full(a.shape(), 7, {.dtype = dtype}), a)));
    }
    // add with alpha (the in-place add_(t, other, alpha) form).
    Tensor out = empty(shape, {.dtype = dtype});
    const auto offsets =
        cuda::make_binary_offsets(shape.data(), 3, out.strides().data(), as.data(), bs.data());
    cuda::int_binary(cuda::BinaryOp::add, dtype, a.data_ptr(), b.data_ptr(), out.data_ptr(),
                     offsets, out.numel(), 3, nullptr);
    CHECK(equal(out, ops::add(a, ops::mul(b, 3.0))));
  }
  CHECK_THROWS_WITH(cuda::int_binary_scalar(cuda::BinaryOp::div, DType::i64, nullptr, 1, nullptr, 1,
                                            false, nullptr),
                    Catch::Contains("not an integer op"));
}

TEST_CASE("cuda kernels: int_sum_kernel sums integers and bools exactly into i64",
          "[kernels][integer]") {
  for (DType dtype : {DType::i32, DType::i64, DType::u8, DType::boolean}) {
    for (auto [outer, n, inner] :
         {std::tuple<int64_t, int64_t, int64_t>{1, 1000, 1}, {3, 37, 5}, {2, 0, 3}, {4, 513, 2}}) {
      INFO(dtype << " " << outer << "x" << n << "x" << inner);
      const Tensor x = dtype == DType::boolean
                           ? ops::gt(ints({outer, n, inner}, DType::i64, 0, 2, 3), 0.5)
                           : ints({outer, n, inner}, dtype, 0, 200, 3);
      Tensor out = full({outer, inner}, -1, {.dtype = DType::i64});
      if (n > 0) {
        cuda::int_sum(dtype, x.data_ptr(), out.data<int64_t>(), outer, n, inner, nullptr);
        CHECK(equal(out, ops::sum(x, {1})));
      }
    }
  }
}
