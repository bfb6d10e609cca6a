#include "examples/selftest/coverage.h"

#include "core/error.h"

namespace stoke::selftest {

using ops::BatchNormForward;
using ops::BatchNormGrads;
using ops::BinaryOp;
using ops::CompareOp;
using ops::Conv2dGrads;
using ops::CrossEntropyForward;
using ops::DropoutResult;
using ops::LinearGrads;
using ops::MaxPool2dResult;
using ops::UnaryGradOp;
using ops::UnaryOp;
using ops::ValuesIndices;

// Forwards every method to the wrapped kernels after counting it.
struct CoverageScope::Decorator final : ops::DeviceKernels {
  Decorator(ops::DeviceKernels& inner, State& state) : k(inner), s(state) {}
  ops::DeviceKernels& k;
  State& s;

  void hit(Method m, const Tensor& t) {
    const auto i = static_cast<size_t>(m);
    s.calls[i].fetch_add(1, std::memory_order_relaxed);
    if (t.defined())
      s.dtypes[i].fetch_or(1u << static_cast<unsigned>(t.dtype()), std::memory_order_relaxed);
  }

  Device::Type type() const override { return k.type(); }
  void use_device(const char* op, Device device) const override { k.use_device(op, device); }

  void fill(const Tensor& t, double value) override {
    hit(Method::fill, t);
    k.fill(t, value);
  }
  void copy_strided(const Tensor& dst, const Tensor& src) override {
    hit(Method::copy_strided, src);
    k.copy_strided(dst, src);
  }
  Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) override {
    hit(Method::binary, a);
    return k.binary(op, a, b);
  }
  Tensor binary_scalar(BinaryOp op, const Tensor& a, double v, bool first) override {
    hit(Method::binary_scalar, a);
    return k.binary_scalar(op, a, v, first);
  }
  Tensor unary(UnaryOp op, const Tensor& x) override {
    hit(Method::unary, x);
    return k.unary(op, x);
  }
  Tensor leaky_relu(const Tensor& x, double slope) override {
    hit(Method::leaky_relu, x);
    return k.leaky_relu(x, slope);
  }
  Tensor clamp(const Tensor& x, std::optional<double> lo, std::optional<double> hi) override {
    hit(Method::clamp, x);
    return k.clamp(x, lo, hi);
  }
  Tensor relu_backward(const Tensor& grad, const Tensor& x) override {
    hit(Method::relu_backward, grad);
    return k.relu_backward(grad, x);
  }
  void binary_(BinaryOp op, const Tensor& t, const Tensor& other, double alpha) override {
    hit(Method::binary_, t);
    k.binary_(op, t, other, alpha);
  }
  void binary_scalar_(BinaryOp op, const Tensor& t, double v) override {
    hit(Method::binary_scalar_, t);
    k.binary_scalar_(op, t, v);
  }
  Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) override {
    hit(Method::sum, x);
    return k.sum(x, dims, keepdim);
  }
  Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) override {
    hit(Method::mean, x);
    return k.mean(x, dims, keepdim);
  }
  ValuesIndices max_with_indices(const Tensor& x, int64_t dim, bool keepdim) override {
    hit(Method::max_with_indices, x);
    return k.max_with_indices(x, dim, keepdim);
  }
  ValuesIndices min_with_indices(const Tensor& x, int64_t dim, bool keepdim) override {
    hit(Method::min_with_indices, x);
    return k.min_with_indices(x, dim, keepdim);
  }
  Tensor softmax(const Tensor& x, int64_t dim, bool log) override {
    hit(Method::softmax, x);
    return k.softmax(x, dim, log);
  }
  Tensor softmax_backward(const Tensor& grad, const Tensor& out, int64_t dim, bool log) override {
    hit(Method::softmax_backward, grad);
    return k.softmax_backward(grad, out, dim, log);
  }
  CrossEntropyForward cross_entropy_forward(const Tensor& logits, const Tensor& target,
                                            const CrossEntropyOptions& o) override {
    hit(Method::cross_entropy_forward, logits);
    return k.cross_entropy_forward(logits, target, o);
  }
  Tensor cross_entropy_backward(const Tensor& grad, const Tensor& logits, const Tensor& target,
                                const Tensor& lse, const CrossEntropyOptions& o) override {
    hit(Method::cross_entropy_backward, logits);
    return k.cross_entropy_backward(grad, logits, target, lse, o);
  }
  Tensor matmul(const Tensor& a, const Tensor& b) override {
    hit(Method::matmul, a);
    return k.matmul(a, b);
  }
  Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b) override {
    hit(Method::linear, x);
    return k.linear(x, w, b);
  }
  LinearGrads linear_backward(const Tensor& g, const Tensor& x, const Tensor& w, bool ni, bool nw,
                              bool nb) override {
    hit(Method::linear_backward, x);
    return k.linear_backward(g, x, w, ni, nw, nb);
  }
  Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b,
                const Conv2dOptions& o) override {
    hit(Method::conv2d, x);
    return k.conv2d(x, w, b, o);
  }
  Conv2dGrads conv2d_backward(const Tensor& g, const Tensor& x, const Tensor& w,
                              const Conv2dOptions& o, bool ni, bool nw, bool nb) override {
    hit(Method::conv2d_backward, x);
    return k.conv2d_backward(g, x, w, o, ni, nw, nb);
  }
  MaxPool2dResult max_pool2d_with_indices(const Tensor& x, const Pool2dOptions& o) override {
    hit(Method::max_pool2d_with_indices, x);
    return k.max_pool2d_with_indices(x, o);
  }
  Tensor max_pool2d_backward(const Tensor& g, const Tensor& idx, const Shape& shape,
                             const Pool2dOptions& o) override {
    hit(Method::max_pool2d_backward, g);
    return k.max_pool2d_backward(g, idx, shape, o);
  }
  Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& o) override {
    hit(Method::avg_pool2d, x);
    return k.avg_pool2d(x, o);
  }
  Tensor avg_pool2d_backward(const Tensor& g, const Shape& shape, const Pool2dOptions& o) override {
    hit(Method::avg_pool2d_backward, g);
    return k.avg_pool2d_backward(g, shape, o);
  }
  Tensor adaptive_avg_pool2d(const Tensor& x, std::array<int64_t, 2> size) override {
    hit(Method::adaptive_avg_pool2d, x);
    return k.adaptive_avg_pool2d(x, size);
  }
  Tensor adaptive_avg_pool2d_backward(const Tensor& g, const Shape& shape) override {
    hit(Method::adaptive_avg_pool2d_backward, g);
    return k.adaptive_avg_pool2d_backward(g, shape);
  }
  BatchNormForward batch_norm_forward(const Tensor& x, const Tensor& rm, const Tensor& rv,
                                      const Tensor& w, const Tensor& b,
                                      const BatchNormOptions& o) override {
    hit(Method::batch_norm_forward, x);
    return k.batch_norm_forward(x, rm, rv, w, b, o);
  }
  BatchNormGrads batch_norm_backward(const Tensor& g, const Tensor& x, const Tensor& w,
                                     const Tensor& mean, const Tensor& invstd, bool training,
                                     std::array<bool, 3> mask) override {
    hit(Method::batch_norm_backward, x);
    return k.batch_norm_backward(g, x, w, mean, invstd, training, mask);
  }
  DropoutResult dropout_with_mask(const Tensor& x, double p, GeneratorState st) override {
    hit(Method::dropout_with_mask, x);
    return k.dropout_with_mask(x, p, st);
  }
  Tensor dropout_backward(const Tensor& g, const Tensor& mask, double p) override {
    hit(Method::dropout_backward, g);
    return k.dropout_backward(g, mask, p);
  }
  Tensor unary_backward(UnaryGradOp op, const Tensor& g, const Tensor& saved,
                        const ops::UnaryGradParams& p) override {
    hit(Method::unary_backward, g);
    return k.unary_backward(op, g, saved, p);
  }
  Tensor compare(CompareOp op, const Tensor& a, const Tensor& b) override {
    hit(Method::compare, a);
    return k.compare(op, a, b);
  }
  Tensor compare_scalar(CompareOp op, const Tensor& a, double v) override {
    hit(Method::compare_scalar, a);
    return k.compare_scalar(op, a, v);
  }
  Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) override {
    hit(Method::where, a);
    return k.where(cond, a, b);
  }
  Tensor where_backward(const Tensor& g, const Tensor& cond, bool for_a) override {
    hit(Method::where_backward, g);
    return k.where_backward(g, cond, for_a);
  }
  Tensor pow(const Tensor& x, double e) override {
    hit(Method::pow, x);
    return k.pow(x, e);
  }
  Tensor pow_backward(const Tensor& g, const Tensor& x, double e) override {
    hit(Method::pow_backward, g);
    return k.pow_backward(g, x, e);
  }
  Tensor div_backward_other(const Tensor& g, const Tensor& a, const Tensor& b) override {
    hit(Method::div_backward_other, g);
    return k.div_backward_other(g, a, b);
  }
  Tensor minmax_backward(bool max, const Tensor& g, const Tensor& a, const Tensor& b) override {
    hit(Method::minmax_backward, g);
    return k.minmax_backward(max, g, a, b);
  }
  void sqrt_(const Tensor& t) override {
    hit(Method::sqrt_, t);
    k.sqrt_(t);
  }
  void clamp_(const Tensor& t, std::optional<double> lo, std::optional<double> hi) override {
    hit(Method::clamp_, t);
    k.clamp_(t, lo, hi);
  }
  void lerp_(const Tensor& t, const Tensor& end, double w) override {
    hit(Method::lerp_, t);
    k.lerp_(t, end, w);
  }
  void check_index_range(const char* op, const Tensor& index, int64_t bound,
                         std::function<std::string(int64_t)> describe) override {
    hit(Method::check_index_range, index);
    k.check_index_range(op, index, bound, std::move(describe));
  }
  Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index,
                      const Shape& out_shape) override {
    hit(Method::index_select, x);
    return k.index_select(x, dim, index, out_shape);
  }
  Tensor index_select_backward(const Tensor& g, int64_t dim, const Tensor& index,
                               const Shape& shape) override {
    hit(Method::index_select_backward, g);
    return k.index_select_backward(g, dim, index, shape);
  }
  Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) override {
    hit(Method::gather, x);
    return k.gather(x, dim, index);
  }
  Tensor gather_backward(const Tensor& g, int64_t dim, const Tensor& index,
                         const Shape& shape) override {
    hit(Method::gather_backward, g);
    return k.gather_backward(g, dim, index, shape);
  }
  void normalize_u8_nhwc(const Tensor& images, const Tensor& out, const std::vector<float>& mean,
                         const std::vector<float>& std) override {
    hit(Method::normalize_u8_nhwc, out);
    k.normalize_u8_nhwc(images, out, mean, std);
  }
};

