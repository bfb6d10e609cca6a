// Naive convolution loops in double, the references of the conv tests (tests/ops/test_conv2d.cpp,
// tests/autograd/test_conv2d_grad.cpp), and the pieces of their rounding-error bounds: each
// element's sum of |terms| (the same loops on absolute values), its number of terms, and the growth
// of Winograd's transformed basis.
#pragma once

#include <vector>

#include "ops/conv2d.h"
#include "stoke/stoke.h"

namespace stoke::testing {

// Direct 7-loop convolution in double.
inline Tensor naive_conv2d(const Tensor& x, const Tensor& w, const Tensor& b,
                           const ops::Conv2dOptions& o) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t K = w.size(0), Cg = w.size(1), kh = w.size(2), kw = w.size(3);
  const int64_t Kg = K / o.groups;
  const int64_t OH = (H + 2 * o.padding[0] - o.dilation[0] * (kh - 1) - 1) / o.stride[0] + 1;
  const int64_t OW = (W + 2 * o.padding[1] - o.dilation[1] * (kw - 1) - 1) / o.stride[1] + 1;
  const std::vector<double> xv = x.to_vector<double>(), wv = w.to_vector<double>();
  const std::vector<double> bv = b.defined() ? b.to_vector<double>() : std::vector<double>(K, 0.0);
  std::vector<double> out(static_cast<size_t>(N * K * OH * OW));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double s = bv[k];
          const int64_t g = k / Kg;
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t i = 0; i < kh; ++i)
              for (int64_t j = 0; j < kw; ++j) {
                const int64_t ih = oh * o.stride[0] - o.padding[0] + i * o.dilation[0];
                const int64_t iw = ow * o.stride[1] - o.padding[1] + j * o.dilation[1];
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                s += xv[((n * C + g * Cg + c) * H + ih) * W + iw] *
                     wv[((k * Cg + c) * kh + i) * kw + j];
              }
          out[((n * K + k) * OH + oh) * OW + ow] = s;
        }
  return from_vector(out, {N, K, OH, OW}, {.dtype = DType::f64});
}

// The adjoint of naive_conv2d in double: grad_input and grad_weight of <g, conv(x, w)>.
struct NaiveGrads {
  Tensor input, weight;
};
inline NaiveGrads naive_conv2d_backward(const Tensor& g, const Tensor& x, const Tensor& w,
                                        const ops::Conv2dOptions& o) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t K = w.size(0), Cg = w.size(1), kh = w.size(2), kw = w.size(3);
  const int64_t Kg = K / o.groups, OH = g.size(2), OW = g.size(3);
  const std::vector<double> gv = g.to_vector<double>(), xv = x.to_vector<double>(),
                            wv = w.to_vector<double>();
  std::vector<double> gi(xv.size(), 0.0), gw(wv.size(), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          const double go = gv[((n * K + k) * OH + oh) * OW + ow];
          const int64_t grp = k / Kg;
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t i = 0; i < kh; ++i)
              for (int64_t j = 0; j < kw; ++j) {
                const int64_t ih = oh * o.stride[0] - o.padding[0] + i * o.dilation[0];
                const int64_t iw = ow * o.stride[1] - o.padding[1] + j * o.dilation[1];
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                const int64_t xi = ((n * C + grp * Cg + c) * H + ih) * W + iw;
                const int64_t wi = ((k * Cg + c) * kh + i) * kw + j;
                gi[xi] += go * wv[wi];
                gw[wi] += go * xv[xi];
              }
        }
  return {from_vector(gi, x.shape(), {.dtype = DType::f64}),
          from_vector(gw, w.shape(), {.dtype = DType::f64})};
}

inline Tensor abs64(const Tensor& t) {
  return t.defined() ? ops::abs(t.to(DType::f64)) : t;
}

// The sums of |terms| of every output and gradient element: the naive loops on absolute values.
struct AbsSums {
  Tensor output, input, weight, bias;
};
inline AbsSums abs_sums(const Tensor& g, const Tensor& x, const Tensor& w, const Tensor& b,
                        const ops::Conv2dOptions& o) {
  const NaiveGrads a = naive_conv2d_backward(abs64(g), abs64(x), abs64(w), o);
  return {naive_conv2d(abs64(x), abs64(w), abs64(b), o), a.input, a.weight,
          ops::sum(abs64(g), {0, 2, 3})};
}

// The number of rounded terms on each element's path (n of testing::sum_error_factor): a forward
// output adds C/groups * kh * kw products and the bias; an input gradient element at most
// K/groups * kh * kw; a weight gradient element N * OH * OW; a bias gradient element N * OH * OW.
struct TermCounts {
  int64_t output, input, weight;
};
inline TermCounts term_counts(const Shape& x, const Shape& w, const Shape& y, int64_t groups) {
  return {w[1] * w[2] * w[3] + 1, w[0] / groups * w[2] * w[3], x[0] * y[2] * y[3]};
}

// Winograd F(2x2, 3x3) (f32 3x3 stride-1 layers, 32+ channels in and out forward, 16+ backward)
// adds the channel products in a transformed basis whose terms are larger: the transforms'
// coefficient sums (A^T, G, B^T of Lavin & Gray, 2016) are 8/3 per axis, so (8/3)^2 = 7.1 times
// the direct sum|terms| on i.i.d. data, plus a handful of roundings per path (the transforms add
// 4 terms per axis): a growth of 8. 1 for the other kernels, which add the direct terms.
inline double winograd_growth(const Shape& x, const Shape& w, const ops::Conv2dOptions& o) {
  const bool may_run = w[2] == 3 && w[3] == 3 && o.stride[0] == 1 && o.stride[1] == 1 &&
                       o.dilation[0] == 1 && o.dilation[1] == 1 && o.groups == 1 && x[1] >= 16 &&
                       w[0] >= 16;
  return may_run ? 8.0 : 1.0;
}

}  // namespace stoke::testing
