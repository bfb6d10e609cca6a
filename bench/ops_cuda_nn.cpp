// stoke-bench-ops-cuda, sections "pool", "batchnorm" and "softmax": the memory-bound layers of a
// CNN at the ResNet-18/CIFAR activation shapes (batch 128: 64x32x32, 128x16x16, 256x8x8,
// 512x4x4), f32 and f16, ours next to cuDNN, forward and backward; then softmax and the fused
// cross-entropy (ours only) at classifier shapes. All in GB/s of the minimal traffic, the same
// byte count for both implementations (so "vs ref" is also the ratio of times):
//   pool       fwd x + y (our max pool also writes i64 indices, not counted), bwd dy + dx
//   batchnorm  fwd x + y (training and eval), bwd x + dy + dx (+ dweight, dbias)
//   softmax    fwd x + y, bwd grad + y + dx; cross-entropy loss logits (+ dlogits) + targets
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "bench/ops_cuda.h"
#include "core/enum_name.h"
#include "cuda/kernels/batch_norm.h"
#include "cuda/kernels/elementwise.h"
#include "cuda/kernels/loss_cross_entropy.h"
#include "cuda/kernels/pool.h"
#include "cuda/kernels/softmax.h"
#include "cuda/vendor/cudnn_batch_norm.h"
#include "cuda/vendor/cudnn_pool.h"

