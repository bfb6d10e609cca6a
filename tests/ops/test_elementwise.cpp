// Elementwise ops (ops/elementwise.h) against naive reference loops: broadcasting, non-contiguous
// operands, integer dtypes, empty tensors, in-place updates on views, sum_to and error messages.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "autograd/elementwise.h"
#include "ops/elementwise.h"
#include "stoke/stoke.h"
#include "support/fixture.h"
#include "support/fixture_tensor.h"

using namespace stoke;

namespace {

Tensor rnd(const Shape& shape, DType dtype = DType::f32, uint64_t seed = 1) {
  Generator g(seed);
  return randn(shape, {.dtype = dtype}, &g);
}

Shape ref_broadcast(const Shape& a, const Shape& b) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// Flat index into a row-major tensor of `shape` for the broadcast multi-index `idx`.
int64_t bcast_index(const Shape& idx, const Shape& shape) {
  int64_t flat = 0;
  const size_t lead = idx.size() - shape.size();
  for (size_t d = 0; d < shape.size(); ++d)
    flat = flat * shape[d] + (shape[d] == 1 ? 0 : idx[lead + d]);
  return flat;
}

Shape unravel(int64_t p, const Shape& shape) {
  Shape idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = p % shape[d];
    p /= shape[d];
  }
  return idx;
}

// Naive broadcast reference of f(a, b) in double.
std::vector<double> ref_binary(const Tensor& a, const Tensor& b,
                               const std::function<double(double, double)>& f) {
  const Shape s = ref_broadcast(a.shape(), b.shape());
  const auto av = a.to_vector<double>(), bv = b.to_vector<double>();
  std::vector<double> out(s.numel());
  for (int64_t p = 0; p < s.numel(); ++p) {
    const Shape idx = unravel(p, s);
    out[p] = f(av[bcast_index(idx, a.shape())], bv[bcast_index(idx, b.shape())]);
  }
  return out;
}

// Two roundings of the result's dtype, relative to 1 + |want|: a correctly rounded op is off by
// u |want| from the exact value (the double reference of f32 operands is exact or off by u64),
// and the compositions below (x * 2.5 + 1, 1 - x / 2.5: one rounding of an intermediate no larger
// than 1 + |want|, one of the result) by 2 u (1 + |want|). Integer and bool results are exact.
double default_tol(const Tensor& got) {
  return is_floating(got.dtype()) ? 2 * testing::unit_roundoff(got.dtype()) : 0.0;
}

// Compares all elements within tol (1 + |want|) and reports the worst one (one assertion per
// call); tol < 0 takes default_tol.
void check_close(const Tensor& got, const std::vector<double>& want, double tol = -1) {
  if (tol < 0) tol = default_tol(got);
  const auto g = got.to_vector<double>();
  REQUIRE(g.size() == want.size());
  int64_t bad = -1;
  for (size_t i = 0; i < g.size() && bad < 0; ++i) {
    const bool ok = std::isnan(want[i]) ? std::isnan(g[i])
                                        : std::abs(g[i] - want[i]) <= tol * (1 + std::abs(want[i]));
    if (!ok) bad = static_cast<int64_t>(i);
  }
  INFO("first mismatch at element " << bad << ": got " << (bad >= 0 ? g[bad] : 0) << ", want "
                                    << (bad >= 0 ? want[bad] : 0));
  CHECK(bad == -1);
}

// Every binary op against the reference for one pair of operands.
void check_binary_ops(const Tensor& a, const Tensor& b) {
  INFO("shapes " << a.shape() << " and " << b.shape() << ", dtype " << a.dtype());
  const Shape s = ref_broadcast(a.shape(), b.shape());
  CHECK(ops::add(a, b).shape() == s);
  check_close(ops::add(a, b), ref_binary(a, b, [](double x, double y) { return x + y; }));
  check_close(ops::sub(a, b), ref_binary(a, b, [](double x, double y) { return x - y; }));
  check_close(ops::mul(a, b), ref_binary(a, b, [](double x, double y) { return x * y; }));
  check_close(ops::div(a, b), ref_binary(a, b, [](double x, double y) { return x / y; }));
  check_close(ops::maximum(a, b),
              ref_binary(a, b, [](double x, double y) { return std::max(x, y); }));
  check_close(ops::minimum(a, b),
              ref_binary(a, b, [](double x, double y) { return std::min(x, y); }));
  check_close(ops::lt(a, b), ref_binary(a, b, [](double x, double y) { return double(x < y); }));
  check_close(ops::ge(a, b), ref_binary(a, b, [](double x, double y) { return double(x >= y); }));
}

// A fake cuda tensor: registers a host-memory allocator for cuda only while creating it, so the
// ops' device checks can be exercised without a GPU.
struct HostAllocator final : DeviceAllocator {
  void* allocate(size_t n) override { return std::malloc(n ? n : 1); }
  void deallocate(void* p, size_t) override { std::free(p); }
  AllocatorStats stats() const override { return {}; }
  void empty_cache() override {}
};

Tensor fake_cuda_tensor(const Shape& shape) {
  static HostAllocator host;
  DeviceAllocator* previous = nullptr;
  try {
    previous = &allocator_for(Device::cuda());
  } catch (const Error&) {
  }
  register_allocator(Device::Type::cuda, &host);
  auto storage = std::make_shared<Storage>(shape.numel() * 4, Device::cuda(0));
  register_allocator(Device::Type::cuda, previous);
  return Tensor::from_storage(storage, shape, contiguous_strides(shape), 0, DType::f32);
}

}  // namespace

