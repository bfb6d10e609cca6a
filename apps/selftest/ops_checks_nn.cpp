// The layers' ops on cuda tensors through autograd (forward and every gradient, as a training
// step runs them): conv2d (stride, padding, dilation, groups, bias, non-square kernels; with
// cuDNN and with stoke's kernels on the real backend), max/avg/adaptive pooling, batch norm
// (training with the running statistics, evaluation), dropout (masks bit for bit), and the
// optimizer updates (ops::sgd_step_, ops::adam_step_ on f32 parameters, as the optimizers step).
#include "apps/selftest/ops_checks.h"
#include "ops/cuda/backend.h"
#include "ops/optimizer.h"

namespace stoke::selftest {

using namespace ops_checks;

namespace nn_checks {

// Puts back the convolution implementation the dispatch had.
struct ConvImplGuard {
  ops::cuda_glue::ConvImpl saved = ops::cuda_glue::conv_impl();
  ~ConvImplGuard() { ops::cuda_glue::set_conv_impl(saved); }
};

// The gradients of a normalization with an affine weight and bias (f32 for every input dtype):
// rows "OP backward dx", "... dweight" and "... dbias", each followed by `mode`.
void compare_affine_grads(Suite& s, const std::string& op, const std::string& mode,
                          const std::string& shape, DType dt, const Leaf& x, const Leaf& w,
                          const Leaf& b, double tol) {
  compare_on(s, op + " backward dx" + mode, shape, dt, x.dev.grad(), x.cpu.grad(), tol);
  compare_on(s, op + " backward dweight" + mode, shape, DType::f32, w.dev.grad(), w.cpu.grad(),
             tol);
  compare_on(s, op + " backward dbias" + mode, shape, DType::f32, b.dev.grad(), b.cpu.grad(), tol);
}

}  // namespace nn_checks

void check_conv2d(Suite& s, bool quick) {
  using namespace nn_checks;
  struct Case {
    int64_t n, c, h, w, k, kh, kw;
    Conv2dOptions o;
    bool bias;
  };
  std::vector<Case> cases = {
      {2, 3, 8, 8, 4, 3, 3, {.padding = {1, 1}}, true},
      {2, 4, 9, 7, 6, 3, 3, {.stride = {2, 2}, .padding = {1, 1}, .groups = 2}, false},
      {1, 3, 10, 10, 5, 3, 3, {.padding = {2, 2}, .dilation = {2, 2}}, true},
      {1, 2, 6, 5, 3, 2, 3, {.stride = {2, 1}, .padding = {0, 1}, .dilation = {1, 2}}, true},
  };
  if (!quick) {
    cases.push_back({2, 8, 7, 9, 8, 1, 1, {}, true});
    cases.push_back({8, 64, 32, 32, 128, 3, 3, {.padding = {1, 1}}, true});
    cases.push_back({4, 32, 28, 28, 32, 3, 3, {.padding = {1, 1}, .groups = 32}, false});
    cases.push_back({16, 3, 224, 224, 64, 7, 7, {.stride = {2, 2}, .padding = {3, 3}}, false});
  }
  std::vector<std::pair<ops::cuda_glue::ConvImpl, const char*>> impls = {
      {ops::cuda_glue::ConvImpl::stoke, "stoke"}};
#ifndef STOKE_CUDA_EMU
  impls.insert(impls.begin(), {ops::cuda_glue::ConvImpl::cudnn, "cudnn"});
#endif
  ConvImplGuard guard;
  for (const auto& [impl, impl_name] : impls) {
    ops::cuda_glue::set_conv_impl(impl);
    const std::string tag = std::string(" [") + impl_name + "]";
    for (const Case& c : cases) {
      const auto& o = c.o;
      const std::string l = dims({c.n, c.c, c.h, c.w}) + " k" + std::to_string(c.k) + " " +
                            dims({c.kh, c.kw}) + " s" + dims({o.stride[0], o.stride[1]}) + " p" +
                            dims({o.padding[0], o.padding[1]}) + " d" +
                            dims({o.dilation[0], o.dilation[1]}) + " g" + std::to_string(o.groups);
      const Tensor x0 = randn_cpu({c.n, c.c, c.h, c.w}, 200);
      const Tensor w0 = randn_cpu({c.k, c.c / o.groups, c.kh, c.kw}, 201);
      const Tensor b0 = randn_cpu({c.k}, 202);
      for (DType dt : float_types()) {
        const double tol = 2 * tolerance(dt);
        Leaf x = leaf(x0, dt), w = leaf(w0, dt), b = leaf(b0, dt);
        const Tensor got = stoke::conv2d(x.dev, w.dev, c.bias ? b.dev : Tensor(), o);
        const Tensor ref = stoke::conv2d(x.cpu, w.cpu, c.bias ? b.cpu : Tensor(), o);
        compare_on(s, "conv2d" + tag, l, dt, got, ref, tol);
        backward_both(got, ref, randn_cpu(ref.shape(), 203), dt);
        compare_on(s, "conv2d backward dx" + tag, l, dt, x.dev.grad(), x.cpu.grad(), tol);
        compare_on(s, "conv2d backward dW" + tag, l, dt, w.dev.grad(), w.cpu.grad(), tol);
        if (c.bias)
          compare_on(s, "conv2d backward db" + tag, l, dt, b.dev.grad(), b.cpu.grad(), tol);
      }
    }
  }
}

void check_pooling(Suite& s, bool quick) {
  using namespace nn_checks;
  struct Case {
    Shape shape;
    Pool2dOptions o;
  };
  std::vector<Case> cases = {
      {{2, 3, 8, 8}, {.kernel_size = {2, 2}}},
      {{1, 2, 7, 9}, {.kernel_size = {3, 3}, .stride = {2, 2}, .padding = {1, 1}}},
      {{2, 1, 5, 6}, {.kernel_size = {2, 3}, .stride = {2, 2}, .ceil_mode = true}},
      {{3, 10, 11}, {.kernel_size = {3, 3}, .stride = {1, 2}, .padding = {1, 0}}},
      {{1, 2, 6, 6},
       {.kernel_size = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .count_include_pad = false}},
  };
  if (!quick)
    cases.push_back(
        {{32, 64, 56, 56}, {.kernel_size = {3, 3}, .stride = {2, 2}, .padding = {1, 1}}});
  for (const Case& c : cases) {
    const auto& o = c.o;
    const std::string l = shape_str(c.shape) + " k" + dims({o.kernel_size[0], o.kernel_size[1]}) +
                          " s" + dims({o.stride[0], o.stride[1]}) + " p" +
                          dims({o.padding[0], o.padding[1]}) + (o.ceil_mode ? " ceil" : "") +
                          (o.count_include_pad ? "" : " excl-pad");
    const Tensor x0 = randn_cpu(c.shape, 210);
    for (DType dt : float_types()) {
      const double tol = 2 * tolerance(dt);
      {
        Leaf x = leaf(x0, dt);
        const Tensor got = stoke::max_pool2d(x.dev, o), ref = stoke::max_pool2d(x.cpu, o);
        compare_on(s, "max_pool2d", l, dt, got, ref, 0);
        const Tensor g = randn_cpu(ref.shape(), 211);
        backward_both(got, ref, g, dt);
        compare_on(s, "max_pool2d backward", l, dt, x.dev.grad(), x.cpu.grad(), tol);
        // The indices, and the backward without the window (every output scanned).
        const auto gi = ops::max_pool2d_with_indices(x.dev.detach(), o);
        const auto ri = ops::max_pool2d_with_indices(x.cpu.detach(), o);
        compare_on(s, "max_pool2d indices", l, DType::i64, gi.indices, ri.indices, 0);
        compare_on(s, "max_pool2d (no indices)", l, dt, ops::max_pool2d(x.dev.detach(), o),
                   ops::max_pool2d(x.cpu.detach(), o), 0);
        compare_on(s, "max_pool2d_backward (no window)", l, dt,
                   ops::max_pool2d_backward(upload(g, dt), gi.indices, c.shape),
                   ops::max_pool2d_backward(rounded(g, dt), ri.indices, c.shape), tol);
      }
      {
        Leaf x = leaf(x0, dt);
        const Tensor got = stoke::avg_pool2d(x.dev, o), ref = stoke::avg_pool2d(x.cpu, o);
        compare_on(s, "avg_pool2d", l, dt, got, ref, tol);
        backward_both(got, ref, randn_cpu(ref.shape(), 212), dt);
        compare_on(s, "avg_pool2d backward", l, dt, x.dev.grad(), x.cpu.grad(), tol);
      }
    }
  }
  std::vector<std::pair<Shape, std::array<int64_t, 2>>> adaptive = {
      {{2, 3, 7, 7}, {1, 1}}, {{1, 2, 10, 9}, {3, 4}}, {{4, 5, 6}, {6, 2}}};
  if (!quick) adaptive.push_back({{64, 512, 7, 7}, {1, 1}});
  for (const auto& [shape, out] : adaptive) {
    const std::string l = shape_str(shape) + " -> " + dims({out[0], out[1]});
    const Tensor x0 = randn_cpu(shape, 213);
    for (DType dt : float_types()) {
      const double tol = 2 * tolerance(dt);
      Leaf x = leaf(x0, dt);
      const Tensor got = stoke::adaptive_avg_pool2d(x.dev, out);
      const Tensor ref = stoke::adaptive_avg_pool2d(x.cpu, out);
      compare_on(s, "adaptive_avg_pool2d", l, dt, got, ref, tol);
      backward_both(got, ref, randn_cpu(ref.shape(), 214), dt);
      compare_on(s, "adaptive_avg_pool2d backward", l, dt, x.dev.grad(), x.cpu.grad(), tol);
    }
  }
}

void check_batch_norm(Suite& s, bool quick) {
  using namespace nn_checks;
  std::vector<Shape> shapes = {{4, 3, 5, 6}, {7, 5}, {2, 4, 9}};
  if (!quick) shapes.push_back({32, 64, 28, 28});
  for (const Shape& shape : shapes) {
    const std::string l = shape_str(shape);
    const int64_t C = shape[1];
    const Tensor x0 = ops::add(ops::mul(randn_cpu(shape, 220), 2.0), 0.5);
    const Tensor w0 = randn_cpu({C}, 221), b0 = randn_cpu({C}, 222);
    const Tensor rm0 = randn_cpu({C}, 223), rv0 = uniform_cpu({C}, 0.5, 2, 224);
    for (DType dt : float_types()) {
      const double tol = 2 * tolerance(dt);
      for (bool training : {true, false}) {
        const std::string mode = training ? " (training)" : " (eval)";
        // Per-channel tensors stay f32 for every input dtype (as cuDNN's and torch's AMP).
        Leaf x = leaf(x0, dt), w = leaf(w0, DType::f32), b = leaf(b0, DType::f32);
        Tensor rm_c = rm0.clone(), rv_c = rv0.clone();
        Tensor rm_d = rm0.to(dev()), rv_d = rv0.to(dev());
        const BatchNormOptions o{.training = training, .momentum = 0.2, .eps = 1e-3};
        const Tensor got = stoke::batch_norm(x.dev, rm_d, rv_d, w.dev, b.dev, o);
        const Tensor ref = stoke::batch_norm(x.cpu, rm_c, rv_c, w.cpu, b.cpu, o);
        compare_on(s, "batch_norm" + mode, l, dt, got, ref, tol);
        if (training) {
          compare_on(s, "batch_norm running_mean", l, DType::f32, rm_d, rm_c, tol);
          compare_on(s, "batch_norm running_var", l, DType::f32, rv_d, rv_c, tol);
        }
        backward_both(got, ref, randn_cpu(shape, 225), dt);
        nn_checks::compare_affine_grads(s, "batch_norm", mode, l, dt, x, w, b, tol);
      }
    }
  }
}

void check_group_layer_norm(Suite& s, bool quick) {
  using namespace nn_checks;
  // group_norm: (shape, groups); layer_norm: (shape, normalized dims). Weights stay f32 for every
  // input dtype, as batch norm's.
  std::vector<std::pair<Shape, int64_t>> group = {{{4, 6, 5, 3}, 3}, {{3, 4}, 2}, {{2, 8, 9}, 1}};
  std::vector<std::pair<Shape, Shape>> layer = {{{4, 7}, {7}}, {{2, 3, 40}, {3, 40}}};
  if (!quick) {
    group.push_back({{32, 64, 28, 28}, 32});
    layer.push_back({{64, 196, 384}, {384}});
  }
  for (const auto& [shape, groups] : group)
    for (DType dt : float_types()) {
      const std::string l = detail::str_cat(shape_str(shape), " G=", groups);
      const double tol = 2 * tolerance(dt);
      const int64_t C = shape[1];
      const Tensor x0 = ops::add(ops::mul(randn_cpu(shape, 226), 2.0), 3.0);
      Leaf x = leaf(x0, dt), w = leaf(randn_cpu({C}, 227), DType::f32),
           b = leaf(randn_cpu({C}, 228), DType::f32);
      const Tensor got = stoke::group_norm(x.dev, groups, w.dev, b.dev);
      const Tensor ref = stoke::group_norm(x.cpu, groups, w.cpu, b.cpu);
      compare_on(s, "group_norm", l, dt, got, ref, tol);
      backward_both(got, ref, randn_cpu(shape, 229), dt);
      nn_checks::compare_affine_grads(s, "group_norm", "", l, dt, x, w, b, tol);
    }
  for (const auto& [shape, normalized] : layer)
    for (DType dt : float_types()) {
      const std::string l = detail::str_cat(shape_str(shape), " over ", shape_str(normalized));
      const double tol = 2 * tolerance(dt);
      const Tensor x0 = ops::add(ops::mul(randn_cpu(shape, 232), 2.0), -1.0);
      Leaf x = leaf(x0, dt), w = leaf(randn_cpu(normalized, 233), DType::f32),
           b = leaf(randn_cpu(normalized, 234), DType::f32);
      const Tensor got = stoke::layer_norm(x.dev, normalized, w.dev, b.dev);
      const Tensor ref = stoke::layer_norm(x.cpu, normalized, w.cpu, b.cpu);
      compare_on(s, "layer_norm", l, dt, got, ref, tol);
      backward_both(got, ref, randn_cpu(shape, 235), dt);
      nn_checks::compare_affine_grads(s, "layer_norm", "", l, dt, x, w, b, tol);
    }
}

void check_dropout(Suite& s, bool quick) {
  std::vector<Shape> shapes = {{3, 129}, {2, 3, 5}};
  if (!quick) shapes.push_back({1000, 1001});
  for (const Shape& shape : shapes) {
    const std::string l = shape_str(shape);
    const Tensor x0 = randn_cpu(shape, 230), g0 = randn_cpu(shape, 231);
    for (DType dt : float_types()) {
      const double tol = tolerance(dt);
      for (double p : {0.1, 0.5}) {
        const std::string pl = detail::str_cat(" p=", p);
        // One generator state on both devices gives one mask.
        Generator gc(77), gd(77);
        const auto got = ops::dropout_with_mask(upload(x0, dt), p, &gd);
        const auto ref = ops::dropout_with_mask(rounded(x0, dt), p, &gc);
        compare_on(s, "dropout mask" + pl, l, DType::u8, got.mask, ref.mask, 0);
        compare_on(s, "dropout" + pl, l, dt, got.output, ref.output, tol);
        compare_on(s, "dropout_backward" + pl, l, dt,
                   ops::dropout_backward(upload(g0, dt), got.mask, p),
                   ops::dropout_backward(rounded(g0, dt), ref.mask, p), tol);
        // Through autograd, as nn::Dropout runs it.
        Leaf x = leaf(x0, dt);
        Generator ac(78), ad(78);
        const Tensor yd = stoke::dropout(x.dev, p, true, &ad);
        const Tensor yc = stoke::dropout(x.cpu, p, true, &ac);
        compare_on(s, "dropout (autograd)" + pl, l, dt, yd, yc, tol);
        backward_both(yd, yc, g0, dt);
        compare_on(s, "dropout backward (autograd)" + pl, l, dt, x.dev.grad(), x.cpu.grad(), tol);
      }
    }
  }
}

void check_optimizer(Suite& s, bool quick) {
  NoGradGuard no_grad;
  // Sizes that are no multiple of the kernels' 4-element accesses or of a block; a view that
  // starts one element in (no 16-byte accesses) as the last case.
  std::vector<Shape> shapes = {{1}, {7}, {33, 5}, {1000}};
  if (!quick) shapes.push_back({(1 << 20) + 3});
  const double tol = tolerance(DType::f32);
  for (const Shape& shape : shapes)
    for (bool offset : {false, true}) {
      const std::string l = shape_str(shape) + (offset ? " (offset view)" : "");
      const int64_t n = shape.numel();
      // The device tensors, one element into a larger buffer when `offset`.
      auto on_dev = [&](const Tensor& cpu) {
        if (!offset) return cpu.to(dev());
        Tensor base = empty({n + 1}, {.device = dev()});
        Tensor v = base.narrow(0, 1, n).view(shape);
        v.copy_(cpu.to(dev()));
        return v;
      };
      const Tensor p0 = randn_cpu(shape, 240);
      const std::vector<Tensor> grads = {randn_cpu(shape, 241), randn_cpu(shape, 242),
                                         randn_cpu(shape, 243)};
      {
        // SGD with nesterov momentum and L2 decay: the buffer's first step, then two more.
        Tensor pc = p0.clone(), bc = zeros(shape), pd = on_dev(p0), bd = on_dev(zeros(shape));
        for (size_t t = 0; t < grads.size(); ++t) {
          const ops::SgdStepOptions o{.lr = 0.1,
                                      .momentum = 0.9,
                                      .weight_decay = 1e-3,
                                      .nesterov = true,
                                      .first_step = t == 0};
          ops::sgd_step_(pc, grads[t], bc, o);
          ops::sgd_step_(pd, on_dev(grads[t]), bd, o);
        }
        compare_on(s, "sgd_step_ param", l, DType::f32, pd, pc, tol);
        compare_on(s, "sgd_step_ momentum_buffer", l, DType::f32, bd, bc, tol);
      }
      for (bool decoupled : {false, true}) {
        const std::string name = decoupled ? "adam_step_ (AdamW)" : "adam_step_";
        Tensor pc = p0.clone(), mc = zeros(shape), vc = zeros(shape);
        Tensor pd = on_dev(p0), md = on_dev(zeros(shape)), vd = on_dev(zeros(shape));
        for (size_t t = 0; t < grads.size(); ++t) {
          const ops::AdamStepOptions o{.lr = 1e-2,
                                       .weight_decay = 1e-2,
                                       .decoupled = decoupled,
                                       .step = static_cast<int64_t>(t + 1)};
          ops::adam_step_(pc, grads[t], mc, vc, o);
          ops::adam_step_(pd, on_dev(grads[t]), md, vd, o);
        }
        compare_on(s, name + " param", l, DType::f32, pd, pc, tol);
        compare_on(s, name + " exp_avg", l, DType::f32, md, mc, tol);
        compare_on(s, name + " exp_avg_sq", l, DType::f32, vd, vc, tol);
      }
    }
  // The mixed-precision passes over the whole list of shapes at once (one multi-tensor launch):
  // the unscale with its device-side inf flag (clean, then with an inf in the last tensor) and the
  // sum of squares of the global gradient norm.
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    std::vector<Tensor> gc, gd;
    for (size_t i = 0; i < shapes.size(); ++i) {
      gc.push_back(randn_cpu(shapes[i], 250 + i).to(dt));
      gd.push_back(gc.back().to(dev()));
    }
    const std::string l = std::to_string(shapes.size()) + " tensors";
    const Tensor sc = ops::sum_of_squares(gc), sd = ops::sum_of_squares(gd);
    compare_on(s, "sum_of_squares", l, DType::f32, sd, sc.to(DType::f32), tolerance(DType::f32));
    Tensor fc = zeros({1}), fd = zeros({1}, {.device = dev()});
    ops::non_finite_check_and_unscale_(gc, fc, full({1}, 1.0 / 512));
    ops::non_finite_check_and_unscale_(gd, fd, full({1}, 1.0 / 512, {.device = dev()}));
    for (size_t i = 0; i < gc.size(); ++i)
      compare_on(s, "non_finite_check_and_unscale_", shape_str(shapes[i]), dt, gd[i], gc[i], 0);
    s.expect("non_finite_check_and_unscale_ found_inf", l, dn(dt), fd.to(Device::cpu()).item() == 0,
             "a flag set without an inf");
    fill_(gd.back().narrow(0, gd.back().size(0) - 1, 1), INFINITY);
    ops::non_finite_check_and_unscale_(gd, fd, full({1}, 1.0, {.device = dev()}));
    s.expect("non_finite_check_and_unscale_ found_inf", l + " (one inf)", dn(dt),
             fd.to(Device::cpu()).item() == 1, "the inf was not flagged");
  }
  // The GradScaler's update on the device: a sequence of finite and non-finite steps (growth
  // every 2 finite ones, a backoff below min_scale that collapses) against the CPU, exactly.
  {
    const ops::AmpUpdateScaleOptions o{.growth_interval = 2, .min_scale = 0.25};
    const std::vector<float> found = {0, 0, 1, 0, 1, 1, 1, 1, 1, 0, 0, 0};
    std::vector<Tensor> c, d;
    for (float init : {1.f, 0.f, 0.f, 0.f}) {
      c.push_back(full({1}, init));
      d.push_back(full({1}, init, {.device = dev()}));
    }
    for (float f : found) {
      ops::amp_update_scale_(c[0], c[1], c[2], c[3], full({1}, f), o);
      ops::amp_update_scale_(d[0], d[1], d[2], d[3], full({1}, f, {.device = dev()}), o);
    }
    const char* names[] = {"scale", "growth_tracker", "skipped", "collapsed"};
    for (size_t i = 0; i < 4; ++i)
      compare_on(s, std::string("amp_update_scale_ ") + names[i], "12 steps", DType::f32, d[i],
                 c[i], 0);
  }
}

}  // namespace stoke::selftest
