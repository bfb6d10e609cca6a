// cuda/kernels/elementwise.cu in cuda/emu against the CPU ops: ew_binary_kernel (contiguous, with
// its 128-bit path), ew_binary_strided_kernel (broadcasting, transposed operands, in place),
// ew_unary_kernel (every unary map, pow and the scalar variants), the backward maps (which run on
// ew_binary_kernel, or ew_binary_strided_kernel for broadcast operands), lerp, and
// ew_ternary_strided_kernel (div/maximum/minimum backward), for f32, f16 and bf16 at sizes that
// are not multiples of the block or the vector width, at aligned and misaligned addresses.
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <string>

#include "core/shape.h"
#include "cuda/kernels/elementwise.h"
#include "ops/creation.h"
#include "ops/elementwise.h"
#include "test_kernels_util.h"

using namespace stoke;
namespace kt = stoke::kernels_test;
using cuda::BinaryOp;
using cuda::UnaryBackwardOp;
using cuda::UnaryOp;

namespace {

const DType kDtypes[] = {DType::f32, DType::f16, DType::bf16};
const int64_t kSizes[] = {1, 7, 8, 33, 257, 1029};
const BinaryOp kBinaryOps[] = {BinaryOp::add, BinaryOp::sub,     BinaryOp::mul,
                               BinaryOp::div, BinaryOp::maximum, BinaryOp::minimum};

Tensor ref_binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  switch (op) {
    case BinaryOp::add:
      return ops::add(a, b);
    case BinaryOp::sub:
      return ops::sub(a, b);
    case BinaryOp::mul:
      return ops::mul(a, b);
    case BinaryOp::div:
      return ops::div(a, b);
    case BinaryOp::maximum:
      return ops::maximum(a, b);
    case BinaryOp::minimum:
      return ops::minimum(a, b);
  }
  return {};
}

std::string label(const char* what, int op, DType dtype, int64_t n, bool misaligned) {
  return detail::str_cat(what, " op ", op, " ", dtype, " n=", n,
                         misaligned ? " misaligned" : " aligned");
}

// out = a op b over broadcast shapes through make_binary_offsets, against ops::.
void check_broadcast(BinaryOp op, DType dtype, const Tensor& a, const Tensor& b) {
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), "test");
  Tensor out = kt::output(shape, dtype, false);
  const Shape os = contiguous_strides(shape);
  const Shape as = broadcast_strides(a.shape(), a.strides(), shape);
  const Shape bs = broadcast_strides(b.shape(), b.strides(), shape);
  const auto offsets = cuda::make_binary_offsets(shape.data(), static_cast<int>(shape.size()),
                                                 os.data(), as.data(), bs.data());
  cuda::binary(op, dtype, a.data_ptr(), b.data_ptr(), out.data_ptr(), offsets, shape.numel(),
               nullptr);
  const Tensor want = kt::rounded(ref_binary(op, a.to(DType::f32), b.to(DType::f32)), dtype);
  kt::require_close(out.to(DType::f32), want, kt::tol(dtype),
                    detail::str_cat("broadcast ", a.shape(), " op ", static_cast<int>(op), " ",
                                    b.shape(), " ", dtype));
}

}  // namespace

TEST_CASE("cuda kernels: ew_binary_kernel matches ops:: on contiguous operands",
          "[cuda][kernels][elementwise]") {
  uint64_t seed = 1;
  for (DType dtype : kDtypes)
    for (int64_t n : kSizes)
      for (bool mis : {false, true})
        for (BinaryOp op : kBinaryOps) {
          const Tensor a = kt::input({n}, dtype, mis, -2, 2, seed++);
          const Tensor b = kt::input({n}, dtype, mis, 0.25, 2, seed++);
          Tensor out = kt::output({n}, dtype, mis);
          cuda::binary(op, dtype, a.data_ptr(), b.data_ptr(), out.data_ptr(), n, nullptr);
          const Tensor want =
              kt::rounded(ref_binary(op, a.to(DType::f32), b.to(DType::f32)), dtype);
          kt::require_close(out.to(DType::f32), want, kt::tol(dtype),
                            label("binary", static_cast<int>(op), dtype, n, mis));
        }
}