TEST_CASE("elementwise: binary ops, same shape and broadcasting", "[ops][elementwise]") {
  for (DType dt : {DType::f32, DType::f64}) {
    check_binary_ops(rnd({5, 7}, dt, 1), rnd({5, 7}, dt, 2));
    check_binary_ops(rnd({3, 1}, dt, 3), rnd({1, 4}, dt, 4));
    check_binary_ops(rnd({2, 3, 4}, dt, 5), rnd({4}, dt, 6));
    check_binary_ops(rnd({4}, dt, 7), rnd({2, 3, 4}, dt, 8));
    check_binary_ops(rnd({2, 1, 4}, dt, 9), rnd({3, 1}, dt, 10));
    check_binary_ops(rnd({}, dt, 11), rnd({3, 4}, dt, 12));   // 0-dim scalar tensor
    check_binary_ops(rnd({3, 4}, dt, 13), rnd({1}, dt, 14));  // size-1 tensor
  }
  // Large enough to run over the thread pool, both flat and broadcast paths.
  check_binary_ops(rnd({300, 257}, DType::f32, 15), rnd({300, 257}, DType::f32, 16));
  check_binary_ops(rnd({300, 257}, DType::f32, 17), rnd({300, 1}, DType::f32, 18));
}

TEST_CASE("elementwise: non-contiguous operands", "[ops][elementwise]") {
  const Tensor base = rnd({6, 8}, DType::f64, 20);
  const Tensor t = base.t();                // [8, 6], strides [1, 8]
  const Tensor s = base.slice(1, 1, 8, 2);  // [6, 4], strides [8, 2]
  const Tensor u = rnd({4, 6}, DType::f64, 21);
  check_binary_ops(t, rnd({8, 6}, DType::f64, 22));
  check_binary_ops(s, rnd({6, 4}, DType::f64, 23));
  check_binary_ops(s, u.t().slice(0, 0, 6));  // both strided
  check_binary_ops(t.narrow(0, 2, 3), rnd({6}, DType::f64, 24));
  check_binary_ops(rnd({3}, DType::f64, 25).unsqueeze(1).expand({3, 5}), rnd({3, 5}, DType::f64));
  // Transposed operands large enough for the tiled path (partial tiles, outer dims, broadcast).
  check_binary_ops(rnd({70, 45}, DType::f32, 26).t(), rnd({45, 70}, DType::f32, 27));
  check_binary_ops(rnd({45, 70}, DType::f32, 28), rnd({70, 45}, DType::f32, 29).t());
  check_binary_ops(rnd({3, 40, 33}, DType::f64, 30).transpose(1, 2), rnd({33, 1}, DType::f64, 31));
  check_binary_ops(rnd({40, 3, 33}, DType::f64, 32).permute({1, 2, 0}),
                   rnd({3, 33, 40}, DType::f64, 33));
  Tensor big = rnd({50, 40}, DType::f64, 34);
  const Tensor before = big.clone();
  ops::add_(big.t(), rnd({40, 50}, DType::f64, 35));
  check_close(big, ref_binary(before, rnd({40, 50}, DType::f64, 35).t(),
                              [](double x, double y) { return x + y; }));
}

TEST_CASE("elementwise: tensor-scalar and scalar-tensor ops", "[ops][elementwise]") {
  const Tensor x = rnd({4, 5}, DType::f64, 30).t();
  const Tensor one = scalar_tensor(2.5, {.dtype = DType::f64});
  check_close(ops::add(x, 2.5), ref_binary(x, one, [](double a, double b) { return a + b; }));
  check_close(ops::sub(x, 2.5), ref_binary(x, one, [](double a, double b) { return a - b; }));
  check_close(ops::sub(2.5, x), ref_binary(x, one, [](double a, double b) { return b - a; }));
  check_close(ops::mul(x, 2.5), ref_binary(x, one, [](double a, double b) { return a * b; }));
  check_close(ops::div(x, 2.5), ref_binary(x, one, [](double a, double b) { return a / b; }));
  check_close(ops::div(2.5, x), ref_binary(x, one, [](double a, double b) { return b / a; }));
  check_close(ops::gt(x, 0.25), ref_binary(x, one, [](double a, double) { return a > 0.25; }));
  check_close(ops::eq(x, 0.0), ref_binary(x, one, [](double a, double) { return a == 0.0; }));
  // Operators in namespace stoke.
  check_close(x * 2.5 + 1.0, ref_binary(x, one, [](double a, double b) { return a * b + 1; }));
  check_close(1.0 - x / 2.5, ref_binary(x, one, [](double a, double b) { return 1 - a / b; }));
  check_close(2.5 / x, ref_binary(x, one, [](double a, double b) { return b / a; }));
  check_close(-x, ref_binary(x, one, [](double a, double) { return -a; }));
  const Tensor y = rnd({4}, DType::f64, 31);
  check_close(x - y, ref_binary(x, y, [](double a, double b) { return a - b; }));
  check_close(x <= y, ref_binary(x, y, [](double a, double b) { return a <= b; }));
  check_close(x != y, ref_binary(x, y, [](double a, double b) { return a != b; }));
  check_close(x == x, std::vector<double>(20, 1.0));
  CHECK((x > 0.0).dtype() == DType::boolean);
}

