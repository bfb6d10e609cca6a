// cuda/kernels/index.cu and normalize.cu in cuda/emu against ops::cat, index_select, embedding,
// gather and their backward kernels: cat_copy_kernel, index_select_kernel, index_add_kernel (after
// index_fill_kernel zeroes the gradient),
// gather_kernel, gather_backward_kernel, check_indices_kernel, and the loader's fused
// normalize_nhwc_to_nchw_kernel against the literal formula.
#include <catch2/catch.hpp>

#include "cuda/kernels/index.h"
#include "cuda/kernels/normalize.h"
#include "ops/creation.h"
#include "ops/elementwise.h"
#include "ops/index.h"
#include "ops/normalize.h"
#include "test_kernels_util.h"

using namespace stoke;
namespace kt = stoke::kernels_test;

namespace {
// Backward scatters accumulate with atomicAdd in the output dtype, in the thread schedule's
// order: each of the k - 1 adds into an element rounds to the dtype (within u_d of a partial sum,
// |partial| <= sum |g|; u_d = 2^-24, 2^-11, 2^-8), so the result is within (k - 1) u_d sum |g| of
// the exact sum, which the reference (f32, rounded once) is within u_d |sum| of: kt::tol's
// rounding and (k - 1) u_d sum |g| on top. abs_sum is the largest sum |g| over the elements.
kt::Tolerance scatter_tol(DType dtype, int64_t k, double abs_sum) {
  const double u_d = dtype == DType::f16 ? 0x1p-11 : dtype == DType::bf16 ? 0x1p-8 : kt::kU;
  kt::Tolerance t = kt::tol(dtype);
  t.atol += static_cast<double>(k - 1) * u_d * abs_sum;
  return t;
}

// The largest element of t (f64).
double max_of(const Tensor& t) {
  double m = 0;
  for (double v : t.to(DType::f64).contiguous().to_vector<double>()) m = std::max(m, v);
  return m;
}
}  // namespace

TEST_CASE("cuda kernels: cat_copy_kernel concatenates like ops::cat", "[cuda][kernels][index]") {
  uint64_t seed = 1;
  for (DType dtype : {DType::f32, DType::f16, DType::i64, DType::u8})
    for (int64_t dim : {0, 1, 2}) {
      std::vector<Tensor> ins;
      for (int64_t k : {3, 1, 4}) {
        Shape s = {2, 5, 3};
        s[static_cast<size_t>(dim)] = k;
        ins.push_back(kt::input(s, DType::f32, seed % 2 == 0, 0, 100, seed).to(dtype));
        ++seed;
      }
      const Tensor want = ops::cat(ins, dim);
      Tensor out = kt::output(want.shape(), dtype, true);
      int64_t outer = 1, inner = 1;
      for (int64_t d = 0; d < dim; ++d) outer *= want.size(d);
      for (int64_t d = dim + 1; d < 3; ++d) inner *= want.size(d);
      std::vector<const void*> ptrs;
      std::vector<int64_t> sizes;
      for (const Tensor& t : ins) {
        ptrs.push_back(t.data_ptr());
        sizes.push_back(t.size(dim));
      }
      cuda::cat(dtype_size(dtype), 3, ptrs.data(), sizes.data(), outer, inner, out.data_ptr(),
                nullptr);
      kt::require_equal(out, want, detail::str_cat("cat ", dtype, " dim ", dim));
    }
}

TEST_CASE("cuda kernels: index_select_kernel and index_add_kernel match ops::",
          "[cuda][kernels][index]") {
  const Tensor index = from_vector<int64_t>({6, 0, 0, 3, 6}, {5}, {.dtype = DType::i64});
  for (DType dtype : {DType::f32, DType::f16, DType::bf16, DType::i64})
    for (int64_t dim : {0, 1, 2}) {
      const Tensor x = kt::input({7, 7, 7}, DType::f32, true, -3, 3, 10 + dim).to(dtype);
      const Tensor want = ops::index_select(x, dim, index);
      Tensor out = kt::output(want.shape(), dtype, false);
      const int64_t outer = dim == 0 ? 1 : (dim == 1 ? 7 : 49);
      const int64_t inner = dim == 2 ? 1 : (dim == 1 ? 7 : 49);
      cuda::index_select(dtype_size(dtype), x.data_ptr(), index.data<int64_t>(), out.data_ptr(),
                         outer, 7, 5, inner, nullptr);
      const std::string what = detail::str_cat("index_select ", dtype, " dim ", dim);
      kt::require_equal(out, want, what);
      if (!is_floating(dtype)) continue;
      // Backward: repeated indices accumulate (6 and 0 twice).
      const Tensor g = kt::input(want.shape(), dtype, false, -1, 1, 20 + dim);
      Tensor gin = kt::output({7, 7, 7}, dtype, true);
      cuda::index_select_backward(dtype, g.data_ptr(), index.data<int64_t>(), gin.data_ptr(), outer,
                                  7, 5, inner, nullptr);
      const Tensor want_g = ops::index_select_backward(g.to(DType::f32), dim, index, {7, 7, 7});
      const double abs_sum =
          max_of(ops::index_select_backward(ops::abs(g.to(DType::f32)), dim, index, {7, 7, 7}));
      kt::require_close(gin.to(DType::f32), kt::rounded(want_g, dtype),
                        scatter_tol(dtype, 2, abs_sum), what + " backward");  // 6 and 0 twice
    }
}