TEST_CASE("cuda kernels: ew_binary_kernel with mixed alignment, alpha and in place",
          "[cuda][kernels][elementwise]") {
  for (DType dtype : kDtypes) {
    const int64_t n = 100;
    // a aligned, b misaligned: the vector path must not be taken.
    const Tensor a = kt::input({n}, dtype, false, -2, 2, 11);
    const Tensor b = kt::input({n}, dtype, true, -2, 2, 12);
    Tensor out = kt::output({n}, dtype, false);
    cuda::binary(BinaryOp::sub, dtype, a.data_ptr(), b.data_ptr(), out.data_ptr(), n, nullptr,
                 0.5f);
    const Tensor a32 = a.to(DType::f32), b32 = b.to(DType::f32);
    kt::require_close(out.to(DType::f32), kt::rounded(ops::sub(a32, ops::mul(b32, 0.5)), dtype),
                      kt::tol(dtype), "sub with alpha, mixed alignment");
    // In place: out is a.
    Tensor t = a.clone();
    cuda::binary(BinaryOp::add, dtype, t.data_ptr(), b.data_ptr(), t.data_ptr(), n, nullptr);
    kt::require_close(t.to(DType::f32), kt::rounded(ops::add(a32, b32), dtype), kt::tol(dtype),
                      "add in place");
  }
}

TEST_CASE("cuda kernels: maximum/minimum propagate NaN like ops::",
          "[cuda][kernels][elementwise]") {
  const Tensor a = from_vector<float>({NAN, 1.f, 2.f, -1.f, 3.f}, {5});
  const Tensor b = from_vector<float>({0.f, NAN, 1.f, NAN, 3.f}, {5});
  for (BinaryOp op : {BinaryOp::maximum, BinaryOp::minimum}) {
    Tensor out = kt::output({5}, DType::f32, false);
    cuda::binary(op, DType::f32, a.data_ptr(), b.data_ptr(), out.data_ptr(), 5, nullptr);
    kt::require_equal(out, ref_binary(op, a, b), "NaN propagation");
    CHECK(std::isnan(out.to_vector<float>()[0]));
    CHECK(std::isnan(out.to_vector<float>()[1]));
  }
}

TEST_CASE("cuda kernels: ew_binary_strided_kernel broadcasts like ops::",
          "[cuda][kernels][elementwise]") {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{5, 7}, {1}},           // scalar
      {{5, 7}, {7}},           // row
      {{5, 1}, {5, 7}},        // column
      {{3, 5, 4}, {3, 1, 4}},  // middle dim
      {{2, 3, 4, 5}, {3, 1, 5}},
      {{1}, {33}},
      {{6, 1, 3}, {1, 9, 1}},  // both broadcast
  };
  uint64_t seed = 100;
  for (DType dtype : kDtypes)
    for (const auto& [sa, sb] : cases)
      for (BinaryOp op : kBinaryOps) {
        const Tensor a = kt::input(sa, dtype, false, -2, 2, seed++);
        const Tensor b = kt::input(sb, dtype, true, 0.25, 2, seed++);
        check_broadcast(op, dtype, a, b);
      }
  // A transposed (non-contiguous) operand against a row, and two transposed operands.
  for (DType dtype : kDtypes) {
    const Tensor at = kt::input({7, 5}, dtype, false, -2, 2, 7).t();
    const Tensor bt = kt::input({7, 5}, dtype, true, -2, 2, 8).t();
    check_broadcast(BinaryOp::mul, dtype, at, kt::input({7}, dtype, false, -2, 2, 9));
    check_broadcast(BinaryOp::sub, dtype, at, bt);
  }
}