TEST_CASE("elementwise: integer dtypes", "[ops][elementwise]") {
  for (DType dt : {DType::i32, DType::i64, DType::u8}) {
    INFO("dtype " << dt);
    const Tensor a = from_vector<int>({1, 2, 3, 4, 5, 6}, {2, 3}, {.dtype = dt});
    const Tensor b = from_vector<int>({3, 2, 1}, {3}, {.dtype = dt});
    CHECK(ops::add(a, b).dtype() == dt);
    CHECK(ops::add(a, b).to_vector<int>() == std::vector<int>{4, 4, 4, 7, 7, 7});
    CHECK(ops::mul(a, b).to_vector<int>() == std::vector<int>{3, 4, 3, 12, 10, 6});
    CHECK(ops::sub(a, 1.0).to_vector<int>() == std::vector<int>{0, 1, 2, 3, 4, 5});
    CHECK(ops::maximum(a, b).to_vector<int>() == std::vector<int>{3, 2, 3, 4, 5, 6});
    CHECK(ops::minimum(a.t(), b.unsqueeze(1)).to_vector<int>() ==
          std::vector<int>{1, 3, 2, 2, 1, 1});
    CHECK(ops::lt(a, b).to_vector<int>() == std::vector<int>{1, 0, 0, 0, 0, 0});
    CHECK(ops::eq(a, 2.0).to_vector<int>() == std::vector<int>{0, 1, 0, 0, 0, 0});
    CHECK(ops::lt(a, 2.5).to_vector<int>() == std::vector<int>{1, 1, 0, 0, 0, 0});
    CHECK(ops::where(ops::gt(a, 3.0), a, ops::mul(a, 10.0)).to_vector<int>() ==
          std::vector<int>{10, 20, 30, 4, 5, 6});
    CHECK(ops::clamp(a, 2, 4).to_vector<int>() == std::vector<int>{2, 2, 3, 4, 4, 4});
    CHECK(ops::relu(ops::sub(a, 3.0)).to_vector<int>() ==
          (dt == DType::u8 ? std::vector<int>{254, 255, 0, 1, 2, 3}
                           : std::vector<int>{0, 0, 0, 1, 2, 3}));
    CHECK_THROWS_WITH(ops::mul(a, 0.5), Catch::Contains("expected an integral scalar"));
    CHECK_THROWS_WITH(ops::exp(a), Catch::Contains("expected a tensor of dtype f32 or f64"));
    CHECK_THROWS_WITH(ops::div(a, b), Catch::Contains("stoke::div"));
  }
  const Tensor n = from_vector<int>({-3, 0, 5}, {3}, {.dtype = DType::i64});
  CHECK(ops::abs(n).to_vector<int>() == std::vector<int>{3, 0, 5});
  CHECK(ops::sign(n).to_vector<int>() == std::vector<int>{-1, 0, 1});
  CHECK(ops::neg(n).to_vector<int>() == std::vector<int>{3, 0, -5});
  const Tensor bools = from_vector<int>({1, 0, 1}, {3}, {.dtype = DType::boolean});
  CHECK(ops::eq(bools, ops::gt(n, 0.0)).to_vector<int>() == std::vector<int>{0, 1, 1});
}

TEST_CASE("elementwise: integer add, sub and mul wrap around on overflow like torch",
          "[ops][elementwise]") {
  // The values torch gives for the same int32/int64/uint8 tensors (two's complement wrap-around).
  constexpr int32_t imax = std::numeric_limits<int32_t>::max();
  constexpr int32_t imin = std::numeric_limits<int32_t>::min();
  const Tensor a = from_vector<int32_t>({imax, imin}, {2}, {.dtype = DType::i32});
  const Tensor one = from_vector<int32_t>({1, 1}, {2}, {.dtype = DType::i32});
  CHECK(ops::mul(a, 2.0).to_vector<int32_t>() == std::vector<int32_t>{-2, 0});
  CHECK(ops::mul(a, a).to_vector<int32_t>() == std::vector<int32_t>{1, 0});
  CHECK(ops::add(a, 1.0).to_vector<int32_t>() == std::vector<int32_t>{imin, imin + 1});
  CHECK(ops::sub(one, a).to_vector<int32_t>() == std::vector<int32_t>{imin + 2, imin + 1});
  CHECK(ops::sub(0.0, a).to_vector<int32_t>() == std::vector<int32_t>{imin + 1, imin});

  constexpr int64_t lmin = std::numeric_limits<int64_t>::min();
  Tensor l = from_vector<int64_t>({lmin, 3}, {2}, {.dtype = DType::i64});
  ops::sub_(l, 1.0);
  CHECK(l.to_vector<int64_t>() == std::vector<int64_t>{std::numeric_limits<int64_t>::max(), 2});
  ops::mul_(l, l);
  CHECK(l.to_vector<int64_t>() == std::vector<int64_t>{1, 4});

  Tensor u = from_vector<int>({200, 10}, {2}, {.dtype = DType::u8});
  CHECK(ops::add(u, 100.0).to_vector<int>() == std::vector<int>{44, 110});
  ops::addcmul_(u, u, u, 2.0);  // 200 + 2 * 200 * 200 = 80200 = 72 (mod 256); 10 + 200 = 210
  CHECK(u.to_vector<int>() == std::vector<int>{72, 210});
}

TEST_CASE("elementwise: empty tensors", "[ops][elementwise]") {
  const Tensor e = zeros({0, 3});
  CHECK(ops::add(e, ones({3})).shape() == Shape{0, 3});
  CHECK(ops::mul(ones({2, 1, 4}), zeros({0, 1})).shape() == Shape{2, 0, 4});
  CHECK(ops::exp(e).shape() == Shape{0, 3});
  CHECK(ops::gt(e, 0.0).shape() == Shape{0, 3});
  CHECK(ops::where(ops::gt(e, 0.0), e, e).numel() == 0);
  CHECK(ops::sum_to(zeros({0, 3}), {3}).to_vector<float>() == std::vector<float>{0, 0, 0});
  CHECK(ops::add_(zeros({0}), ones({1})).numel() == 0);
}

