// Index and shape ops (ops/index.h) against naive loops: cat, stack, index_select, embedding,
// gather, one_hot, the scatter-add backward kernels, and bounds-check messages.
#include <catch2/catch.hpp>

#include "ops/index.h"
#include "stoke/stoke.h"

using namespace stoke;

namespace {
Tensor rnd(const Shape& shape, DType dtype = DType::f32, uint64_t seed = 1) {
  Generator g(seed);
  return randn(shape, {.dtype = dtype}, &g);
}
Tensor i64(const std::vector<int64_t>& v, const Shape& shape) {
  return from_vector<int64_t>(v, shape, {.dtype = DType::i64});
}
}  // namespace

TEST_CASE("index: cat and stack", "[ops][index]") {
  const Tensor a = arange(6).view({2, 3});
  const Tensor b = arange(6, 12).view({2, 3});
  CHECK(ops::cat({a, b}, 0).shape() == Shape{4, 3});
  CHECK(ops::cat({a, b}, 0).to_vector<float>() ==
        std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  CHECK(ops::cat({a, b.narrow(1, 0, 1)}, -1).to_vector<float>() ==
        std::vector<float>{0, 1, 2, 6, 3, 4, 5, 9});
  // Non-contiguous inputs and an empty part.
  CHECK(ops::cat({a.t(), zeros({0, 2}), b.t()}, 0).to_vector<float>() ==
        std::vector<float>{0, 3, 1, 4, 2, 5, 6, 9, 7, 10, 8, 11});
  const Tensor s = ops::stack({a, b}, 1);
  CHECK(s.shape() == Shape{2, 2, 3});
  CHECK(s.to_vector<float>() == std::vector<float>{0, 1, 2, 6, 7, 8, 3, 4, 5, 9, 10, 11});
  CHECK(ops::stack({a, b}, -1).shape() == Shape{2, 3, 2});
  CHECK(ops::stack({a, b}, -1).to_vector<float>()[1] == 6);
  const Tensor ia = arange(3, {.dtype = DType::i64});
  CHECK(ops::cat({ia, ia}).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 0, 1, 2});
  CHECK_THROWS_WITH(ops::cat({a, zeros({3, 3})}, 1),
                    Catch::Contains("stoke::cat") && Catch::Contains("[3, 3]"));
  CHECK_THROWS_WITH(ops::cat({a, b.to(DType::f64)}, 0), Catch::Contains("f32 and f64"));
  CHECK_THROWS_WITH(ops::stack({a, zeros({3, 2})}), Catch::Contains("[3, 2]"));
  CHECK_THROWS_WITH(ops::cat({}), Catch::Contains("non-empty"));
}

TEST_CASE("index: index_select and its scatter-add backward", "[ops][index]") {
  const Tensor x = rnd({4, 5, 3}, DType::f64, 2).transpose(0, 2);  // [3, 5, 4], strided
  const Tensor idx = i64({4, 0, 4, 2}, {4});
  const Tensor y = ops::index_select(x, 1, idx);
  REQUIRE(y.shape() == Shape{3, 4, 4});
  const auto xv = x.to_vector<double>(), yv = y.to_vector<double>();
  const int64_t iv[] = {4, 0, 4, 2};
  for (int a = 0; a < 3; ++a)
    for (int j = 0; j < 4; ++j)
      for (int c = 0; c < 4; ++c) CHECK(yv[(a * 4 + j) * 4 + c] == xv[(a * 5 + iv[j]) * 4 + c]);
  // Backward: repeated index 4 accumulates both slices.
  const Tensor g = rnd({3, 4, 4}, DType::f64, 3);
  const Tensor gx = ops::index_select_backward(g, 1, idx, {3, 5, 4});
  const auto gv = g.to_vector<double>(), gxv = gx.to_vector<double>();
  std::vector<double> want(60, 0.0);
  for (int a = 0; a < 3; ++a)
    for (int j = 0; j < 4; ++j)
      for (int c = 0; c < 4; ++c) want[(a * 5 + iv[j]) * 4 + c] += gv[(a * 4 + j) * 4 + c];
  // Exact: each element is a sum of at most 2 values (index 4 twice), one rounding, the same in
  // either order.
  for (int i = 0; i < 60; ++i) CHECK(gxv[i] == want[i]);
  // Integer data and a 0-dim index.
  const Tensor ints = arange(10, {.dtype = DType::i32}).view({5, 2});
  CHECK(ops::index_select(ints, 0, i64({3}, {})).to_vector<int>() == std::vector<int>{6, 7});
  CHECK_THROWS_WITH(ops::index_select(x, 1, i64({1, 5}, {2})),
                    Catch::Contains("stoke::index_select") && Catch::Contains("index 5") &&
                        Catch::Contains("position [1]") && Catch::Contains("size 5"));
  CHECK_THROWS_WITH(ops::index_select(x, 1, i64({-1}, {1})), Catch::Contains("index -1"));
  CHECK_THROWS_WITH(ops::index_select(x, 1, idx.to(DType::i32)),
                    Catch::Contains("expected index of dtype i64, got i32"));
}