TEST_CASE("cuda kernels: ew_binary_strided_kernel on random broadcast shapes and permutations",
          "[cuda][kernels][elementwise]") {
  // Random shapes of 1 to 5 dims, each operand dropping leading dims or setting dims to 1 at
  // random, and a random permutation of a's dims: exercises the dim merging of
  // make_binary_offsets on layouts no hand-written case covers.
  Generator g(2024);
  for (int it = 0; it < 60; ++it) {
    const std::vector<int64_t> r =
        randint(0, 1000, {24}, {.dtype = DType::i64}, &g).to_vector<int64_t>();
    const int64_t nd = 1 + r[0] % 5;
    Shape out(static_cast<size_t>(nd)), sa, sb;
    for (int64_t d = 0; d < nd; ++d) out[static_cast<size_t>(d)] = 1 + r[1 + d] % 4;
    const int64_t da = r[6] % (nd + 1), db = r[7] % (nd + 1);  // leading dims dropped
    for (int64_t d = da; d < nd; ++d)
      sa.push_back(r[8 + d] % 3 == 0 ? 1 : out[static_cast<size_t>(d)]);
    for (int64_t d = db; d < nd; ++d)
      sb.push_back(r[13 + d] % 3 == 0 ? 1 : out[static_cast<size_t>(d)]);
    const DType dtype = kDtypes[r[18] % 3];
    Tensor a = kt::input(sa, dtype, r[19] % 2 == 0, -2, 2, 1000 + it);
    if (a.dim() >= 2 && r[20] % 2 == 0) {  // same logical shape, permuted memory layout
      std::vector<int64_t> perm(static_cast<size_t>(a.dim()));
      for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int64_t>(perm.size() - 1 - i);
      a = a.permute(perm).contiguous().permute(perm);
    }
    const Tensor b = kt::input(sb, dtype, r[21] % 2 == 0, 0.25, 2, 2000 + it);
    check_broadcast(kBinaryOps[r[22] % 6], dtype, a, b);
  }
}

TEST_CASE("cuda kernels: ew_binary_strided_kernel in place with a broadcast operand",
          "[cuda][kernels][elementwise]") {
  for (DType dtype : kDtypes) {
    const Tensor a = kt::input({6, 9}, dtype, true, -2, 2, 21);
    const Tensor b = kt::input({6, 1}, dtype, false, -2, 2, 22);
    const Tensor want = kt::rounded(ops::add(a.to(DType::f32), b.to(DType::f32)), dtype);
    Tensor t = a.clone();
    const Shape s = t.shape(), ts = t.strides();
    const Shape bs = broadcast_strides(b.shape(), b.strides(), s);
    const auto off = cuda::make_binary_offsets(s.data(), 2, ts.data(), ts.data(), bs.data());
    cuda::binary(BinaryOp::add, dtype, t.data_ptr(), b.data_ptr(), t.data_ptr(), off, t.numel(),
                 nullptr);
    kt::require_close(t.to(DType::f32), want, kt::tol(dtype), "add_ with a column");
  }
}

TEST_CASE("cuda kernels: make_binary_offsets merges dims and refuses too many",
          "[cuda][kernels][elementwise]") {
  const Shape s = {2, 3, 4};
  const Shape c = contiguous_strides(s);
  const auto off = cuda::make_binary_offsets(s.data(), 3, c.data(), c.data(), c.data());
  CHECK(off.ndim == 1);
  CHECK(off.size[0] == 24);
  CHECK(off.contiguous());
  // Nine dims that cannot merge (every other dim broadcast in b).
  const Shape big = {2, 2, 2, 2, 2, 2, 2, 2, 2};
  const Shape bc = contiguous_strides(big);
  Shape bb = bc;
  for (size_t d = 0; d < bb.size(); d += 2) bb[d] = 0;
  CHECK_THROWS_WITH(cuda::make_binary_offsets(big.data(), 9, bc.data(), bc.data(), bb.data()),
                    Catch::Contains("cuda::binary") && Catch::Contains("at most 8 dims"));
}

TEST_CASE("cuda kernels: ew_unary_kernel scalar variants match ops::",
          "[cuda][kernels][elementwise]") {
  uint64_t seed = 300;
  for (DType dtype : kDtypes)
    for (int64_t n : {5, 64, 1029})
      for (bool mis : {false, true})
        for (BinaryOp op : kBinaryOps)
          for (bool first : {false, true}) {
            const Tensor x = kt::input({n}, dtype, mis, 0.25, 2, seed++);
            Tensor out = kt::output({n}, dtype, mis);
            const double s = 1.25;
            cuda::binary_scalar(op, dtype, x.data_ptr(), s, out.data_ptr(), n, nullptr, first);
            const Tensor x32 = x.to(DType::f32), s32 = full_like(x32, s);
            const Tensor want =
                kt::rounded(first ? ref_binary(op, s32, x32) : ref_binary(op, x32, s32), dtype);
            kt::require_close(
                out.to(DType::f32), want, kt::tol(dtype),
                label(first ? "scalar first" : "scalar", static_cast<int>(op), dtype, n, mis));
          }
}

