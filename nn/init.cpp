#include "nn/init.h"

#include <algorithm>
#include <cmath>

#include "core/grad_mode.h"
#include "ops/creation.h"

namespace stoke::nn::init {

namespace {

// The receptive field of a weight (the product of its dims 2..; 1 for a matrix), for `fan`
// ("fan_in" or "fan_out"), which needs a weight with at least 2 dims.
int64_t receptive_field(const Tensor& weight, const char* fan) {
  STOKE_CHECK(weight.dim() >= 2, "init", fan, " needs a weight with >= 2 dims, got shape ",
              weight.shape());
  int64_t receptive = 1;
  for (int64_t d = 2; d < weight.dim(); ++d) receptive *= weight.size(d);
  return receptive;
}

}  // namespace

int64_t fan_in(const Tensor& weight) {
  return receptive_field(weight, "fan_in") * weight.size(1);
}

void uniform_(const Tensor& t, double low, double high, Generator* gen) {
  NoGradGuard no_grad;
  t.detach().copy_(uniform(t.shape(), low, high, {.dtype = t.dtype()}, gen));
}

void kaiming_uniform_(const Tensor& weight, double a, Generator* gen) {
  const double gain = std::sqrt(2.0 / (1.0 + a * a));
  const double bound = gain * std::sqrt(3.0 / static_cast<double>(fan_in(weight)));
  uniform_(weight, -bound, bound, gen);
}

void kaiming_normal_(const Tensor& weight, double a, Generator* gen) {
  NoGradGuard no_grad;
  const double std =
      std::sqrt(2.0 / (1.0 + a * a)) / std::sqrt(static_cast<double>(fan_in(weight)));
  Tensor n = randn(weight.shape(), {.dtype = DType::f64}, gen);
  double* p = n.data<double>();
  for (int64_t i = 0; i < n.numel(); ++i) p[i] *= std;
  weight.detach().copy_(n);
}

void zeros_(const Tensor& t) {
  NoGradGuard no_grad;
  t.detach().copy_(zeros(t.shape(), {.dtype = t.dtype(), .device = t.device()}));
}

int64_t fan_out(const Tensor& weight) {
  return receptive_field(weight, "fan_out") * weight.size(0);
}

void kaiming_normal_fan_out_(const Tensor& weight, Generator* gen) {
  NoGradGuard no_grad;
  const double std = std::sqrt(2.0 / static_cast<double>(fan_out(weight)));
  Tensor n = randn(weight.shape(), {.dtype = DType::f64}, gen);
  double* p = n.data<double>();
  for (int64_t i = 0; i < n.numel(); ++i) p[i] *= std;
  weight.detach().copy_(n);
}

void trunc_normal_(const Tensor& t, double std, double a, double b, Generator* gen) {
  STOKE_CHECK(std > 0 && a < b, "init", "trunc_normal_ needs std > 0 and a < b, got std ", std,
              ", [", a, ", ", b, "]");
  NoGradGuard no_grad;
  Tensor n = randn(t.shape(), {.dtype = DType::f64}, gen);
  double* p = n.data<double>();
  for (int64_t i = 0; i < n.numel(); ++i) {
    // Redraw until inside the bounds (at std 0.02 and bounds +-2, never in practice; with
    // bounds within a few std, a few draws).
    for (int tries = 0; (p[i] * std < a || p[i] * std > b) && tries < 1000; ++tries)
      p[i] = randn({1}, {.dtype = DType::f64}, gen).item();
    p[i] = std::clamp(p[i] * std, a, b);
  }
  t.detach().copy_(n);
}

}  // namespace stoke::nn::init
