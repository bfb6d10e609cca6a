// torch.optim's SGD and Adam / AdamW rules (ops/optimizer.h states them) written out element by
// element, independent of ops/, as the references of tests/ops/test_optimizer*.cpp:
//
// - BoundedRule: in long double, with a running bound on how far a kernel that computes in a type
//   of unit roundoff u (f32: 2^-24, f64: 2^-53) can be from the exact value: every operation
//   result z of the kernel is rounded once, off by at most u|z| (u(|a| + |b|) for a sum, which
//   holds whatever order the kernel adds in), and the operands' bounds propagate through the
//   operation (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., 3.3: running error
//   analysis). The propagation below is exact interval arithmetic on the error (products keep
//   their e_a e_b term, quotients and square roots their exact forms), so the bound is rigorous,
//   not first order. Options are converted to the compute type once (u|c|), and values derived
//   from them in f64 first (1 - beta1, lr / (1 - beta1^t), ...) add a few f64 roundings: 2^-48|c|
//   covers 16 of them. The long double reference's own roundings (2^-64 relative) are in u_ref.
//
// - Rounded-store rule: for f16 / bf16 parameters stoke's stated rule is torch's rule computed in
//   f32 on the stored values, every result rounded to the storage type when stored, the update
//   reading the unrounded state (ops/cpu/optimizer.cpp, cuda/kernels/optimizer.h). f32 rounds the
//   same way for the same operations in the same order, so this reference is written in f32 in
//   torch's order of operations (torch/optim/sgd.py and adam.py, the single-tensor paths) and a
//   kernel that follows the rule equals it bit for bit (the build compiles with
//   -ffp-contract=off: no operation is fused into an FMA on one side only).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/half.h"

namespace stoke::testing {

// A reference value and a bound on |kernel's value - v|.
struct Bounded {
  long double v = 0;
  long double e = 0;
};

class BoundedArith {
 public:
  explicit BoundedArith(double u) : u_(u + 0x1p-63L) {}
  double u() const { return static_cast<double>(u_); }

  // A value the kernel reads exactly (a stored parameter, gradient or state element).
  static Bounded exact(long double x) { return {x, 0}; }
  // An option (or a value derived from options in f64) converted to the compute type.
  Bounded constant(long double c) const { return {c, (u_ + 0x1p-48L) * std::fabs(c)}; }

  Bounded add(Bounded a, Bounded b) const {
    const long double v = a.v + b.v;
    return {v, a.e + b.e + u_ * (std::fabs(a.v) + std::fabs(b.v) + a.e + b.e)};
  }
  Bounded sub(Bounded a, Bounded b) const { return add(a, {-b.v, b.e}); }
  Bounded mul(Bounded a, Bounded b) const {
    const long double v = a.v * b.v;
    const long double e = std::fabs(a.v) * b.e + std::fabs(b.v) * a.e + a.e * b.e;
    return {v, e + u_ * (std::fabs(v) + e)};
  }
  // |a'/b' - a/b| <= (e_a + |a/b| e_b) / (|b| - e_b) for |b' - b| <= e_b < |b|.
  Bounded div(Bounded a, Bounded b) const {
    const long double v = a.v / b.v;
    const long double margin = std::fabs(b.v) - b.e;
    const long double e = margin > 0 ? (a.e + std::fabs(v) * b.e) / margin : INFINITY;
    return {v, e + u_ * (std::fabs(v) + e)};
  }
  // |sqrt(x') - sqrt(x)| = |x' - x| / (sqrt(x') + sqrt(x)) <= e / (sqrt(x) + sqrt(max(x - e, 0))).
  Bounded sqrt(Bounded a) const {
    const long double v = std::sqrt(a.v);
    const long double den = v + std::sqrt(std::max<long double>(a.v - a.e, 0));
    const long double e = den > 0 ? std::min(a.e / den, std::sqrt(a.e)) : std::sqrt(a.e);
    return {v, e + u_ * (v + e)};
  }
  // max is 1-Lipschitz in each argument.
  static Bounded max(Bounded a, Bounded b) { return {std::max(a.v, b.v), std::max(a.e, b.e)}; }

