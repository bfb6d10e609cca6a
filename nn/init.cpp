#include "nn/init.h"

#include <cmath>

#include "core/grad_mode.h"
#include "ops/creation.h"

namespace stoke::nn::init {

int64_t fan_in(const Tensor& weight) {
  STOKE_CHECK(weight.dim() >= 2, "init", "fan_in needs a weight with >= 2 dims, got shape ",
              weight.shape());
  int64_t receptive = 1;
  for (int64_t d = 2; d < weight.dim(); ++d) receptive *= weight.size(d);
  return weight.size(1) * receptive;
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

}  // namespace stoke::nn::init
