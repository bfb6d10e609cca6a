// Index ops on cuda tensors: index_select and gather (any dtype forward; the scatter-add backward
// through autograd, with repeated indices), embedding, and the device-side range check
// (check_index_range) that makes a bad index fail with the CPU's message at the next sync.
#include "apps/selftest/ops_checks.h"

namespace stoke::selftest {

using namespace ops_checks;

namespace index_checks {

// The message `fn` throws, or "" when it does not.
template <class F>
std::string error_of(F&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// Scatter-adds accumulate repeated indices with atomics in the gradient's dtype on the device,
// rounding after each add (f16/bf16), in an order that varies from run to run.
double scatter_tol(DType dt) {
  return 2 * tolerance(dt);
}

// One index op (index_select or gather along `dim`): ops::name on every dtype, then stoke::name's
// backward on the float dtypes, the device against the CPU. Inputs are drawn from seed, seed + 1
// and seed + 2.
template <class Raw, class Differentiable>
void check_index_op(Suite& s, const std::string& name, const std::string& label, const Shape& xs,
                    const Tensor& index, uint64_t seed, Raw raw, Differentiable differentiable) {
  for (DType dt : all_types()) {
    const Tensor x = exact_values(xs, dt, seed);
    compare_on(s, name, label, dt, raw(x.to(dev()), index.to(dev())), raw(x, index), 0);
  }
  for (DType dt : float_types()) {
    Leaf x = leaf(randn_cpu(xs, seed + 1), dt);
    const Tensor got = differentiable(x.dev, index.to(dev()));
    const Tensor ref = differentiable(x.cpu, index);
    backward_both(got, ref, randn_cpu(ref.shape(), seed + 2), dt);
    compare_on(s, name + " backward", label, dt, x.dev.grad(), x.cpu.grad(), scatter_tol(dt));
  }
}

}  // namespace index_checks

void check_index(Suite& s, bool quick) {
  using namespace index_checks;
  const Shape xs = quick ? Shape{6, 37, 5} : Shape{64, 1001, 33};
  const std::string l = shape_str(xs);
  // index_select along each dim, with repeats; every dtype forward.
  for (int64_t dim = 0; dim < 3; ++dim) {
    const Tensor index = randint_cpu(0, xs[dim], {quick ? int64_t{9} : 500}, DType::i64, 300 + dim);
    check_index_op(
        s, "index_select", l + " dim " + std::to_string(dim), xs, index, 310,
        [dim](const Tensor& x, const Tensor& i) { return ops::index_select(x, dim, i); },
        [dim](const Tensor& x, const Tensor& i) { return stoke::index_select(x, dim, i); });
  }
  // gather along each dim (index of another size than x in that dim), and its backward.
  for (int64_t dim = 0; dim < 3; ++dim) {
    Shape is = xs;
    is[0] = std::max<int64_t>(1, xs[0] - 1);
    is[dim] = xs[dim] + 3;  // more positions than the dim: repeats are certain
    const Tensor index = randint_cpu(0, xs[dim], is, DType::i64, 320 + dim);
    check_index_op(
        s, "gather", l + " dim " + std::to_string(dim) + " index " + shape_str(is), xs, index, 321,
        [dim](const Tensor& x, const Tensor& i) { return ops::gather(x, dim, i); },
        [dim](const Tensor& x, const Tensor& i) { return stoke::gather(x, dim, i); });
  }
  // embedding: a (V, D) table looked up by a (B, T) index, and its gradient.
  const int64_t V = quick ? 50 : 30000, D = quick ? 12 : 300;
  const Tensor ids = randint_cpu(0, V, {4, quick ? int64_t{7} : 128}, DType::i64, 330);
  const std::string le = dims({V, D}) + " [" + shape_str(ids.shape()) + "]";
  for (DType dt : float_types()) {
    Leaf w = leaf(randn_cpu({V, D}, 331), dt);
    const Tensor got = stoke::embedding(w.dev, ids.to(dev()));
    const Tensor ref = stoke::embedding(w.cpu, ids);
    compare_on(s, "embedding", le, dt, got, ref, 0);
    backward_both(got, ref, randn_cpu(ref.shape(), 332), dt);
    compare_on(s, "embedding backward", le, dt, w.dev.grad(), w.cpu.grad(), scatter_tol(dt));
  }
  // one_hot, with num_classes given and inferred (the maximum read back).
  const Tensor labels = randint_cpu(0, 7, {3, 11}, DType::i64, 335);
  compare_on(s, "one_hot 9 classes", "3x11", DType::i64, ops::one_hot(labels.to(dev()), 9),
             ops::one_hot(labels, 9), 0);
  compare_on(s, "one_hot (inferred classes)", "3x11", DType::i64, ops::one_hot(labels.to(dev())),
             ops::one_hot(labels), 0);
  // A bad index fails on the device with the CPU's message, raised at the next synchronization (the
  // read-back of the result here), for index_select, gather and embedding.
  const Tensor x = randn_cpu({5, 4}, 340);
  Tensor bad = randint_cpu(0, 5, {300}, DType::i64, 341);
  bad.data<int64_t>()[257] = 5;  // past the first block of the check kernel
  Tensor neg = randint_cpu(0, 4, {5, 4}, DType::i64, 342);
  neg.data<int64_t>()[6] = -1;
  const std::pair<const char*, std::pair<std::string, std::string>> errors[] = {
      {"index_select (index 5 of 5)",
       {error_of([&] { ops::index_select(x.to(dev()), 0, bad.to(dev())).to(Device::cpu()); }),
        error_of([&] { ops::index_select(x, 0, bad); })}},
      {"gather (index -1)",
       {error_of([&] { ops::gather(x.to(dev()), 1, neg.to(dev())).to(Device::cpu()); }),
        error_of([&] { ops::gather(x, 1, neg); })}},
      {"embedding (index 5 of 5)",
       {error_of([&] { ops::embedding(x.to(dev()), bad.to(dev())).to(Device::cpu()); }),
        error_of([&] { ops::embedding(x, bad); })}},
  };
  for (const auto& [name, msgs] : errors)
    s.expect(std::string("bad index error: ") + name, "5x4", "i64",
             !msgs.second.empty() && msgs.first.rfind(msgs.second, 0) == 0,
             "cuda said \"" + msgs.first + "\", cpu said \"" + msgs.second + "\"");
}

}  // namespace stoke::selftest