TEST_CASE("cuda kernels: ew_unary_kernel maps match ops::", "[cuda][kernels][elementwise]") {
  const cuda::UnaryParams leaky{.negative_slope = 0.2f};
  const cuda::UnaryParams clamp_both{.min = -0.5f, .max = 0.7f};
  const cuda::UnaryParams clamp_min{.min = -0.5f};
  struct Case {
    UnaryOp op;
    cuda::UnaryParams params;
    bool positive;  // the op's domain needs x > 0
    Tensor (*ref)(const Tensor&);
  };
  const Case cases[] = {
      {UnaryOp::neg, {}, false, [](const Tensor& x) { return ops::neg(x); }},
      {UnaryOp::exp, {}, false, [](const Tensor& x) { return ops::exp(x); }},
      {UnaryOp::log, {}, true, [](const Tensor& x) { return ops::log(x); }},
      {UnaryOp::sqrt, {}, true, [](const Tensor& x) { return ops::sqrt(x); }},
      {UnaryOp::rsqrt, {}, true, [](const Tensor& x) { return ops::rsqrt(x); }},
      {UnaryOp::abs, {}, false, [](const Tensor& x) { return ops::abs(x); }},
      {UnaryOp::relu, {}, false, [](const Tensor& x) { return ops::relu(x); }},
      {UnaryOp::leaky_relu, leaky, false, [](const Tensor& x) { return ops::leaky_relu(x, 0.2); }},
      {UnaryOp::sigmoid, {}, false, [](const Tensor& x) { return ops::sigmoid(x); }},
      {UnaryOp::tanh, {}, false, [](const Tensor& x) { return ops::tanh(x); }},
      {UnaryOp::gelu, {}, false, [](const Tensor& x) { return ops::gelu(x); }},
      {UnaryOp::gelu_tanh,
       {},
       false,
       [](const Tensor& x) { return ops::gelu(x, GeluApproximate::tanh); }},
      {UnaryOp::clamp, clamp_both, false, [](const Tensor& x) { return ops::clamp(x, -0.5, 0.7); }},
      {UnaryOp::clamp, clamp_min, false,
       [](const Tensor& x) { return ops::clamp(x, -0.5, std::nullopt); }},
      {UnaryOp::sign, {}, false, [](const Tensor& x) { return ops::sign(x); }},
      {UnaryOp::silu, {}, false, [](const Tensor& x) { return ops::silu(x); }},
      {UnaryOp::hardswish, {}, false, [](const Tensor& x) { return ops::hardswish(x); }},
  };
  uint64_t seed = 500;
  for (DType dtype : kDtypes)
    for (int64_t n : {3, 8, 100, 1029})
      for (bool mis : {false, true})
        for (const Case& c : cases) {
          const Tensor x =
              kt::input({n}, dtype, mis, c.positive ? 0.05 : -4, c.positive ? 4 : 4, seed++);
          Tensor out = kt::output({n}, dtype, mis);
          cuda::unary(c.op, dtype, x.data_ptr(), out.data_ptr(), n, nullptr, c.params);
          const Tensor want = kt::rounded(c.ref(x.to(DType::f32)), dtype);
          kt::require_close(out.to(DType::f32), want, kt::tol(dtype),
                            label("unary", static_cast<int>(c.op), dtype, n, mis));
        }
  // In place (out == x), and NaN through relu and clamp as torch does.
  Tensor t = from_vector<float>({NAN, -1.f, 2.f}, {3});
  cuda::unary(UnaryOp::relu, DType::f32, t.data_ptr(), t.data_ptr(), 3, nullptr);
  CHECK(std::isnan(t.to_vector<float>()[0]));
  CHECK(t.to_vector<float>()[1] == 0.f);
  CHECK(t.to_vector<float>()[2] == 2.f);
}