TEST_CASE("cuda kernels: embedding forward and backward match ops::", "[cuda][kernels][index]") {
  const Tensor indices = from_vector<int64_t>({1, 9, 1, 0, 4, 9}, {2, 3}, {.dtype = DType::i64});
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    const Tensor w = kt::input({10, 6}, dtype, true, -1, 1, 3);
    const Tensor want = ops::embedding(w, indices);
    Tensor out = kt::output({2, 3, 6}, dtype, false);
    cuda::embedding(dtype_size(dtype), w.data_ptr(), indices.data<int64_t>(), out.data_ptr(), 6, 10,
                    6, nullptr);
    kt::require_equal(out, want, detail::str_cat("embedding ", dtype));
    const Tensor g = kt::input({2, 3, 6}, dtype, false, -1, 1, 4);
    Tensor gw = kt::output({10, 6}, dtype, true);
    cuda::embedding_backward(dtype, g.data_ptr(), indices.data<int64_t>(), gw.data_ptr(), 6, 10, 6,
                             nullptr);
    const double abs_sum = max_of(ops::embedding_backward(ops::abs(g.to(DType::f32)), indices, 10));
    kt::require_close(gw.to(DType::f32),
                      kt::rounded(ops::embedding_backward(g.to(DType::f32), indices, 10), dtype),
                      scatter_tol(dtype, 2, abs_sum),  // 1 and 9 twice
                      detail::str_cat("embedding_backward ", dtype));
  }
}

TEST_CASE("cuda kernels: gather_kernel and gather_backward_kernel match ops::",
          "[cuda][kernels][index]") {
  const Shape xs = {3, 5, 4};
  for (DType dtype : {DType::f32, DType::f16, DType::bf16})
    for (int64_t dim : {0, 1, 2}) {
      Shape is = {2, 3, 4};  // smaller than x in the other dims
      is[static_cast<size_t>(dim)] = 6;
      Generator gen(static_cast<uint64_t>(dim) + 1);
      const Tensor index =
          randint(0, xs[static_cast<size_t>(dim)], is, {.dtype = DType::i64}, &gen);
      const Tensor x = kt::input(xs, dtype, true, -2, 2, 5 + dim);
      const auto shape = cuda::make_gather_shape(xs.data(), is.data(), 3, dim);
      Tensor out = kt::output(is, dtype, false);
      cuda::gather(dtype_size(dtype), x.data_ptr(), index.data<int64_t>(), out.data_ptr(), shape,
                   is.numel(), nullptr);
      const std::string what = detail::str_cat("gather ", dtype, " dim ", dim);
      kt::require_equal(out, ops::gather(x, dim, index), what);
      const Tensor g = kt::input(is, dtype, false, -1, 1, 9 + dim);
      Tensor gin = kt::output(xs, dtype, true);
      cuda::gather_backward(dtype, g.data_ptr(), index.data<int64_t>(), gin.data_ptr(), shape,
                            is.numel(), xs.numel(), nullptr);
      // At most 6 index entries (the index's size along dim) land on one element.
      const double abs_sum =
          max_of(ops::gather_backward(ops::abs(g.to(DType::f32)), dim, index, xs));
      kt::require_close(gin.to(DType::f32),
                        kt::rounded(ops::gather_backward(g.to(DType::f32), dim, index, xs), dtype),
                        scatter_tol(dtype, 6, abs_sum), what + " backward");
    }
  const Shape bad = {4, 5, 4};
  CHECK_THROWS_WITH(cuda::make_gather_shape(xs.data(), bad.data(), 3, 1),
                    Catch::Contains("cuda::gather") && Catch::Contains("index.size(0)"));
}