TEST_CASE("elementwise: unary math against std::", "[ops][elementwise]") {
  using F = std::function<double(double)>;
  const Tensor x = rnd({7, 6}, DType::f64, 40).t();
  const Tensor pos = ops::add(ops::abs(x), 0.1);
  // f64 kernels call the same libm functions as the reference (glibc's exp, log, tanh, erf, pow:
  // within 2 ulp, 4 u, by glibc's table of known maximum errors), through other formulas
  // (gelu's normal CDF) for at most 2 calls and 4 more roundings: 12 u; 16 u = 1.8e-15.
  auto check_unary = [](const Tensor& got, const Tensor& in, const F& f,
                        double tol = 16 * 0x1p-53) {
    const auto v = in.to_vector<double>();
    std::vector<double> want(v.size());
    for (size_t i = 0; i < v.size(); ++i) want[i] = f(v[i]);
    check_close(got, want, tol);
  };
  check_unary(ops::neg(x), x, [](double v) { return -v; });
  check_unary(ops::exp(x), x, [](double v) { return std::exp(v); });
  check_unary(ops::log(pos), pos, [](double v) { return std::log(v); });
  check_unary(ops::sqrt(pos), pos, [](double v) { return std::sqrt(v); });
  check_unary(ops::rsqrt(pos), pos, [](double v) { return 1 / std::sqrt(v); });
  check_unary(ops::abs(x), x, [](double v) { return std::abs(v); });
  check_unary(ops::relu(x), x, [](double v) { return v > 0 ? v : 0; });
  check_unary(ops::leaky_relu(x), x, [](double v) { return v > 0 ? v : 0.01 * v; });
  check_unary(ops::leaky_relu(x, 0.2), x, [](double v) { return v > 0 ? v : 0.2 * v; });
  check_unary(ops::sigmoid(x), x, [](double v) { return 1 / (1 + std::exp(-v)); });
  check_unary(ops::tanh(x), x, [](double v) { return std::tanh(v); });
  check_unary(ops::gelu(x), x, [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2))); });
  check_unary(ops::gelu(x, GeluApproximate::tanh), x, [](double v) {
    return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
  });
  check_unary(ops::clamp(x, -0.5, 0.5), x, [](double v) { return std::clamp(v, -0.5, 0.5); });
  check_unary(ops::clamp(x, -0.5, std::nullopt), x, [](double v) { return std::max(v, -0.5); });
  check_unary(ops::clamp(x, std::nullopt, 0.3), x, [](double v) { return std::min(v, 0.3); });
  check_unary(ops::sign(x), x, [](double v) { return double((v > 0) - (v < 0)); });
  check_unary(ops::pow(pos, 2), pos, [](double v) { return v * v; });
  check_unary(ops::pow(pos, 0.5), pos, [](double v) { return std::sqrt(v); });
  check_unary(ops::pow(pos, -1.5), pos, [](double v) { return std::pow(v, -1.5); });
  check_unary(ops::pow(pos, 3), pos, [](double v) { return v * v * v; });
  // f32 agrees with the f64 reference to f32 precision: the input's rounding to f32 (relative
  // |x f'(x) / f(x)| u <= 4 u for |x| < 4), the f32 kernels (exp: < 1.5 ulp = 3 u; the normal CDF
  // through a Chebyshev erfc fit of 1.2e-7 fractional error) and <= 3 more roundings: about 13 u
  // = 7.8e-7 relative to 1 + |want|: 1e-6.
  const Tensor xf = x.to(DType::f32);
  check_close(ops::gelu(xf), ops::gelu(x).to_vector<double>(), 1e-6);
  check_close(ops::sigmoid(xf), ops::sigmoid(x).to_vector<double>(), 1e-6);
  check_close(ops::exp(xf), ops::exp(x).to_vector<double>(), 1e-6);
  // Values PyTorch prints: torch.nn.functional.gelu(torch.tensor([1.0, -0.5])) and approximate;
  // 7 digits (5e-8) and the f32 kernel's ~13 u (above): 1e-6.
  check_close(ops::gelu(from_vector<float>({1.0f, -0.5f}, {2})), {0.8413447, -0.1542687}, 1e-6);
  check_close(ops::gelu(from_vector<float>({1.0f, -0.5f}, {2}), GeluApproximate::tanh),
              {0.8411920, -0.1542859}, 1e-6);
  // NaN propagates through relu, clamp, maximum.
  const Tensor nan = from_vector<float>({NAN, 1}, {2});
  CHECK(std::isnan(ops::relu(nan).to_vector<float>()[0]));
  CHECK(std::isnan(ops::clamp(nan, 0, 0.5).to_vector<float>()[0]));
  CHECK(std::isnan(ops::maximum(nan, zeros({2})).to_vector<float>()[0]));
  CHECK_THROWS_WITH(ops::clamp(x, std::nullopt, std::nullopt),
                    Catch::Contains("at least one of min and max"));
}

TEST_CASE("elementwise: f32 exp over its whole range", "[ops][elementwise]") {
  // The f32 kernel is a vectorized polynomial (ops/cpu/row_kernels.h: below 1.5 ulp relative
  // error): within 3 ulp of the f64 result everywhere (3 * 2^-23 = 3.6e-7 relative).
  const Tensor x = arange(-103, 88.7, 0.00173);
  const auto xv = x.to_vector<float>(), yv = ops::exp(x).to_vector<float>();
  double worst = 0;
  for (size_t i = 0; i < xv.size(); ++i) {
    const double want = std::exp(double(xv[i]));
    if (want < 1.2e-38) continue;  // denormal results: checked in absolute terms below
    worst = std::max(worst, std::abs(yv[i] - want) / want);
  }
  CHECK(worst < 3.6e-7);
  const Tensor edges = from_vector<float>(
      {-INFINITY, -120.f, -100.f, -87.5f, 0.f, 1e-8f, 88.5f, 88.75f, INFINITY, NAN}, {10});
  const auto e = ops::exp(edges).to_vector<float>();
  CHECK(e[0] == 0);  // exact: exp(-inf), and exp(-120) below the smallest denormal
  CHECK(e[1] == 0);
  // exp(-100) = 3.7e-44 is a denormal (spacing 1.4e-45): within one spacing.
  CHECK(std::abs(e[2] - std::exp(-100.0)) < 1.5e-45);
  // 3 ulp (3.6e-7 relative) at the edges of the normal range too.
  CHECK(e[3] == Approx(std::exp(-87.5)).epsilon(3.6e-7));
  CHECK(e[4] == 1);  // exact: e^0, and e^1e-8 rounds to 1 (1e-8 < u)
  CHECK(e[5] == 1);
  CHECK(e[6] == Approx(std::exp(88.5)).epsilon(3.6e-7));
  CHECK(std::isinf(e[7]));
  CHECK(std::isinf(e[8]));
  CHECK(std::isnan(e[9]));
  // Exact: 1 / (1 + e^120) underflows to 0 (below the smallest denormal), 1 / (1 + e^-inf) is 1.
  CHECK(ops::sigmoid(edges).to_vector<float>()[1] == 0);
  CHECK(ops::sigmoid(edges).to_vector<float>()[8] == 1);
}