TEST_CASE("cuda kernels: unary backward maps (on ew_binary_kernel) match ops::*_backward",
          "[cuda][kernels][elementwise]") {
  struct Case {
    UnaryBackwardOp op;
    bool positive;
    Tensor (*saved)(const Tensor&);  // from x: the forward's output or x itself
    Tensor (*ref)(const Tensor&, const Tensor&);
  };
  const auto same = [](const Tensor& x) { return x; };
  const Case cases[] = {
      {UnaryBackwardOp::relu, false, [](const Tensor& x) { return ops::relu(x); },
       [](const Tensor& g, const Tensor& y) { return ops::relu_backward(g, y); }},
      {UnaryBackwardOp::leaky_relu, false, same,
       [](const Tensor& g, const Tensor& x) { return ops::leaky_relu_backward(g, x, 0.2); }},
      {UnaryBackwardOp::sigmoid, false, [](const Tensor& x) { return ops::sigmoid(x); },
       [](const Tensor& g, const Tensor& y) { return ops::sigmoid_backward(g, y); }},
      {UnaryBackwardOp::tanh, false, [](const Tensor& x) { return ops::tanh(x); },
       [](const Tensor& g, const Tensor& y) { return ops::tanh_backward(g, y); }},
      {UnaryBackwardOp::gelu, false, same,
       [](const Tensor& g, const Tensor& x) { return ops::gelu_backward(g, x); }},
      {UnaryBackwardOp::gelu_tanh, false, same,
       [](const Tensor& g, const Tensor& x) {
         return ops::gelu_backward(g, x, GeluApproximate::tanh);
       }},
      {UnaryBackwardOp::clamp, false, same,
       [](const Tensor& g, const Tensor& x) { return ops::clamp_backward(g, x, -0.5, 0.7); }},
      {UnaryBackwardOp::abs, false, same,
       [](const Tensor& g, const Tensor& x) { return ops::abs_backward(g, x); }},
      {UnaryBackwardOp::sqrt, true, [](const Tensor& x) { return ops::sqrt(x); },
       [](const Tensor& g, const Tensor& y) { return ops::sqrt_backward(g, y); }},
      {UnaryBackwardOp::rsqrt, true, [](const Tensor& x) { return ops::rsqrt(x); },
       [](const Tensor& g, const Tensor& y) { return ops::rsqrt_backward(g, y); }},
      {UnaryBackwardOp::silu, false, same,
       [](const Tensor& g, const Tensor& x) { return ops::silu_backward(g, x); }},
      {UnaryBackwardOp::hardswish, false, same,
       [](const Tensor& g, const Tensor& x) { return ops::hardswish_backward(g, x); }},
  };
  const cuda::UnaryParams params{.negative_slope = 0.2f, .min = -0.5f, .max = 0.7f};
  uint64_t seed = 700;
  for (DType dtype : kDtypes)
    for (int64_t n : {5, 64, 1029})
      for (bool mis : {false, true})
        for (const Case& c : cases) {
          const Tensor x = kt::input({n}, dtype, mis, c.positive ? 0.1 : -3, 3, seed++);
          const Tensor g = kt::input({n}, dtype, mis, -2, 2, seed++);
          // The saved tensor as the forward would have stored it (rounded to dtype).
          Tensor saved = kt::output({n}, dtype, mis);
          saved.copy_(c.saved(x.to(DType::f32)));
          Tensor out = kt::output({n}, dtype, mis);
          cuda::unary_backward(c.op, dtype, g.data_ptr(), saved.data_ptr(), out.data_ptr(), n,
                               nullptr, params);
          const Tensor want = kt::rounded(c.ref(g.to(DType::f32), saved.to(DType::f32)), dtype);
          kt::require_close(out.to(DType::f32), want, kt::tol(dtype),
                            label("backward", static_cast<int>(c.op), dtype, n, mis));
        }
}

TEST_CASE("cuda kernels: elementwise launchers refuse non-floating dtypes",
          "[cuda][kernels][elementwise]") {
  Tensor a = zeros({4}, {.dtype = DType::i32});
  CHECK_THROWS_WITH(
      cuda::binary(BinaryOp::add, DType::i32, a.data_ptr(), a.data_ptr(), a.data_ptr(), 4, nullptr),
      Catch::Contains("cuda::binary") && Catch::Contains("expected dtype f32, f16 or bf16") &&
          Catch::Contains("got i32"));
  CHECK_THROWS_WITH(cuda::unary(UnaryOp::exp, DType::f64, a.data_ptr(), a.data_ptr(), 2, nullptr),
                    Catch::Contains("cuda::unary") && Catch::Contains("got f64"));
}