 private:
  long double u_;
};

struct SgdRule {
  double lr = 0.01, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
};

// One SGD step on element (w, buf) with gradient g (read exactly); `first`: the buffer's first.
inline void bounded_sgd_step(const BoundedArith& A, const SgdRule& r, bool first, long double g,
                             Bounded& w, Bounded& buf) {
  Bounded d = BoundedArith::exact(g);
  if (r.weight_decay != 0) d = A.add(d, A.mul(A.constant(r.weight_decay), w));
  if (r.momentum != 0) {
    buf = first ? d
                : A.add(A.mul(A.constant(r.momentum), buf),
                        A.mul(A.constant(1 - static_cast<long double>(r.dampening)), d));
    d = r.nesterov ? A.add(d, A.mul(A.constant(r.momentum), buf)) : buf;
  }
  w = A.sub(w, A.mul(A.constant(r.lr), d));
}

struct AdamRule {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  bool decoupled = false, amsgrad = false;
};

// One Adam / AdamW step number t (from 1) on element (w, m, v, vmax) with gradient g.
inline void bounded_adam_step(const BoundedArith& A, const AdamRule& r, int64_t t, long double g,
                              Bounded& w, Bounded& m, Bounded& v, Bounded& vmax) {
  const long double b1 = r.beta1, b2 = r.beta2, lr = r.lr, wd = r.weight_decay;
  Bounded d = BoundedArith::exact(g);
  if (r.decoupled)
    w = A.mul(w, A.constant(1 - lr * wd));
  else if (r.weight_decay != 0)
    d = A.add(d, A.mul(A.constant(wd), w));
  m = A.add(A.mul(m, A.constant(b1)), A.mul(A.constant(1 - b1), d));
  v = A.add(A.mul(v, A.constant(b2)), A.mul(A.mul(A.constant(1 - b2), d), d));
  Bounded vd = v;
  if (r.amsgrad) vd = vmax = BoundedArith::max(vmax, v);
  const long double step_size = lr / (1 - std::pow(b1, static_cast<long double>(t)));
  const long double bias2_sqrt = std::sqrt(1 - std::pow(b2, static_cast<long double>(t)));
  const Bounded denom = A.add(A.div(A.sqrt(vd), A.constant(bias2_sqrt)), A.constant(r.eps));
  w = A.sub(w, A.mul(A.constant(step_size), A.div(m, denom)));
}

// The rounded-store rule for a storage type S (Half or BFloat16): f32 arithmetic in torch's order
// on stored values, each result rounded to S when stored; the update reads the f32 values.
template <class S>
void rounded_sgd_step(const SgdRule& r, bool first, S g, S& w, S& buf) {
  const float wj = float(w);
  float d = float(g);
  // torch: d_p = d_p.add(param, alpha=weight_decay)
  if (r.weight_decay != 0) d = d + float(r.weight_decay) * wj;
  if (r.momentum != 0) {
    // torch: buf = clone(d_p) on the first step, else buf.mul_(momentum).add_(d_p, alpha=1 -
    // dampening)
    const float b = first ? d : float(buf) * float(r.momentum) + float(1 - r.dampening) * d;
    buf = S(b);
    // torch: d_p = d_p.add(buf, alpha=momentum) with nesterov, else d_p = buf
    d = r.nesterov ? d + float(r.momentum) * b : b;
  }
  // torch: param.add_(d_p, alpha=-lr)
  w = S(wj + -float(r.lr) * d);
}

template <class S>
void rounded_adam_step(const AdamRule& r, int64_t t, S g, S& w, S& m, S& v) {
  float wj = float(w);
  float d = float(g);
  // torch (AdamW): param.mul_(1 - lr * weight_decay); (Adam): grad = grad.add(param, alpha=wd)
  if (r.decoupled)
    wj = wj * float(1 - r.lr * r.weight_decay);
  else if (r.weight_decay != 0)
    d = d + float(r.weight_decay) * wj;
  // torch: exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
  const float mj = float(m) * float(r.beta1) + float(1 - r.beta1) * d;
  // torch: exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
  const float vj = float(v) * float(r.beta2) + float(1 - r.beta2) * d * d;
  m = S(mj);
  v = S(vj);
  // torch: step_size = lr / bias_correction1, bias_correction2_sqrt in Python floats (f64);
  // denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps);
  // param.addcdiv_(exp_avg, denom, value=-step_size)
  const double step_size = r.lr / (1 - std::pow(r.beta1, double(t)));
  const double bias2_sqrt = std::sqrt(1 - std::pow(r.beta2, double(t)));
  const float denom = std::sqrt(vj) / float(bias2_sqrt) + float(r.eps);
  w = S(wj + -float(step_size) * (mj / denom));
}

}  // namespace stoke::testing