TEST_CASE("index: embedding lookup and backward with repeated indices", "[ops][index]") {
  const Tensor w = rnd({6, 4}, DType::f32, 4);
  const Tensor idx = i64({5, 0, 5, 1, 5, 2}, {2, 3});
  const Tensor y = ops::embedding(w, idx);
  REQUIRE(y.shape() == Shape{2, 3, 4});
  const auto wv = w.to_vector<float>(), yv = y.to_vector<float>();
  const int64_t iv[] = {5, 0, 5, 1, 5, 2};
  for (int p = 0; p < 6; ++p)
    for (int d = 0; d < 4; ++d) CHECK(yv[p * 4 + d] == wv[iv[p] * 4 + d]);
  const Tensor g = rnd({2, 3, 4}, DType::f32, 5);
  const auto gv = g.to_vector<float>();
  const auto gw = ops::embedding_backward(g, idx, 6).to_vector<float>();
  for (int v = 0; v < 6; ++v)
    for (int d = 0; d < 4; ++d) {
      double want = 0, abs = 0;
      for (int p = 0; p < 6; ++p)
        if (iv[p] == v) {
          want += gv[p * 4 + d];
          abs += std::abs(gv[p * 4 + d]);
        }
      // Up to 3 f32 values (index 5 three times) added in f32: 2 roundings, <= 2 u sum|g|.
      CHECK(gw[v * 4 + d] == Approx(want).epsilon(0).margin(2 * 0x1p-24 * abs));
    }
  // A large table over the thread pool.
  const Tensor big_idx = randint(0, 1000, {4096}, {.dtype = DType::i64});
  const Tensor big_g = ones({4096, 8});
  const auto counts = ops::embedding_backward(big_g, big_idx, 1000).to_vector<float>();
  std::vector<float> want(8000, 0.0f);
  for (int64_t v : big_idx.to_vector<int64_t>())
    for (int d = 0; d < 8; ++d) want[v * 8 + d] += 1;
  CHECK(counts == want);  // exact: counts of ones are small integers
  CHECK_THROWS_WITH(ops::embedding(w, i64({0, 6}, {2})), Catch::Contains("stoke::embedding") &&
                                                             Catch::Contains("index 6") &&
                                                             Catch::Contains("size 6"));
  CHECK_THROWS_WITH(ops::embedding(w.view({24}), idx), Catch::Contains("expected weight with 2"));
}