TEST_CASE("elementwise: f32 gelu and its backward over a wide range", "[ops][elementwise]") {
  // The f32 exact GELU uses a vectorized erfc; compare with a libm loop in f64 on the same
  // values (gelu = x Phi(x), its derivative Phi(x) + x phi(x)). Relative to 1 + |want|: where
  // Phi is ~1 the erfc fit's 1.2e-7 fractional error, exp's 3 u and ~5 roundings give ~12 u =
  // 7e-7; in the left tail the exp argument's rounding (u (|p| + 2 z^2), below) is relative to a
  // value < 1e-8: 1e-6.
  const Tensor x = arange(-12, 12, 0.0011);
  const std::vector<double> xv = x.to_vector<double>();
  std::vector<double> want_y(xv.size()), want_g(xv.size());
  for (size_t i = 0; i < xv.size(); ++i) {
    const double v = xv[i], cdf = 0.5 * std::erfc(-v / std::sqrt(2.0));
    want_y[i] = v * cdf;
    want_g[i] = cdf + v * std::exp(-0.5 * v * v) / std::sqrt(2 * M_PI);
  }
  check_close(ops::gelu(x), want_y, 1e-6);
  check_close(ops::gelu_backward(ones_like(x), x), want_g, 1e-6);
  // Relative accuracy in the left tail, where 1 + erf(x) would cancel in f32: the fit's exp
  // argument p - z^2 (z = -x / sqrt 2) rounds by u (|p| + 2 z^2) absolute, which is relative in
  // e^(p - z^2): 66 u = 3.9e-6 at x = -8 (z^2 = 32, |p| ~1.3); plus exp's 3 u, the fit's 1.2e-7
  // and ~4 roundings: 4.6e-6; 1e-5.
  const auto tail = ops::gelu(from_vector<float>({-6.f, -8.f}, {2})).to_vector<float>();
  CHECK(tail[0] == Approx(-6 * 0.5 * std::erfc(6 / std::sqrt(2.0))).epsilon(1e-5));
  CHECK(tail[1] == Approx(-8 * 0.5 * std::erfc(8 / std::sqrt(2.0))).epsilon(1e-5));
}

TEST_CASE("elementwise: where broadcasts all three operands", "[ops][elementwise]") {
  const Tensor cond = ops::gt(rnd({3, 1}, DType::f32, 50), 0.0);  // [3, 1]
  const Tensor a = rnd({1, 4}, DType::f32, 51);
  const Tensor b = rnd({2, 1, 1}, DType::f32, 52);
  const Tensor y = ops::where(cond, a, b);
  REQUIRE(y.shape() == Shape{2, 3, 4});
  const auto c = cond.to_vector<double>(), av = a.to_vector<double>(), bv = b.to_vector<double>();
  std::vector<double> want;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) want.push_back(c[j] ? av[k] : bv[i]);
  check_close(y, want, 0);  // exact: a selection
  CHECK_THROWS_WITH(ops::where(a, a, b), Catch::Contains("expected cond of dtype bool, got f32"));
}