TEST_CASE(
    "cuda kernels: check_indices_kernel finds the first bad index, and kernels never go out "
    "of bounds",
    "[cuda][kernels][index]") {
  const Tensor idx = from_vector<int64_t>({0, 2, 1, 5, 3, -1, 2}, {7}, {.dtype = DType::i64});
  Tensor first = zeros({1}, {.dtype = DType::i32});
  cuda::check_indices(idx.data<int64_t>(), 7, 5, first.data<int32_t>(), nullptr);
  CHECK(first.to_vector<int32_t>()[0] == 3);
  cuda::check_indices(idx.data<int64_t>(), 3, 5, first.data<int32_t>(), nullptr);
  CHECK(first.to_vector<int32_t>()[0] == cuda::kNoBadIndex);
  // index_select writes 0 for the out-of-range entries (5 and -1), the rest as usual.
  const Tensor x = arange(5.0).view({5, 1});
  Tensor out = full({7, 1}, 42.0);
  cuda::index_select(4, x.data_ptr(), idx.data<int64_t>(), out.data_ptr(), 1, 5, 7, 1, nullptr);
  CHECK(out.to_vector<float>() == std::vector<float>{0, 2, 1, 0, 3, 0, 2});
  CHECK_THROWS_WITH(
      cuda::index_select(3, x.data_ptr(), idx.data<int64_t>(), out.data_ptr(), 1, 5, 7, 1, nullptr),
      Catch::Contains("cuda::index_select") && Catch::Contains("got 3"));
}

TEST_CASE("cuda kernels: normalize_nhwc_to_nchw_kernel matches (x / 255 - mean) / std",
          "[cuda][kernels][normalize]") {
  const float mean[3] = {0.485f, 0.456f, 0.406f}, stdv[3] = {0.229f, 0.224f, 0.225f};
  for (int64_t c : {1, 3})
    for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
      const int64_t b = 3, h = 5, w = 7;
      Generator g(static_cast<uint64_t>(c));
      const Tensor img = randint(0, 256, {b, h, w, c}, {.dtype = DType::u8}, &g);
      Tensor out = kt::output({b, c, h, w}, dtype, true);
      cuda::normalize_u8_nhwc(img.data<uint8_t>(), dtype, out.data_ptr(), b, h, w, c, mean, stdv,
                              nullptr);
      // The literal formula in f64, NCHW.
      Tensor want = empty({b, c, h, w}, {.dtype = DType::f64});
      const uint8_t* px = img.data<uint8_t>();
      double* pw = want.data<double>();
      for (int64_t n = 0; n < b; ++n)
        for (int64_t ch = 0; ch < c; ++ch)
          for (int64_t s = 0; s < h * w; ++s)
            pw[(n * c + ch) * h * w + s] =
                (px[(n * h * w + s) * c + ch] / 255.0 - mean[ch]) / stdv[ch];
      // x * fl(1 / fl(255 std)) + fl(-mean / std) in f32 against the literal formula in f64:
      // within u (4 |y| + 4 |mean / std|) (tests/data/test_normalize.cpp derives it), |y| and
      // |mean / std| <= 4 here: 32u = 1.9e-6 absolute, then the dtype's rounding.
      kt::Tolerance t = kt::tol(dtype);
      t.atol += 32 * kt::kU;
      kt::require_close(out.to(DType::f32), want.to(DType::f32).to(dtype).to(DType::f32), t,
                        detail::str_cat("normalize ", dtype, " C=", c));
      // The channels-last instance writes (b, h, w, c) memory: the same values bit for bit (the
      // same multiply-add per value, stored elsewhere).
      Tensor nhwc = kt::output({b, h, w, c}, dtype, true);
      cuda::normalize_u8_nhwc(img.data<uint8_t>(), dtype, nhwc.data_ptr(), b, h, w, c, mean, stdv,
                              nullptr, /*channels_last=*/true);
      kt::require_equal(nhwc.permute({0, 3, 1, 2}).to(DType::f32).contiguous(), out.to(DType::f32),
                        detail::str_cat("normalize channels_last ", dtype));
    }
  const float zero_std[1] = {0.f};
  Tensor img = zeros({1, 1, 1, 1}, {.dtype = DType::u8});
  Tensor out = empty({1});
  CHECK_THROWS_WITH(cuda::normalize_u8_nhwc(img.data<uint8_t>(), DType::f32, out.data_ptr(), 1, 1,
                                            1, 1, mean, zero_std, nullptr),
                    Catch::Contains("cuda::normalize_u8_nhwc") && Catch::Contains("std > 0"));
  CHECK_THROWS_WITH(cuda::normalize_u8_nhwc(img.data<uint8_t>(), DType::f32, out.data_ptr(), 1, 1,
                                            1, 17, mean, stdv, nullptr),
                    Catch::Contains("1 to 16 channels, got 17"));
}

