// The ops checks' table (run_ops_checks), and the checks of creation and copies: fill, the
// strided copy kernel (views, casts between every pair of dtypes, cat and stack), and the fused
// u8 normalization of data::normalize on the device.
#include "apps/selftest/ops_checks.h"

#include "data/normalize.h"

namespace stoke::selftest {

using namespace ops_checks;

void run_ops_checks(Suite& s, bool quick) {
  struct Entry {
    const char* name;
    void (*fn)(Suite&, bool);
  };
  static const Entry kChecks[] = {
      {"fill/copy/cast", check_fill_copy},
      {"normalize", check_normalize},
      {"crop_flip_normalize", check_crop_flip_normalize},
      {"binary", check_binary},
      {"integer", check_integer},
      {"unary", check_unary},
      {"unary backward", check_unary_backward},
      {"compare/where", check_compare_where},
      {"pow/ternary backward", check_pow_ternary_backward},
      {"in place", check_in_place},
      {"reductions", check_reductions},
      {"softmax/cross_entropy", check_softmax_cross_entropy},
      {"matmul/linear", check_linear_algebra},
      {"conv2d", check_conv2d},
      {"pooling", check_pooling},
      {"batch_norm", check_batch_norm},
      {"group_norm/layer_norm", check_group_layer_norm},
      {"dropout", check_dropout},
      {"optimizer", check_optimizer},
      {"index", check_index},
  };
  for (const Entry& e : kChecks) s.run(e.name, [&](Suite& suite) { e.fn(suite, quick); });
}

void check_fill_copy(Suite& s, bool quick) {
  const Shape shape = quick ? Shape{3, 129} : Shape{37, 1029};
  const std::string sh = shape_str(shape);
  // fill: full() on the device, and fill_ of a strided view.
  for (DType dt : all_types()) {
    const double v = dt == DType::boolean ? 1.0 : is_floating(dt) ? 2.5 : 7.0;
    const Tensor got = full(shape, v, {.dtype = dt, .device = dev()});
    compare_on(s, "fill (full)", sh, dt, got, full(shape, v, {.dtype = dt}), 0);
    Tensor d = zeros({6, 10}, {.dtype = dt, .device = dev()});
    Tensor c = zeros({6, 10}, {.dtype = dt});
    fill_(d.slice(1, 1, 9, 3), v);
    fill_(c.slice(1, 1, 9, 3), v);
    compare_on(s, "fill_ (strided view)", "6x10[:,1:9:3]", dt, d, c, 0);
  }
  // Casts: every pair of dtypes, on the device (the strided copy kernel converting).
  for (DType from : all_types()) {
    // Floating sources carry fractions (truncated by integer targets), the others integers.
    const Tensor x =
        is_floating(from) ? uniform_cpu(shape, 0, 100, 3).to(from) : exact_values(shape, from, 4);
    const Tensor d = x.to(dev());
    for (DType to : all_types()) {
      if (to == from) continue;
      compare_on(s, std::string("cast ") + dtype_name(from) + "->" + dtype_name(to), sh, to,
                 d.to(to), x.to(to), 0);
    }
  }
  // Views made contiguous on the device: transpose, stepped slice, permute, expand, select.
  for (DType dt : {DType::f32, DType::f16, DType::i64, DType::u8}) {
    const Tensor x = exact_values({quick ? int64_t{5} : 67, 6, quick ? int64_t{7} : 131}, dt, 5);
    const Tensor d = x.to(dev());
    const std::string xs = shape_str(x.shape());
    compare_on(s, "copy transpose(0,2)", xs, dt, d.transpose(0, 2).contiguous(),
               x.transpose(0, 2).contiguous(), 0);
    compare_on(s, "copy slice(2, 1, end, 3)", xs, dt, d.slice(2, 1, x.size(2), 3).contiguous(),
               x.slice(2, 1, x.size(2), 3).contiguous(), 0);
    compare_on(s, "copy permute(1,2,0)", xs, dt, d.permute({1, 2, 0}).contiguous(),
               x.permute({1, 2, 0}).contiguous(), 0);
    compare_on(s, "copy expand", xs + " [0:1] -> 4x...", dt,
               d.narrow(0, 0, 1).expand({4, 6, x.size(2)}).contiguous(),
               x.narrow(0, 0, 1).expand({4, 6, x.size(2)}).contiguous(), 0);
    compare_on(s, "copy select(1, 4)", xs, dt, d.select(1, 4).contiguous(),
               x.select(1, 4).contiguous(), 0);
    // Into a strided destination, with a cast (copy_ of a transposed view).
    Tensor dd = zeros({x.size(2), 6}, {.dtype = DType::f32, .device = dev()});
    Tensor cc = zeros({x.size(2), 6}, {.dtype = DType::f32});
    dd.t().copy_(d.select(0, 1));
    cc.t().copy_(x.select(0, 1));
    compare_on(s, "copy_ into transposed view", xs, DType::f32, dd, cc, 0);
  }
  // cat and stack (copies into narrowed views of the output).
  for (DType dt : {DType::f32, DType::bf16, DType::i64}) {
    const Tensor a = exact_values({3, 5}, dt, 6), b = exact_values({4, 5}, dt, 7);
    const Tensor c = exact_values({3, 2}, dt, 8);
    compare_on(s, "cat dim 0", "3x5 + 4x5", dt, cat({a.to(dev()), b.to(dev())}, 0), cat({a, b}, 0),
               0);
    compare_on(s, "cat dim 1 (a transposed part)", "3x5 + 3x2 + (2x3)^T", dt,
               cat({a.to(dev()), c.to(dev()), c.to(dev())}, 1), cat({a, c, c}, 1), 0);
    compare_on(s, "stack dim 1", "3x5 x2", dt, stack({a.to(dev()), a.to(dev())}, 1),
               stack({a, a}, 1), 0);
  }
}

void check_normalize(Suite& s, bool quick) {
  struct Case {
    int64_t n, h, w, c;
  };
  const std::vector<Case> cases =
      quick ? std::vector<Case>{{2, 5, 7, 3}, {1, 4, 9, 1}}
            : std::vector<Case>{{2, 5, 7, 3}, {1, 4, 9, 1}, {16, 32, 32, 3}, {3, 17, 19, 5}};
  for (const Case& c : cases) {
    const Tensor images = randint_cpu(0, 256, {c.n, c.h, c.w, c.c}, DType::u8, 9);
    data::NormalizeOptions o;
    if (c.c == 3) {
      o.mean = {0.485f, 0.456f, 0.406f};
      o.std = {0.229f, 0.224f, 0.225f};
    } else {
      o.mean = {0.286f};
      o.std = {0.353f};
    }
    for (DType dt : {DType::f32, DType::f16}) {
      o.dtype = dt;
      const Tensor ref = data::normalize(images, o);
      Tensor out = empty(ref.shape(), {.dtype = dt, .device = dev()});
      data::normalize_into(images.to(dev()), out, o);
      compare_on(s, "data::normalize u8 NHWC -> NCHW", dims({c.n, c.h, c.w, c.c}), dt, out,
                 ref.to(DType::f32), dt == DType::f32 ? 1e-5 : tolerance(dt));
    }
  }
}

// The augmentation folded into normalize: host-drawn crops (padding past every edge, flips, a
// smaller and a larger output) against the CPU kernel, every output dtype.
void check_crop_flip_normalize(Suite& s, bool quick) {
  struct Case {
    int64_t n, h, w, c, padding, oh, ow;
  };
  const std::vector<Case> cases = quick ? std::vector<Case>{{4, 8, 9, 3, 2, 8, 9}}
                                        : std::vector<Case>{{4, 8, 9, 3, 2, 8, 9},
                                                            {64, 28, 28, 1, 2, 28, 28},
                                                            {16, 32, 32, 3, 4, 24, 24},
                                                            {3, 5, 6, 5, 4, 11, 9}};
  for (const Case& c : cases) {
    const Tensor images = randint_cpu(0, 256, {c.n, c.h, c.w, c.c}, DType::u8, 11);
    Tensor idx = empty({c.n}, {.dtype = DType::i64});
    for (int64_t i = 0; i < c.n; ++i) idx.data<int64_t>()[i] = 3 * i + 1;
    const Tensor crops = data::draw_crops(
        idx, c.h, c.w, {.height = c.oh, .width = c.ow, .padding = c.padding}, 5, 2);
    data::NormalizeOptions o;
    o.mean.assign(static_cast<size_t>(c.c), 0.45f);
    o.std.assign(static_cast<size_t>(c.c), 0.25f);
    for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
      o.dtype = dt;
      const Tensor ref = data::crop_flip_normalize(images, crops, o, c.oh, c.ow);
      const Tensor out = data::crop_flip_normalize(images.to(dev()), crops, o, c.oh, c.ow);
      compare_on(s, "data::crop_flip_normalize u8 NHWC -> NCHW", dims({c.n, c.h, c.w, c.c}), dt,
                 out, ref.to(DType::f32), dt == DType::f32 ? 1e-5 : tolerance(dt));
    }
  }
}

}  // namespace stoke::selftest