TEST_CASE("elementwise: in-place ops on contiguous tensors and views", "[ops][elementwise]") {
  // Each op on a transposed view and on a strided slice; untouched elements stay unchanged.
  const Tensor other = rnd({4, 3}, DType::f64, 61);
  const Tensor a = ops::add(ops::abs(rnd({4, 3}, DType::f64, 62)), 0.5);
  const Tensor b = ops::add(ops::abs(rnd({3}, DType::f64, 63)), 0.5);
  using Op = std::function<void(const Tensor&)>;
  using Ref = std::function<double(double, double, double, double)>;  // (t, other, a, b)
  auto run = [&](const Op& op, const Ref& ref) {
    for (int kind = 0; kind < 3; ++kind) {
      Tensor base = rnd({3, 8}, DType::f64, 60);
      const auto before = base.to_vector<double>();
      Tensor t = kind == 0   ? base.narrow(1, 0, 4).t().contiguous()
                 : kind == 1 ? base.narrow(1, 0, 4).t()     // [4, 3], strides [1, 8]
                             : base.slice(1, 1, 8, 2).t();  // [4, 3], strides [2, 8]
      if (kind == 0) base = t;                              // contiguous case: check t itself
      const auto tv = t.to_vector<double>(), ov = other.to_vector<double>();
      const auto av = a.to_vector<double>(), bv = b.to_vector<double>();
      op(t);
      const auto after = t.to_vector<double>();
      for (int i = 0; i < 12; ++i) {
        INFO("kind " << kind << " element " << i);
        // f64, at most 4 roundings (addcdiv: o / a, * -2, +) of intermediates < 25 in magnitude
        // (|t|, |o| < 5 for these N(0, 1) draws; a, b >= 0.5, so |2 o / a| < 20): within
        // 4 u * 25 = 1.1e-14.
        CHECK(after[i] ==
              Approx(ref(tv[i], ov[i], av[i], bv[i % 3])).epsilon(0).margin(100 * 0x1p-53));
      }
      if (kind == 2) {  // the even columns of the base were not written
        const auto now = base.to_vector<double>();
        for (int r = 0; r < 3; ++r)
          for (int c = 0; c < 8; c += 2) CHECK(now[r * 8 + c] == before[r * 8 + c]);
      }
    }
  };
  run([&](const Tensor& t) { ops::add_(t, other); },
      [](double t, double o, double, double) { return t + o; });
  run([&](const Tensor& t) { ops::add_(t, other, -0.5); },
      [](double t, double o, double, double) { return t - 0.5 * o; });
  run([&](const Tensor& t) { ops::add_(t, 1.5); },
      [](double t, double, double, double) { return t + 1.5; });
  run([&](const Tensor& t) { ops::sub_(t, b, 2); },
      [](double t, double, double, double q) { return t - 2 * q; });
  run([&](const Tensor& t) { ops::mul_(t, b); },
      [](double t, double, double, double q) { return t * q; });
  run([&](const Tensor& t) { ops::mul_(t, 0.25); },
      [](double t, double, double, double) { return t * 0.25; });
  run([&](const Tensor& t) { ops::div_(t, a); },
      [](double t, double, double p, double) { return t / p; });
  run([&](const Tensor& t) { ops::div_(t, 4.0); },
      [](double t, double, double, double) { return t / 4; });
  run([&](const Tensor& t) { ops::addcmul_(t, a, b, 0.3); },
      [](double t, double, double p, double q) { return t + 0.3 * p * q; });
  run([&](const Tensor& t) { ops::addcdiv_(t, other, a, -2); },
      [](double t, double o, double p, double) { return t - 2 * o / p; });
  run([&](const Tensor& t) { ops::sqrt_(ops::clamp_(t, 0, std::nullopt)); },
      [](double t, double, double, double) { return std::sqrt(std::max(t, 0.0)); });
  run([&](const Tensor& t) { ops::zero_(t); }, [](double, double, double, double) { return 0.0; });
  run([&](const Tensor& t) { ops::lerp_(t, other, 0.25); },
      [](double t, double o, double, double) { return t + 0.25 * (o - t); });
  run([&](const Tensor& t) { ops::clamp_(t, -0.1, 0.2); },
      [](double t, double, double, double) { return std::clamp(t, -0.1, 0.2); });
  run([&](const Tensor& t) { ops::add_(t, t); },
      [](double t, double, double, double) { return 2 * t; });
}

TEST_CASE("elementwise: in-place errors", "[ops][elementwise][errors]") {
  Tensor w = ones({3}, {.requires_grad = true});
  CHECK_THROWS_WITH(ops::add_(w, ones({3})),
                    Catch::Contains("stoke::add_") && Catch::Contains("in-place operation"));
  {
    NoGradGuard no_grad;
    ops::mul_(w, 2.0);  // optimizer-style update under NoGradGuard is allowed
  }
  CHECK(w.to_vector<float>() == std::vector<float>{2, 2, 2});
  CHECK(w.requires_grad());
  CHECK_THROWS_WITH(ops::add_(zeros({3}), ones({2, 3})),
                    Catch::Contains("cannot be broadcast to the in-place target's shape [3]"));
  CHECK_THROWS_WITH(ops::add_(zeros({1}).expand({4}), ones({4})),
                    Catch::Contains("expanded tensor"));
  CHECK_THROWS_WITH(ops::mul_(zeros({3}), ones({3}, {.dtype = DType::f64})),
                    Catch::Contains("f32 and f64"));
  CHECK_THROWS_WITH(ops::sqrt_(zeros({3}, {.dtype = DType::i64})), Catch::Contains("stoke::sqrt_"));
  // zero_ works on any dtype and any strides.
  Tensor ints = arange(12, {.dtype = DType::i32}).view({3, 4});
  ops::zero_(ints.slice(1, 0, 4, 2));
  CHECK(ints.to_vector<int>() == std::vector<int>{0, 1, 0, 3, 0, 5, 0, 7, 0, 9, 0, 11});
  fill_(ints, 3);
  ops::add_(ints, from_vector<int>({1, 2, 3, 4}, {4}, {.dtype = DType::i32}), 2);
  CHECK(ints.to_vector<int>()[3] == 11);
}

TEST_CASE("elementwise: error messages name shapes, dtypes and devices",
          "[ops][elementwise][errors]") {
  CHECK_THROWS_WITH(ops::add(zeros({2, 3}), zeros({4})), Catch::Contains("stoke::add") &&
                                                             Catch::Contains("[2, 3]") &&
                                                             Catch::Contains("[4]"));
  CHECK_THROWS_WITH(ops::mul(zeros({3}), zeros({3}, {.dtype = DType::f64})),
                    Catch::Contains("stoke::mul") && Catch::Contains("f32 and f64"));
  CHECK_THROWS_WITH(ops::where(ops::gt(zeros({2}), 0.0), zeros({2}), zeros({3})),
                    Catch::Contains("[2]") && Catch::Contains("[3]"));
  const Tensor cuda = fake_cuda_tensor({3});
  CHECK(cuda.device() == Device::cuda(0));
  CHECK_THROWS_WITH(ops::add(cuda, zeros({3})), Catch::Contains("cuda:0"));
  CHECK_THROWS_WITH(ops::exp(cuda), Catch::Contains("stoke::exp") && Catch::Contains("cuda:0"));
  CHECK_THROWS_WITH(ops::add(cuda, 1.0), Catch::Contains("cuda:0"));
  CHECK_THROWS_WITH(ops::gt(cuda, 1.0), Catch::Contains("cuda:0"));
  CHECK_THROWS_WITH(ops::mul_(cuda, 2.0), Catch::Contains("cuda:0"));
  CHECK_THROWS_WITH(ops::sum_to(cuda, {1}), Catch::Contains("cuda:0"));
}