namespace {

// Offsets over `shape` of a contiguous output and operands broadcast to it.
template <int N>
cuda::StridedOffsets<N> offsets_for(const Shape& shape, const std::array<Tensor, N - 1>& in) {
  const Shape os = contiguous_strides(shape);
  std::array<Shape, N - 1> st;
  const int64_t* strides[N];
  strides[0] = os.data();
  for (int k = 0; k < N - 1; ++k) {
    st[k] = broadcast_strides(in[k].shape(), in[k].strides(), shape);
    strides[k + 1] = st[k].data();
  }
  return cuda::make_strided_offsets<N>("test", shape.data(), static_cast<int>(shape.size()),
                                       strides);
}

}  // namespace

TEST_CASE("cuda kernels: pow (ew_unary_kernel) and pow_backward match ops::pow(_backward)",
          "[cuda][kernels][elementwise]") {
  uint64_t seed = 900;
  for (DType dtype : kDtypes)
    for (int64_t n : {5, 64, 1029})
      for (double e : {2.0, 1.0, 0.5, 0.0, 3.0, -1.0, 1.5, -0.5}) {
        const bool misaligned = n == 1029;
        // Non-integer exponents need x > 0; integer ones take negative bases too.
        const bool positive = e != std::floor(e);
        const Tensor x = kt::input({n}, dtype, misaligned, positive ? 0.1 : -2, 2, seed++);
        const Tensor g = kt::input({n}, dtype, misaligned, -2, 2, seed++);
        const Tensor x32 = x.to(DType::f32), g32 = g.to(DType::f32);
        Tensor out = kt::output({n}, dtype, misaligned);
        cuda::pow(dtype, x.data_ptr(), out.data_ptr(), n, e, nullptr);
        const std::string what = detail::str_cat("pow ", e, " ", dtype, " n=", n);
        kt::require_close(out.to(DType::f32), kt::rounded(ops::pow(x32, e), dtype), kt::tol(dtype),
                          what);
        Tensor dx = kt::output({n}, dtype, misaligned);
        cuda::pow_backward(dtype, g.data_ptr(), x.data_ptr(), dx.data_ptr(),
                           offsets_for<3>({n}, {g, x}), n, e, nullptr);
        kt::require_close(dx.to(DType::f32), kt::rounded(ops::pow_backward(g32, x32, e), dtype),
                          kt::tol(dtype), "backward of " + what);
      }
  // pow(x, 0) is 1 even for NaN; its gradient is 0 even for a NaN grad (as on the CPU).
  const Tensor x = from_vector<float>({NAN, 0.f, -3.f}, {3});
  Tensor out = kt::output({3}, DType::f32, false);
  cuda::pow(DType::f32, x.data_ptr(), out.data_ptr(), 3, 0.0, nullptr);
  kt::require_equal(out, ops::pow(x, 0.0), "pow 0 with NaN");
  cuda::pow_backward(DType::f32, x.data_ptr(), x.data_ptr(), out.data_ptr(),
                     offsets_for<3>({3}, {x, x}), 3, 0.0, nullptr);
  kt::require_equal(out, ops::pow_backward(x, x, 0.0), "pow_backward 0 with NaN");
}

TEST_CASE("cuda kernels: lerp and the backward maps over broadcast, transposed operands",
          "[cuda][kernels][elementwise]") {
  uint64_t seed = 1100;
  for (DType dtype : kDtypes) {
    // lerp in place (out == a) with a broadcast row, on a transposed target (strided path), and
    // contiguous same-shaped operands (vectorized path).
    for (bool transposed : {false, true}) {
      Tensor t = kt::input({9, 33}, dtype, false, -2, 2, seed++);
      if (transposed) t = kt::input({33, 9}, dtype, false, -2, 2, seed++).t();
      const Tensor end = transposed ? kt::input({33}, dtype, true, -2, 2, seed++)
                                    : kt::input({9, 33}, dtype, true, -2, 2, seed++);
      const Tensor t32 = t.to(DType::f32), e32 = end.to(DType::f32);
      const Tensor want = kt::rounded(ops::add(t32, ops::mul(ops::sub(e32, t32), 0.3)), dtype);
      const Shape s = t.shape(), ts = t.strides();
      const Shape es = broadcast_strides(end.shape(), end.strides(), s);
      const auto off = cuda::make_binary_offsets(s.data(), 2, ts.data(), ts.data(), es.data());
      cuda::lerp(dtype, t.data_ptr(), end.data_ptr(), t.data_ptr(), off, t.numel(), 0.3f, nullptr);
      kt::require_close(t.to(DType::f32), want, kt::tol(dtype),
                        detail::str_cat("lerp ", dtype, transposed ? " transposed" : ""));
    }
    // A backward map with grad transposed and the saved tensor broadcast along dim 0.
    const Tensor g = kt::input({7, 5}, dtype, false, -2, 2, seed++).t();
    const Tensor y = kt::input({1, 7}, dtype, true, 0.1, 0.9, seed++);
    Tensor out = kt::output({5, 7}, dtype, false);
    cuda::unary_backward(UnaryBackwardOp::sigmoid, dtype, g.data_ptr(), y.data_ptr(),
                         out.data_ptr(), offsets_for<3>({5, 7}, {g, y}), 35, nullptr);
    kt::require_close(out.to(DType::f32),
                      kt::rounded(ops::sigmoid_backward(g.to(DType::f32), y.to(DType::f32)), dtype),
                      kt::tol(dtype), detail::str_cat("strided sigmoid backward ", dtype));
  }
}

