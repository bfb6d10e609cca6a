#include "autograd/gradcheck.h"

#include <cmath>
#include <sstream>

#include "autograd/engine.h"
#include "core/grad_mode.h"
#include "core/random.h"

namespace stoke::autograd {
namespace {

// Element offset of logical index i (row-major) in a strided tensor.
int64_t element_offset(const Tensor& t, int64_t i) {
  int64_t off = 0;
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    const int64_t n = t.size(d);
    off += (i % n) * t.stride(d);
    i /= n;
  }
  return off;
}

std::string index_str(const Tensor& t, int64_t i) {
  Shape idx(t.dim());
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    idx[d] = i % t.size(d);
    i /= t.size(d);
  }
  return idx.str();
}

double weighted_sum(const Tensor& out, const std::vector<double>& w) {
  const std::vector<double> v = out.to_vector<double>();
  double s = 0;
  for (size_t i = 0; i < v.size(); ++i) s += v[i] * w[i];
  return s;
}

}  // namespace

GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                          const std::vector<Tensor>& inputs, const GradcheckOptions& options) {
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& x = inputs[k];
    if (!x.defined() || !x.requires_grad()) continue;
    STOKE_CHECK(x.dtype() == DType::f64, "gradcheck", "input ", k, " must be f64, got ", x.dtype());
    for (int64_t d = 0; d < x.dim(); ++d)
      STOKE_CHECK(x.stride(d) != 0 || x.size(d) <= 1, "gradcheck", "input ", k,
                  " is expanded (stride 0); pass a tensor that owns its elements");
  }

  // Analytic: gradients of <w, f(x)>.
  Tensor out = f(inputs);
  STOKE_CHECK(out.requires_grad(), "gradcheck", "the output does not require grad");
  std::vector<double> w(out.numel());
  for (size_t i = 0; i < w.size(); ++i) {
    const auto r = philox4x32(i, 0, options.seed + 12345);
    w[i] = uint32_to_unit_float(r[0]) * 2.0 - 1.0;
  }
  Tensor w_t = empty(out.shape(), {.dtype = DType::f64});
  std::copy(w.begin(), w.end(), w_t.data<double>());
  std::vector<Tensor> diff_inputs;
  std::vector<size_t> diff_index;
  for (size_t k = 0; k < inputs.size(); ++k)
    if (inputs[k].defined() && inputs[k].requires_grad()) {
      diff_inputs.push_back(inputs[k]);
      diff_index.push_back(k);
    }
  STOKE_CHECK(!diff_inputs.empty(), "gradcheck", "no input requires grad");
  const std::vector<Tensor> analytic = grad({out}, diff_inputs, {w_t.to(out.dtype())});

  // Numeric: central differences, one element at a time.
  GradcheckResult result;
  result.max_error = -INFINITY;
  NoGradGuard no_grad;
  for (size_t j = 0; j < diff_inputs.size(); ++j) {
    const Tensor& x = diff_inputs[j];
    const std::vector<double> a = analytic[j].defined() ? analytic[j].to_vector<double>()
                                                        : std::vector<double>(x.numel(), 0.0);
    double* base = static_cast<double*>(x.data_ptr());
    for (int64_t i = 0; i < x.numel(); ++i) {
      double* p = base + element_offset(x, i);
      const double saved = *p;
      *p = saved + options.eps;
      const double plus = weighted_sum(f(inputs), w);
      *p = saved - options.eps;
      const double minus = weighted_sum(f(inputs), w);
      *p = saved;
      const double numeric = (plus - minus) / (2 * options.eps);
      const double err =
          std::fabs(a[i] - numeric) - options.atol - options.rtol * std::fabs(numeric);
      ++result.checked;
      if (err > result.max_error || std::isnan(a[i])) {
        result.max_error = std::isnan(a[i]) ? INFINITY : err;
        std::ostringstream os;
        os << "input " << diff_index[j] << " element " << i << " (index " << index_str(x, i)
           << "): analytic " << a[i] << ", numeric " << numeric;
        result.worst = os.str();
      }
    }
  }
  result.ok = result.max_error <= 0;
  return result;
}

}  // namespace stoke::autograd