TEST_CASE("index: gather matches torch.gather and scatter-adds back", "[ops][index]") {
  // torch.gather(x, 1, index) for x [3, 4] and index [3, 2].
  const Tensor x = arange(12).view({3, 4});
  const Tensor idx = i64({3, 0, 1, 1, 0, 2}, {3, 2});
  CHECK(ops::gather(x, 1, idx).to_vector<float>() == std::vector<float>{3, 0, 5, 5, 8, 10});
  // dim 0, index smaller than x in the other dim.
  CHECK(ops::gather(x, 0, i64({2, 0, 1}, {1, 3})).to_vector<float>() ==
        std::vector<float>{8, 1, 6});
  // Strided x, 3-D, every dim, against a naive loop; backward against naive scatter-add.
  const Tensor x3 = rnd({4, 3, 5}, DType::f64, 6).permute({1, 2, 0});  // [3, 5, 4]
  for (int64_t dim = 0; dim < 3; ++dim) {
    INFO("dim " << dim);
    const Shape ishape{2, 4, 3};
    const int64_t size = x3.size(dim);
    const Tensor index = randint(0, size, ishape, {.dtype = DType::i64});
    const auto iv = index.to_vector<int64_t>();
    const auto xv = x3.to_vector<double>();
    const auto yv = ops::gather(x3, dim, index).to_vector<double>();
    const Tensor g = rnd(ishape, DType::f64, 7);
    const auto gv = g.to_vector<double>();
    const auto gx = ops::gather_backward(g, dim, index, x3.shape()).to_vector<double>();
    std::vector<double> want_gx(60, 0.0), abs_gx(60, 0.0);
    for (int a = 0; a < 2; ++a)
      for (int b = 0; b < 4; ++b)
        for (int c = 0; c < 3; ++c) {
          const int p = (a * 4 + b) * 3 + c;
          int64_t co[3] = {a, b, c};
          co[dim] = iv[p];
          const int64_t q = (co[0] * 5 + co[1]) * 4 + co[2];
          CHECK(yv[p] == xv[q]);  // exact: a selection
          want_gx[q] += gv[p];
          abs_gx[q] += std::abs(gv[p]);
        }
    // f64 sums of the gradients gathered from one element: at most 24 terms, in any order on
    // either side: 2 * 24 u sum|g|.
    for (int i = 0; i < 60; ++i)
      CHECK(gx[i] == Approx(want_gx[i]).epsilon(0).margin(48 * 0x1p-53 * abs_gx[i]));
  }
  CHECK_THROWS_WITH(ops::gather(x, 1, i64({4}, {1, 1})), Catch::Contains("stoke::gather") &&
                                                             Catch::Contains("index 4") &&
                                                             Catch::Contains("size 4"));
  CHECK_THROWS_WITH(ops::gather(x, 1, i64({0}, {1})), Catch::Contains("as many dims"));
  CHECK_THROWS_WITH(ops::gather(x, 1, i64({0, 0, 0, 0}, {4, 1})),
                    Catch::Contains("exceeds input shape [3, 4] in dim 0"));
}

TEST_CASE("index: one_hot", "[ops][index]") {
  const Tensor idx = i64({2, 0, 1, 2}, {2, 2});
  const Tensor y = ops::one_hot(idx, 3);
  CHECK(y.dtype() == DType::i64);
  CHECK(y.shape() == Shape{2, 2, 3});
  CHECK(y.to_vector<int64_t>() == std::vector<int64_t>{0, 0, 1, 1, 0, 0, 0, 1, 0, 0, 0, 1});
  CHECK(ops::one_hot(idx).shape() == Shape{2, 2, 3});
  CHECK(ops::one_hot(i64({1}, {1}), 4).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 0, 0});
  CHECK_THROWS_WITH(ops::one_hot(i64({0, 3}, {2}), 3),
                    Catch::Contains("stoke::one_hot") && Catch::Contains("index 3") &&
                        Catch::Contains("position [1]") && Catch::Contains("size 3"));
  CHECK_THROWS_WITH(ops::one_hot(i64({0, -2}, {2}), 3), Catch::Contains("index -2"));
  CHECK_THROWS_WITH(ops::one_hot(zeros({2}), 3), Catch::Contains("dtype i64, got f32"));
}