TEST_CASE("cuda kernels: ew_ternary_strided_kernel (div/maximum/minimum backward) matches ops::",
          "[cuda][kernels][elementwise]") {
  using cuda::TernaryBackwardOp;
  const std::vector<std::array<Shape, 3>> shapes = {
      {Shape{300}, Shape{300}, Shape{300}},
      {Shape{4, 5, 6}, Shape{4, 1, 6}, Shape{6}},
      {Shape{3, 1}, Shape{1, 7}, Shape{3, 7}},
  };
  uint64_t seed = 1300;
  for (DType dtype : kDtypes)
    for (const auto& [sg, sa, sb] : shapes)
      for (TernaryBackwardOp op :
           {TernaryBackwardOp::div_other, TernaryBackwardOp::maximum, TernaryBackwardOp::minimum}) {
        const Tensor g = kt::input(sg, dtype, false, -2, 2, seed++);
        Tensor a, b;
        if (op == TernaryBackwardOp::div_other) {
          a = kt::input(sa, dtype, true, -2, 2, seed++);
          b = kt::input(sb, dtype, false, 0.5, 2, seed++);
        } else {  // small integers: ties between a and b are frequent
          Generator gen(seed++);
          a = randint(0, 3, sa, {}, &gen).to(dtype);
          b = randint(0, 3, sb, {}, &gen).to(dtype);
        }
        const Shape shape = broadcast_shapes(broadcast_shapes(sg, sa, "t"), sb, "t");
        Tensor out = kt::output(shape, dtype, false);
        cuda::ternary_backward(op, dtype, g.data_ptr(), a.data_ptr(), b.data_ptr(), out.data_ptr(),
                               offsets_for<4>(shape, {g, a, b}), shape.numel(), nullptr);
        const Tensor g32 = g.to(DType::f32), a32 = a.to(DType::f32), b32 = b.to(DType::f32);
        const Tensor want =
            op == TernaryBackwardOp::div_other ? ops::div_backward_other(g32, a32, b32)
            : op == TernaryBackwardOp::maximum ? ops::maximum_backward(g32, a32, b32)
                                               : ops::minimum_backward(g32, a32, b32);
        kt::require_close(out.to(DType::f32), kt::rounded(want, dtype), kt::tol(dtype),
                          detail::str_cat("ternary op ", static_cast<int>(op), " ", dtype, " ", sg,
                                          " ", sa, " ", sb));
      }
  // NaN operands win nothing in maximum/minimum backward (0, as on the CPU).
  const Tensor g = full({3}, 1.0), a = from_vector<float>({NAN, 1.f, 2.f}, {3});
  const Tensor b = from_vector<float>({1.f, NAN, 2.f}, {3});
  Tensor out = kt::output({3}, DType::f32, false);
  cuda::ternary_backward(TernaryBackwardOp::maximum, DType::f32, g.data_ptr(), a.data_ptr(),
                         b.data_ptr(), out.data_ptr(), offsets_for<4>({3}, {g, a, b}), 3, nullptr);
  kt::require_equal(out, ops::maximum_backward(g, a, b), "NaN in maximum_backward");
  CHECK(out.to_vector<float>() == std::vector<float>{0.f, 0.f, 0.5f});
}
