// cuda/kernels/creation.cu in cuda/emu against core's CPU conversion (Tensor::to / copy_):
// cast_kernel for every pair of the eight dtypes (4-element vector path and scalar tail, aligned
// and misaligned), cast_strided_kernel for transposed, strided-destination and broadcast copies.
#include <catch2/catch.hpp>

#include "cuda/kernels/creation.h"
#include "ops/creation.h"
#include "test_kernels_util.h"

using namespace stoke;
namespace kt = stoke::kernels_test;

namespace {

const DType kAll[] = {DType::f32, DType::f64, DType::f16, DType::bf16,
                      DType::i32, DType::i64, DType::u8,  DType::boolean};

// Values every dtype can hold (non-negative, below 256, fractions for the floats, zeros for
// bool), converted from f32 to `dtype` by the CPU.
Tensor source(int64_t n, DType dtype, bool mis, uint64_t seed) {
  Generator g(seed);
  Tensor v = uniform({n + 1}, 0, 200, {}, &g);
  float* p = v.data<float>();
  for (int64_t i = 0; i < n + 1; i += 3) p[i] = 0.f;
  if (dtype == DType::boolean) v = v.to(DType::u8).to(DType::boolean);
  return v.to(dtype).narrow(0, mis ? 1 : 0, n);
}

}  // namespace

TEST_CASE("cuda kernels: cast_kernel converts every dtype pair like Tensor::to",
          "[cuda][kernels][cast]") {
  uint64_t seed = 1;
  for (DType from : kAll)
    for (DType to : kAll)
      for (int64_t n : {1, 5, 8, 37})
        for (bool mis : {false, true}) {
          const Tensor src = source(n, from, mis, seed++);
          Tensor dst = kt::output({n}, to, !mis && n % 2 == 1);
          cuda::cast(from, src.data_ptr(), to, dst.data_ptr(), n, nullptr);
          kt::require_equal(dst, src.to(to),
                            detail::str_cat("cast ", from, " -> ", to, " n=", n,
                                            mis ? " misaligned" : " aligned"));
        }
}

TEST_CASE("cuda kernels: cast rounds to nearest even and keeps inf/nan like core/half.h",
          "[cuda][kernels][cast]") {
  // 1 + 2^-11 is a tie between two halves (rounds to even: 1); 1 + 3 * 2^-11 rounds up.
  const Tensor x = from_vector<float>(
      {1.f + 0x1p-11f, 1.f + 3 * 0x1p-11f, 65520.f, -INFINITY, NAN, 1e-8f, 1.f + 0x1p-8f}, {7});
  for (DType to : {DType::f16, DType::bf16}) {
    Tensor dst = empty({7}, {.dtype = to});
    cuda::cast(DType::f32, x.data_ptr(), to, dst.data_ptr(), 7, nullptr);
    kt::require_equal(dst.to(DType::f32), x.to(to).to(DType::f32),
                      detail::str_cat("rounding to ", to));
  }
  Tensor b = empty({7}, {.dtype = DType::boolean});
  cuda::cast(DType::f32, x.data_ptr(), DType::boolean, b.data_ptr(), 7, nullptr);
  kt::require_equal(b, x.to(DType::boolean), "to bool (nan is true)");
}

TEST_CASE("cuda kernels: cast_strided_kernel copies any strides like copy_",
          "[cuda][kernels][cast]") {
  for (DType from : {DType::f32, DType::f16, DType::i64})
    for (DType to : {DType::f32, DType::bf16, DType::i32}) {
      // Transposed source into a contiguous destination (contiguous()).
      const Tensor src = source(35, from, true, 3).view({7, 5}).t();
      Tensor dst = kt::output({5, 7}, to, false);
      const auto off = cuda::make_cast_offsets(src.shape().data(), 2, dst.strides().data(),
                                               src.strides().data());
      cuda::cast_strided(from, src.data_ptr(), to, dst.data_ptr(), off, 35, nullptr);
      Tensor want = empty({5, 7}, {.dtype = to});
      want.copy_(src);
      kt::require_equal(dst, want, detail::str_cat("transposed ", from, " -> ", to));
      // A broadcast row into a strided (every other column) destination.
      const Tensor row = source(4, from, false, 4).view({1, 4}).expand({3, 4});
      Tensor big = kt::output({3, 8}, to, true);
      Tensor view = big.slice(1, 0, 8, 2);
      const Shape rs = broadcast_strides(row.shape(), row.strides(), view.shape());
      const auto off2 =
          cuda::make_cast_offsets(view.shape().data(), 2, view.strides().data(), rs.data());
      cuda::cast_strided(from, row.data_ptr(), to, view.data_ptr(), off2, 12, nullptr);
      Tensor want2 = empty({3, 4}, {.dtype = to});
      want2.copy_(row);
      kt::require_equal(view.contiguous(), want2, detail::str_cat("broadcast ", from, " -> ", to));
      // The untouched odd columns still hold the fill.
      kt::require_equal(big.slice(1, 1, 8, 2).contiguous(),
                        kt::output({3, 4}, to, false).contiguous(), "odd columns untouched");
    }
}

TEST_CASE("cuda kernels: fill_kernel writes a value into any strides like fill_ on the CPU",
          "[cuda][kernels][cast]") {
  // Values every dtype holds (floats also get a halfway case and nan); a filled view leaves the
  // elements between its strides as they were.
  for (DType dtype : kAll) {
    std::vector<double> values = {0.0, 1.0, 2.5, 200.0};
    if (is_floating(dtype)) values.insert(values.end(), {-3.75, 1.0 + 0x1p-11, 1e-8, NAN});
    for (double v : values)
      for (int64_t n : {1, 7, 300}) {
        Tensor dst = kt::output({n}, dtype, n % 2 == 1);
        cuda::fill(dtype, dst.data_ptr(),
                   cuda::make_fill_offsets(dst.shape().data(), 1, dst.strides().data()), n, v,
                   nullptr);
        Tensor want = empty({n}, {.dtype = dtype});
        fill_(want, v);
        kt::require_equal(dst, want, detail::str_cat("fill ", dtype, " n=", n, " value ", v));

        Tensor big = kt::output({3, n + 2}, dtype, false);
        Tensor view = big.slice(1, 1, n + 1).t();  // [n, 3], strides (1, n + 2)
        Tensor expected = big.clone();
        fill_(expected.slice(1, 1, n + 1), v);
        cuda::fill(dtype, view.data_ptr(),
                   cuda::make_fill_offsets(view.shape().data(), 2, view.strides().data()),
                   view.numel(), v, nullptr);
        kt::require_equal(big, expected, detail::str_cat("strided fill ", dtype, " value ", v));
      }
  }
}