CoverageScope::CoverageScope()
    : inner_(&ops::device_kernels("stoke-gpu-selftest", Device::cuda(0))),
      decorator_(new Decorator(*inner_, state_)) {
  ops::register_device_kernels(Device::Type::cuda, decorator_);
}

CoverageScope::~CoverageScope() {
  ops::register_device_kernels(Device::Type::cuda, inner_);
  delete decorator_;
}

Coverage CoverageScope::snapshot() const {
  Coverage c;
  for (size_t i = 0; i < kMethodCount; ++i) {
    c.calls[i] = state_.calls[i].load();
    c.dtypes[i] = state_.dtypes[i].load();
  }
  return c;
}

namespace {
size_t index_of(std::string_view method) {
  for (size_t i = 0; i < kMethodCount; ++i)
    if (kMethods[i] == method) return i;
  STOKE_FAIL("selftest::Coverage", "no DeviceKernels method named ", std::string(method));
}
}  // namespace

int64_t Coverage::calls_of(std::string_view method) const {
  return calls[index_of(method)];
}

bool Coverage::saw(std::string_view method, DType dtype) const {
  return (dtypes[index_of(method)] >> static_cast<unsigned>(dtype)) & 1u;
}

std::string Coverage::never_called() const {
  std::string s;
  for (size_t i = 0; i < kMethodCount; ++i)
    if (calls[i] == 0) s.append(s.empty() ? "" : ", ").append(kMethods[i]);
  return s;
}

std::vector<std::string> Coverage::lines() const {
  std::vector<std::string> out;
  for (size_t i = 0; i < kMethodCount; ++i) {
    std::string line = detail::str_cat(kMethods[i], ": ", calls[i], " calls (");
    bool first = true;
    for (unsigned d = 0; d < 8; ++d) {
      if (!((dtypes[i] >> d) & 1u)) continue;
      line.append(first ? "" : " ").append(dtype_name(static_cast<DType>(d)));
      first = false;
    }
    out.push_back(line + ")");
  }
  return out;
}

}  // namespace stoke::selftest