TEST_CASE("elementwise ops: f16/bf16 on the CPU compute in f32 and round back",
          "[ops][elementwise]") {
  // ops/cpu/backend.cpp: f32 copies of the low-precision operands, the f32 kernel, the results
  // rounded to the operands' dtype; in place, the target is written back.
  for (const DType low : {DType::f16, DType::bf16}) {
    INFO(low);
    const Tensor h = randn({7}).to(low);
    const Tensor f = h.to(DType::f32);
    const Tensor e = ops::exp(h);
    CHECK(e.dtype() == low);
    // Exact: the documented dispatch (f32 copies, the f32 kernel, one rounding back).
    CHECK(e.to_vector<float>() == ops::exp(f).to(low).to_vector<float>());
    CHECK(ops::add(h, h).to_vector<float>() == ops::add(f, f).to(low).to_vector<float>());
    CHECK(ops::gt(h, 0.0).dtype() == DType::boolean);
    const Tensor t = f.to(low);  // a copy of h
    ops::mul_(t, 3.0);
    CHECK(t.dtype() == low);
    CHECK(t.to_vector<float>() == ops::mul(f, 3.0).to(low).to_vector<float>());
  }
}

namespace {
// Naive sum_to: every grad element added into its broadcast source position, in double.
std::vector<double> ref_sum_to(const Tensor& grad, const Shape& shape) {
  const auto gv = grad.to_vector<double>();
  std::vector<double> out(shape.numel(), 0.0);
  for (int64_t p = 0; p < grad.numel(); ++p)
    out[bcast_index(unravel(p, grad.shape()), shape)] += gv[p];
  return out;
}
// sum_to of f32 gradients against ref_sum_to within ops::sum's bound (derived in
// tests/ops/test_reduce.cpp): f32 lane chains of 32 additions and f64 between blocks give
// 8 u sqrt(32 sum x^2) with probability 1 - 2 exp(-32), the result's rounding u |sum|, and the
// f64 reference's own recursive sum 8 u64 sqrt(n sum x^2 / 2).
void check_sum_to(const Tensor& grad, const Shape& to) {
  const std::vector<double> want = ref_sum_to(grad, to);
  const Tensor g64 = grad.to(DType::f64);
  const std::vector<double> sq = ref_sum_to(ops::mul(g64, g64), to);
  const double n = static_cast<double>(grad.numel()) / static_cast<double>(want.size());
  const double u = testing::unit_roundoff(DType::f32), u64 = 0x1p-53;
  const std::vector<double> got = ops::sum_to(grad, to).to_vector<double>();
  REQUIRE(got.size() == want.size());
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double bound =
        8 * u * std::sqrt(32 * sq[i]) + u * std::abs(want[i]) + 8 * u64 * std::sqrt(n * sq[i] / 2);
    if (!(std::abs(got[i] - want[i]) <= bound) && bad++ == 0) first = i;
  }
  INFO(bad << " outside the bound; first at " << first << ": got " << (bad ? got[first] : 0.0)
           << ", want " << (bad ? want[first] : 0.0));
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("elementwise: sum_to reduces broadcast dims", "[ops][elementwise][sum_to]") {
  const Tensor g = rnd({2, 3, 4}, DType::f64, 70);
  CHECK(ops::sum_to(g, {2, 3, 4}).is_same(g));
  for (const Shape& s : {Shape{4}, Shape{3, 1}, Shape{1, 3, 1}, Shape{2, 1, 4}, Shape{2, 3, 1},
                         Shape{}, Shape{1}, Shape{1, 1, 1}, Shape{3, 4}, Shape{2, 1, 1}}) {
    INFO("to shape " << s);
    const Tensor r = ops::sum_to(g, s);
    CHECK(r.shape() == s);
    // f64 sums of <= 24 values < 5 on both sides: 2 * 24 u * 5 * 24 = 6e-13, of 1 + |want|.
    check_close(r, ref_sum_to(g, s), 1e-12);
    // Non-contiguous gradient.
    const Tensor gt = rnd({4, 3, 2}, DType::f64, 71).permute({2, 1, 0});
    check_close(ops::sum_to(gt, s), ref_sum_to(gt, s), 1e-12);
  }
  // Large cases over the thread pool, every strategy: many outputs with the inner dim kept
  // (bias grads) or summed, few outputs with many reduced elements (split with partial sums).
  struct Case {
    Shape grad, to;
  };
  for (const Case& c :
       {Case{{512, 300}, {300}}, Case{{300, 512}, {300, 1}}, Case{{65536, 3}, {3}},
        Case{{3, 65536}, {3, 1}}, Case{{200000}, {}}, Case{{16, 8, 32, 32}, {8, 1, 1}},
        Case{{64, 2, 1000}, {2, 1}}, Case{{40, 70, 50}, {1, 70, 1}}}) {
    INFO("grad " << c.grad << " to " << c.to);
    const Tensor big = rnd(c.grad, DType::f32, 72);
    check_sum_to(big, c.to);
    check_sum_to(rnd(c.grad, DType::f32, 73).transpose(0, -1).contiguous().transpose(0, -1), c.to);
  }
  CHECK(ops::sum_to(zeros({3, 0}), {3, 1}).to_vector<float>() == std::vector<float>{0, 0, 0});
  CHECK_THROWS_WITH(ops::sum_to(g, {3, 3}), Catch::Contains("stoke::sum_to") &&
                                                Catch::Contains("[2, 3, 4]") &&
                                                Catch::Contains("[3, 3]"));
  CHECK_THROWS_WITH(ops::sum_to(g, {1, 2, 3, 4}), Catch::Contains("stoke::sum_to"));
}

TEST_CASE("elementwise: silu and hardswish match PyTorch, forward and backward, at the kinks too",
          "[ops][elementwise][fixture]") {
  const auto cases = stoke::testing::load_fixture(stoke::testing::fixture_path("activations.txt"));
  REQUIRE(cases.size() == 2);
  for (const auto& c : cases) {
    for (const DType dtype : {DType::f32, DType::f64}) {
      INFO(c.name << " in " << dtype);
      const Tensor x = stoke::testing::to_tensor(c.tensor("input"), dtype);
      const Tensor g = stoke::testing::to_tensor(c.tensor("grad_output"), dtype);
      const bool silu = c.attr("op") == "silu";
      const Tensor y = silu ? ops::silu(x) : ops::hardswish(x);
      const Tensor gx = silu ? ops::silu_backward(g, x) : ops::hardswish_backward(g, x);
      const auto& want_y = c.tensor("output").values;
      const auto& want_g = c.tensor("grad_input").values;
      // The fixture is torch's f64 result rounded to f32 (u |want|). f32: exp's 3 u and ~4
      // roundings (silu's v / (1 + e^-v), its derivative's s (1 + v (1 - s)) g): ~10 u = 6e-7 of
      // 1 + |want|, 1e-6. f64: that fixture rounding alone, 2^-24 (plus 1e-15 of f64 roundings).
      const double tol = dtype == DType::f32 ? 1e-6 : 0x1p-24 + 1e-15;
      const auto got_y = y.to_vector<double>(), got_g = gx.to_vector<double>();
      for (size_t i = 0; i < want_y.size(); ++i) {
        INFO("x = " << x.to_vector<double>()[i]);
        CHECK(std::abs(got_y[i] - want_y[i]) <= tol * (1 + std::abs(want_y[i])));
        CHECK(std::abs(got_g[i] - want_g[i]) <= tol * (1 + std::abs(want_g[i])));
      }
    }
  }
}

TEST_CASE(
    "elementwise: hardswish's vector path (contiguous f32) matches its scalar path bit for bit",
    "[ops][elementwise]") {
  // Contiguous f32 takes the max/min vector loop of ops/cpu/elementwise_unary.cpp; a strided view
  // of the same values takes the generic map. Exact: both compute v + 3, clamp it to [0, 6] (max
  // and min in the operand order that returns NaN and -0 as the scalar selects do), v * r, then
  // * (1/6): the same IEEE operations in the same order. Special values: NaN stays NaN, -inf gives
  // NaN (-inf * 0, as torch), +inf stays inf, -0 stays -0, and the kinks at -3 and 3.
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> values = {nan,   -inf, inf,    -0.0f,   0.0f, -3.0f, 3.0f,  -6.0f, 6.0f,
                               -2.9f, 2.9f, 1e-40f, -1e-40f, 7.5f, -7.5f, 0.25f, -0.25f};
  for (int i = 0; i < 40; ++i) values.push_back(-8.0f + 0.41f * static_cast<float>(i));
  const int64_t n = static_cast<int64_t>(values.size());
  const Tensor x = from_vector(values, {n});
  // The same values at every other element of a twice-as-long tensor.
  Tensor wide = zeros({n, 2});
  wide.select(1, 0).copy_(x);
  const Tensor strided = wide.select(1, 0);
  REQUIRE_FALSE(strided.is_contiguous());
  const auto fast = ops::hardswish(x).to_vector<float>();
  const auto slow = ops::hardswish(strided).to_vector<float>();
  for (int64_t i = 0; i < n; ++i) {
    INFO("x = " << values[static_cast<size_t>(i)]);
    const float a = fast[static_cast<size_t>(i)], b = slow[static_cast<size_t>(i)];
    CHECK((std::isnan(a) ? std::isnan(b) : std::memcmp(&a, &b, sizeof a) == 0));
  }
  CHECK(std::isnan(fast[0]));
  CHECK(std::isnan(fast[1]));
  CHECK(fast[2] == inf);
  CHECK(std::signbit(fast[3]));
  CHECK(fast[6] == 3.0f);
  CHECK(fast[5] == 0.0f);
  // The backward likewise, exact: both compute g * (v * (1/3) + 1/2) between the kinks, as a
  // multiply, an add and a multiply (-ffp-contract=off keeps GCC from fusing the scalar path's
  // into an FMA, which made them an ulp apart), and select 0 below -3, g from 3 on and for NaN.
  std::vector<float> grads(values.size());
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = 0.5f + 0.37f * static_cast<float>(i % 7);
  const Tensor g = from_vector(grads, {n});
  Tensor wide_g = zeros({n, 2});
  wide_g.select(1, 0).copy_(g);
  const auto fast_g = ops::hardswish_backward(g, x).to_vector<float>();
  const auto slow_g = ops::hardswish_backward(wide_g.select(1, 0), strided).to_vector<float>();
  for (int64_t i = 0; i < n; ++i) {
    INFO("x = " << values[static_cast<size_t>(i)]);
    const float a = fast_g[static_cast<size_t>(i)], b = slow_g[static_cast<size_t>(i)];
    CHECK((std::isnan(a) ? std::isnan(b) : std::memcmp(&a, &b, sizeof a) == 0));
  }
  CHECK(fast_g[0] == grads[0]);  // NaN
  CHECK(fast_g[1] == 0.0f);      // -inf
  CHECK(fast_g[2] == grads[2]);  // +inf
  // -3: g * (-3 * float(1/3) + 1/2) = g * -0.5 exactly: 3 * float(1/3) = 1 + 2^-25 rounds to 1.
  CHECK(fast_g[5] == -0.5f * grads[5]);
  CHECK(fast_g[6] == grads[6]);  // 3
}