namespace stoke::bench::ops_cuda {
namespace {

struct Activation {
  int64_t c, hw;
};
// The activations of ResNet-18/CIFAR's four stages.
const Activation kActivations[] = {{64, 32}, {128, 16}, {256, 8}, {512, 4}};

std::string activation_text(int64_t n, const Activation& a, DType dt) {
  return std::to_string(n) + "x" + std::to_string(a.c) + "x" + std::to_string(a.hw) + "x" +
         std::to_string(a.hw) + " " + dtype_name(dt);
}

enum class Window { max2, max3, avg2, global };
const char* window_name(Window w) {
  static constexpr const char* names[] = {"max 2x2/2", "max 3x3/2 pad 1", "avg 2x2/2",
                                          "global avg"};
  static_assert(std::size(names) == enum_count(Window::global));
  return enum_name(w, names, "?");
}

// One pooling case in element type T (float or __half): cuDNN then ours, forward then backward.
template <class T>
void pool_case(Bench& b, int64_t n, const Activation& a, DType dt, Window win) {
  cuda::PoolGeometry vg{.n = n, .c = a.c, .h = a.hw, .w = a.hw, .dtype = dt};
  if (win == Window::max3) vg = {n, a.c, a.hw, a.hw, {3, 3}, {2, 2}, {1, 1}, cuda::PoolMode::max};
  if (win == Window::avg2) vg.mode = cuda::PoolMode::avg_include_pad;
  if (win == Window::global) {
    vg.kernel = vg.stride = {a.hw, a.hw};
    vg.mode = cuda::PoolMode::avg_include_pad;
  }
  vg.dtype = dt;
  const cuda::Pool2dGeometry sg{.planes = n * a.c,
                                .height = a.hw,
                                .width = a.hw,
                                .out_h = vg.out_h(),
                                .out_w = vg.out_w(),
                                .kernel_h = vg.kernel[0],
                                .kernel_w = vg.kernel[1],
                                .stride_h = vg.stride[0],
                                .stride_w = vg.stride[1],
                                .pad_h = vg.padding[0],
                                .pad_w = vg.padding[1]};
  const size_t e = dtype_size(dt), nx = n * a.c * a.hw * a.hw,
               ny = n * a.c * vg.out_h() * vg.out_w();
  Buffer x(nx * e, dt), y(ny * e, dt), dy(ny * e, dt), dx(nx * e, dt, Fill::zero);
  Buffer indices(ny * 8, DType::i64, Fill::zero);
  const bool is_max = win == Window::max2 || win == Window::max3;
  const std::string op = std::string(window_name(win)) + " fwd";
  const std::string shape = activation_text(n, a, dt);
  const double fwd_bytes = double(nx + ny) * e, bwd_bytes = fwd_bytes;
  const T* xt = x.as<T>();
  T* yt = y.as<T>();
  const double ref_fwd = b.bytes("pool", op, shape, "cudnn", fwd_bytes, 0,
                                 [&] { cuda::pool2d_forward(vg, x.ptr, y.ptr, nullptr); });
  b.bytes("pool", op, shape, "stoke", fwd_bytes, ref_fwd, [&] {
    if (is_max) cuda::max_pool2d_forward(sg, xt, yt, indices.as<int64_t>(), nullptr);
    if (win == Window::avg2) cuda::avg_pool2d_forward(sg, xt, yt, nullptr);
    if (win == Window::global) cuda::adaptive_avg_pool2d_forward(sg, xt, yt, nullptr);
  });
  b.rows.back().note = is_max ? "+ i64 indices" : win == Window::global ? "adaptive" : "";
  // cuDNN's backward needs its forward's y (it finds the argmax again from x and y); ours the
  // indices of our forward, which ran last.
  const std::string bop = std::string(window_name(win)) + " bwd";
  Buffer vy(ny * e, dt, Fill::zero);
  cuda::pool2d_forward(vg, x.ptr, vy.ptr, nullptr);
  const double ref_bwd = b.bytes("pool", bop, shape, "cudnn", bwd_bytes, 0, [&] {
    cuda::pool2d_backward(vg, vy.ptr, dy.ptr, x.ptr, dx.ptr, nullptr);
  });
  b.bytes("pool", bop, shape, "stoke", bwd_bytes, ref_bwd, [&] {
    const T* g = dy.as<T>();
    T* gx = dx.as<T>();
    if (is_max) cuda::max_pool2d_backward(sg, g, indices.as<int64_t>(), gx, nullptr);
    if (win == Window::avg2) cuda::avg_pool2d_backward(sg, g, gx, nullptr);
    if (win == Window::global) cuda::adaptive_avg_pool2d_backward(sg, g, gx, nullptr);
  });
}

// One batch-norm shape in element type T: training forward, eval forward, backward; cuDNN then
// ours. Per-channel tensors are f32 for both.
template <class T>
void batch_norm_case(Bench& b, int64_t n, const Activation& a, DType dt) {
  const int64_t c = a.c, hw = a.hw * a.hw;
  const size_t e = dtype_size(dt), nx = n * c * hw;
  Buffer x(nx * e, dt), y(nx * e, dt, Fill::zero), dy(nx * e, dt), dx(nx * e, dt, Fill::zero);
  Buffer weight(c * 4), bias(c * 4), running_mean(c * 4),
      running_var(c * 4, DType::f32, Fill::positive);
  Buffer save_mean(c * 4), save_invstd(c * 4, DType::f32, Fill::positive);
  Buffer grad_weight(c * 4, DType::f32, Fill::zero), grad_bias(c * 4, DType::f32, Fill::zero);
  Buffer workspace(cuda::batch_norm_backward_workspace_floats(c) * 4, DType::f32, Fill::zero);
  const cuda::BatchNormGeometry vg{.n = n, .c = c, .h = a.hw, .w = a.hw, .dtype = dt};
  const cuda::BatchNormLayout sl{.batch = n, .channels = c, .spatial = hw};
  const std::string shape = activation_text(n, a, dt);
  const double io = 2.0 * nx * e, bwd = 3.0 * nx * e;
  const float momentum = 0.1f, eps = 1e-5f;
  const float *w = weight.as<float>(), *bi = bias.as<float>();
  float *rm = running_mean.as<float>(), *rv = running_var.as<float>();
  float *sm = save_mean.as<float>(), *si = save_invstd.as<float>();
  double ref = b.bytes("batchnorm", "fwd training", shape, "cudnn", io, 0, [&] {
    cuda::batch_norm_forward_training(vg, x.ptr, y.ptr, w, bi, rm, rv, momentum, eps, sm, si,
                                      nullptr);
  });
  b.bytes("batchnorm", "fwd training", shape, "stoke", io, ref, [&] {
    cuda::batch_norm_forward_training(sl, x.as<T>(), y.as<T>(), w, bi, rm, rv, momentum, eps, sm,
                                      si, nullptr);
  });
  ref = b.bytes("batchnorm", "fwd eval", shape, "cudnn", io, 0, [&] {
    cuda::batch_norm_forward_inference(vg, x.ptr, y.ptr, w, bi, rm, rv, eps, nullptr);
  });
  b.bytes("batchnorm", "fwd eval", shape, "stoke", io, ref, [&] {
    cuda::batch_norm_forward_eval(sl, x.as<T>(), y.as<T>(), w, bi, rm, rv, eps, nullptr, nullptr,
                                  nullptr);
  });
  // Each backward from its own training forward's saved statistics.
  cuda::batch_norm_forward_training(vg, x.ptr, y.ptr, w, bi, nullptr, nullptr, momentum, eps, sm,
                                    si, nullptr);
  ref = b.bytes("batchnorm", "bwd training", shape, "cudnn", bwd, 0, [&] {
    cuda::batch_norm_backward(vg, x.ptr, dy.ptr, dx.ptr, w, grad_weight.as<float>(),
                              grad_bias.as<float>(), sm, si, eps, nullptr);
  });
  cuda::batch_norm_forward_training(sl, x.as<T>(), y.as<T>(), w, bi, nullptr, nullptr, momentum,
                                    eps, sm, si, nullptr);
  b.bytes("batchnorm", "bwd training", shape, "stoke", bwd, ref, [&] {
    cuda::batch_norm_backward(sl, dy.as<T>(), x.as<T>(), w, sm, si, true, dx.as<T>(),
                              grad_weight.as<float>(), grad_bias.as<float>(), workspace.as<float>(),
                              nullptr);
  });
  // The epilogue fusion ResNet's conv -> BN -> ReLU uses: relu(bn(x)) in the output pass and its
  // backward masked in the backward's passes, against the unfused chain (bn, then relu; relu's
  // backward, then bn's). GB/s of the fused op's minimal traffic (forward x + z; backward dz, x,
  // z, dx) for both rows; vs ref = % of the unfused chain's rate.
  Buffer z(nx * e, dt, Fill::zero), dyb(nx * e, dt, Fill::zero);
  ref = b.bytes("batchnorm", "fwd training + relu", shape, "stoke unfused", io, 0, [&] {
    cuda::batch_norm_forward_training(sl, x.as<T>(), y.as<T>(), w, bi, rm, rv, momentum, eps, sm,
                                      si, nullptr);
    cuda::unary(cuda::UnaryOp::relu, dt, y.ptr, z.ptr, static_cast<int64_t>(nx), nullptr);
  });
  b.bytes("batchnorm", "fwd training + relu", shape, "stoke fused", io, ref, [&] {
    cuda::batch_norm_forward_training(sl, x.as<T>(), z.as<T>(), w, bi, rm, rv, momentum, eps, sm,
                                      si, nullptr, /*relu=*/true);
  });
  ref = b.bytes("batchnorm", "bwd training + relu", shape, "stoke unfused", bwd + nx * e, 0, [&] {
    cuda::unary_backward(cuda::UnaryBackwardOp::relu, dt, dy.ptr, z.ptr, dyb.ptr,
                         static_cast<int64_t>(nx), nullptr);
    cuda::batch_norm_backward(sl, dyb.as<T>(), x.as<T>(), w, sm, si, true, dx.as<T>(),
                              grad_weight.as<float>(), grad_bias.as<float>(), workspace.as<float>(),
                              nullptr);
  });
  b.bytes("batchnorm", "bwd training + relu", shape, "stoke fused", bwd + nx * e, ref, [&] {
    cuda::batch_norm_backward(sl, dy.as<T>(), x.as<T>(), w, sm, si, true, dx.as<T>(),
                              grad_weight.as<float>(), grad_bias.as<float>(), workspace.as<float>(),
                              nullptr, z.as<T>());
  });
}

}  // namespace

void bench_pool(Bench& b) {
  const int64_t n = b.o.batch_size();
  for (const Activation& a : kActivations)
    for (DType dt : {DType::f32, DType::f16})
      for (Window win : {Window::max2, Window::max3, Window::avg2, Window::global}) {
        if (dt == DType::f32)
          pool_case<float>(b, n, a, dt, win);
        else
          pool_case<__half>(b, n, a, dt, win);
      }
}

void bench_batch_norm(Bench& b) {
  const int64_t n = b.o.batch_size();
  for (const Activation& a : kActivations)
    for (DType dt : {DType::f32, DType::f16}) {
      if (dt == DType::f32)
        batch_norm_case<float>(b, n, a, dt);
      else
        batch_norm_case<__half>(b, n, a, dt);
    }
}

void bench_softmax(Bench& b) {
  struct Case {
    int64_t rows, classes;
  };
  std::vector<Case> cases = {{128, 10}, {128, 1000}, {4096, 1024}, {4096, 32000}};
  if (b.o.quick) cases = {{128, 10}, {128, 1000}};
  for (const Case& k : cases)
    for (DType dt : {DType::f32, DType::bf16}) {
      const int64_t n = k.rows, c = k.classes;
      const size_t e = dtype_size(dt), bytes = n * c * e;
      const std::string shape = std::to_string(n) + "x" + std::to_string(c) + " " + dtype_name(dt);
      Buffer x(bytes, dt), y(bytes, dt, Fill::zero), grad(bytes, dt), dx(bytes, dt, Fill::zero);
      auto add = [&](const std::string& op, double traffic, const std::function<void()>& fn) {
        b.bytes("softmax", op, shape, "stoke", traffic, b.memcpy_gbs(traffic), fn);
      };
      add("softmax fwd", 2.0 * bytes,
          [&] { cuda::softmax_forward(dt, x.ptr, y.ptr, n, c, 1, false, nullptr); });
      add("log_softmax fwd", 2.0 * bytes,
          [&] { cuda::softmax_forward(dt, x.ptr, y.ptr, n, c, 1, true, nullptr); });
      cuda::softmax_forward(dt, x.ptr, y.ptr, n, c, 1, false, nullptr);
      add("softmax bwd", 3.0 * bytes,
          [&] { cuda::softmax_backward(dt, grad.ptr, y.ptr, dx.ptr, n, c, 1, false, nullptr); });
      // Targets: random classes, generated on the host.
      std::vector<int64_t> host(n);
      std::mt19937 rng(42);
      for (int64_t& t : host) t = std::uniform_int_distribution<int64_t>(0, c - 1)(rng);
      Buffer target(n * 8, DType::i64, Fill::zero), row_loss(n * 4, DType::f32, Fill::zero),
          loss(4, DType::f32, Fill::zero), scratch(16, DType::i64, Fill::zero);
      STOKE_CUDA_CHECK(cudaMemcpy(target.ptr, host.data(), n * 8, cudaMemcpyHostToDevice));
      cuda::CrossEntropyBuffers buf{.row_loss = row_loss.as<float>(),
                                    .loss = loss.as<float>(),
                                    .scratch = scratch.as<int64_t>()};
      const double small = 12.0 * n;  // targets in, row losses out
      add("cross_entropy loss", double(bytes) + small,
          [&] { cuda::cross_entropy(dt, x.ptr, target.as<int64_t>(), n, c, {}, buf, nullptr); });
      buf.dlogits = dx.ptr;
      add("cross_entropy loss+dlogits", 2.0 * bytes + small,
          [&] { cuda::cross_entropy(dt, x.ptr, target.as<int64_t>(), n, c, {}, buf, nullptr); });
    }
}

}  // namespace stoke::bench::ops_cuda