TEST_CASE("cuda kernels: crop_flip_normalize_kernel matches ops::crop_flip_normalize_u8_nhwc",
          "[cuda][kernels][normalize]") {
  // Crops inside, across every edge, wholly outside the image, flipped or not; outputs smaller
  // and larger than the image; 1, 3 and 5 channels; every output dtype; misaligned outputs.
  struct Case {
    int64_t b, h, w, c, oh, ow;
  };
  for (const Case& k : {Case{6, 7, 9, 1, 7, 9}, Case{5, 8, 6, 3, 5, 4}, Case{4, 5, 5, 5, 9, 11}})
    for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
      Generator g(static_cast<uint64_t>(k.c * 10 + k.oh));
      const Tensor img = randint(0, 256, {k.b, k.h, k.w, k.c}, {.dtype = DType::u8}, &g);
      const Tensor tops = randint(-k.oh - 2, k.h + 2, {k.b}, {.dtype = DType::i64}, &g);
      const Tensor lefts = randint(-k.ow - 2, k.w + 2, {k.b}, {.dtype = DType::i64}, &g);
      Tensor crops = empty({k.b, 3}, {.dtype = DType::i32});
      for (int64_t i = 0; i < k.b; ++i) {
        crops.data<int32_t>()[3 * i] = static_cast<int32_t>(tops.data<int64_t>()[i]);
        crops.data<int32_t>()[3 * i + 1] = static_cast<int32_t>(lefts.data<int64_t>()[i]);
        crops.data<int32_t>()[3 * i + 2] = static_cast<int32_t>(i % 2);
      }
      crops.data<int32_t>()[0] = 0;  // image 0: the identity crop
      crops.data<int32_t>()[1] = 0;
      std::vector<float> mean, stdv;
      for (int64_t ch = 0; ch < k.c; ++ch) {
        mean.push_back(0.3f + 0.05f * static_cast<float>(ch));
        stdv.push_back(0.25f + 0.01f * static_cast<float>(ch));
      }
      Tensor out = kt::output({k.b, k.c, k.oh, k.ow}, dtype, true);
      cuda::crop_flip_normalize_u8_nhwc(img.data<uint8_t>(), crops.data<int32_t>(), dtype,
                                        out.data_ptr(), k.b, k.h, k.w, k.c, k.oh, k.ow, mean.data(),
                                        stdv.data(), nullptr);
      Tensor want = empty({k.b, k.c, k.oh, k.ow}, {.dtype = dtype});
      ops::crop_flip_normalize_u8_nhwc(img, want, crops, mean, stdv);
      // Bit for bit: the kernel evaluates the CPU's fl(fl(x * scale) + bias) with the same scale
      // and bias (cuda/kernels/normalize.cu, ops/cpu/normalize.cpp), compiled here by the host
      // compiler with FMA contraction off; the padding is bias on both; f16/bf16 round that f32
      // value once. (On a GPU nvcc may fuse the multiply-add: 1 ulp.)
      kt::require_equal(out.to(DType::f32), want.to(DType::f32),
                        detail::str_cat("crop_flip ", dtype, " C=", k.c, " ", k.oh, "x", k.ow));
      // The channels-last instance: (b, oh, ow, c) memory, the same values bit for bit.
      Tensor nhwc = kt::output({k.b, k.oh, k.ow, k.c}, dtype, true);
      cuda::crop_flip_normalize_u8_nhwc(img.data<uint8_t>(), crops.data<int32_t>(), dtype,
                                        nhwc.data_ptr(), k.b, k.h, k.w, k.c, k.oh, k.ow,
                                        mean.data(), stdv.data(), nullptr, /*channels_last=*/true);
      kt::require_equal(nhwc.permute({0, 3, 1, 2}).to(DType::f32).contiguous(), want.to(DType::f32),
                        detail::str_cat("crop_flip channels_last ", dtype, " C=", k.c));
    }
  const float mean[1] = {0.f}, stdv[1] = {1.f};
  Tensor img = zeros({1, 2, 2, 1}, {.dtype = DType::u8});
  Tensor crops = zeros({1, 3}, {.dtype = DType::i32}), out = empty({4});
  CHECK_THROWS_WITH(
      cuda::crop_flip_normalize_u8_nhwc(img.data<uint8_t>(), crops.data<int32_t>(), DType::f32,
                                        out.data_ptr(), 1, 2, 2, 1, -1, 2, mean, stdv, nullptr),
      Catch::Contains("cuda::crop_flip_normalize_u8_nhwc") && Catch::Contains("output -1x2"));
}
