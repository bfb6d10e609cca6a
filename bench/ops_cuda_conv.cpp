// stoke-bench-ops-cuda, section "conv": cuDNN (f32, tf32, f16, bf16) vs stoke's own convolution
// on the conv layers of ResNet-18/CIFAR and VGG-16 at batch 128, in the three directions:
//   fwd          cuDNN conv2d_forward          | conv2d_implicit_gemm_forward
//   bwd data     cuDNN conv2d_backward_data    | per chunk of samples: dY transposed to
//                                                (K, samples * P), col = W^T dY (SGEMM TN),
//                                                dX = col2im(col)
//   bwd filter   cuDNN conv2d_backward_filter  | per chunk: dY transposed, col = im2col(X),
//                                                dW (+)= dY col^T (SGEMM NT)
// Our backward is what ops/cuda/conv.cpp's stoke_backward runs (same chunking under a 16 M-float
// column budget, same transposition by a strided cast), restated here on raw buffers through the
// cuda/kernels launchers so that the rows time the kernels alone, without the glue's f32 copies
// and allocations; keep the two in step. Each direction counts 2 N K OH OW C R S flops.
#include <memory>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "bench/ops_cuda.h"
#include "cuda/kernels/cast.h"
#include "cuda/kernels/conv2d_implicit_gemm.h"
#include "cuda/kernels/im2col.h"
#include "cuda/kernels/sgemm.h"
#include "cuda/vendor/cudnn_conv.h"

namespace stoke::bench::ops_cuda {
namespace {

struct ConvLayer {
  const char* net;
  int64_t c, hw, k, r, stride, pad;
};

// ResNet-18 for CIFAR (3x3 stem, stages at 32/16/8/4, 1x1 stride-2 shortcuts) and VGG-16 on
// 32x32 inputs: each distinct conv layer once.
const ConvLayer kConvLayers[] = {
    {"resnet18", 3, 32, 64, 3, 1, 1},    {"resnet18", 64, 32, 64, 3, 1, 1},
    {"resnet18", 64, 32, 128, 3, 2, 1},  {"resnet18", 64, 32, 128, 1, 2, 0},
    {"resnet18", 128, 16, 128, 3, 1, 1}, {"resnet18", 128, 16, 256, 3, 2, 1},
    {"resnet18", 128, 16, 256, 1, 2, 0}, {"resnet18", 256, 8, 256, 3, 1, 1},
    {"resnet18", 256, 8, 512, 3, 2, 1},  {"resnet18", 256, 8, 512, 1, 2, 0},
    {"resnet18", 512, 4, 512, 3, 1, 1},  {"vgg16", 3, 32, 64, 3, 1, 1},
    {"vgg16", 64, 32, 64, 3, 1, 1},      {"vgg16", 64, 16, 128, 3, 1, 1},
    {"vgg16", 128, 16, 128, 3, 1, 1},    {"vgg16", 128, 8, 256, 3, 1, 1},
    {"vgg16", 256, 8, 256, 3, 1, 1},     {"vgg16", 256, 4, 512, 3, 1, 1},
    {"vgg16", 512, 4, 512, 3, 1, 1},     {"vgg16", 512, 2, 512, 3, 1, 1},
};

// Floats of column matrix one chunk of our backward may hold (ops/cuda/conv.cpp's budget).
constexpr int64_t kColumnBudget = int64_t{16} << 20;

// Our backward (groups = 1) on f32 buffers, as ops/cuda/conv.cpp composes it.
class StokeBackward {
 public:
  explicit StokeBackward(const cuda::ConvGeometry& g, int64_t column_budget = kColumnBudget)
      : g_(g),
        rows_(g.c * g.r * g.s),
        p_(g.out_h() * g.out_w()),
        chunk_(std::clamp<int64_t>(column_budget / std::max<int64_t>(1, rows_ * p_), 1, g.n)),
        col_(rows_ * chunk_ * p_ * 4, DType::f32, Fill::zero),
        dy_t_(g.k * chunk_ * p_ * 4, DType::f32, Fill::zero) {}

  int64_t chunk() const { return chunk_; }

  void data(const float* dy, const float* w, float* dx) const { run(dy, w, nullptr, dx, nullptr); }
  void filter(const float* x, const float* dy, float* dw) const {
    run(dy, nullptr, x, nullptr, dw);
  }

 private:
  cuda::Im2colGeometry columns(int64_t samples) const {
    cuda::Im2colGeometry c;
    c.samples = samples;
    c.channels = g_.c;
    c.sample_stride = g_.c * g_.h * g_.w;
    c.height = g_.h;
    c.width = g_.w;
    c.kernel_h = g_.r;
    c.kernel_w = g_.s;
    c.out_h = g_.out_h();
    c.out_w = g_.out_w();
    c.stride_h = g_.stride[0];
    c.stride_w = g_.stride[1];
    c.pad_h = g_.padding[0];
    c.pad_w = g_.padding[1];
    return c;
  }

  void run(const float* dy, const float* w, const float* x, float* dx, float* dw) const {
    const int64_t ld = chunk_ * p_;
    float* dy_t = dy_t_.as<float>();
    float* col = col_.as<float>();
    for (int64_t n0 = 0; n0 < g_.n; n0 += chunk_) {
      const int64_t nb = std::min(chunk_, g_.n - n0), cols = nb * p_;
      // dY (nb, K, P) -> (K, nb, P) inside the (K, chunk * P) buffer.
      const int64_t shape[3] = {g_.k, nb, p_};
      const int64_t dst_strides[3] = {ld, p_, 1}, src_strides[3] = {p_, g_.k * p_, 1};
      cuda::cast_strided(DType::f32, dy + n0 * g_.k * p_, DType::f32, dy_t,
                         cuda::make_cast_offsets(shape, 3, dst_strides, src_strides),
                         g_.k * nb * p_, nullptr);
      // im2col/col2im see col as a dense (rows, nb * P) matrix: its leading dim is cols, not the
      // full chunk's (they differ in a last, partial chunk).
      const cuda::Im2colGeometry cg = columns(nb);
      if (dw) {
        cuda::im2col(cg, x + n0 * g_.c * g_.h * g_.w, col, nullptr);
        cuda::sgemm(false, true, g_.k, rows_, cols, 1.f, dy_t, ld, col, cols, n0 == 0 ? 0.f : 1.f,
                    dw, rows_, nullptr);
      }
      if (dx) {
        cuda::sgemm(true, false, rows_, cols, g_.k, 1.f, w, rows_, dy_t, ld, 0.f, col, cols,
                    nullptr);
        cuda::col2im(cg, col, dx + n0 * g_.c * g_.h * g_.w, nullptr);
      }
    }
  }

  cuda::ConvGeometry g_;
  int64_t rows_, p_, chunk_;
  Buffer col_, dy_t_;
};

}  // namespace

void bench_conv(Bench& b) {
  const cuda::DeviceProperties& p = b.props();
  const int64_t batch = b.o.batch_size();
  const char* kDir[] = {"conv2d fwd", "conv2d bwd data", "conv2d bwd filter"};
  for (const ConvLayer& l : kConvLayers) {
    cuda::ConvGeometry g{.n = batch,
                         .c = l.c,
                         .h = l.hw,
                         .w = l.hw,
                         .k = l.k,
                         .r = l.r,
                         .s = l.r,
                         .stride = {l.stride, l.stride},
                         .padding = {l.pad, l.pad}};
    const double flop = 2.0 * batch * l.k * g.out_h() * g.out_w() * l.c * l.r * l.r;
    const size_t nx = batch * l.c * l.hw * l.hw, nw = l.k * l.c * l.r * l.r,
                 ny = batch * l.k * g.out_h() * g.out_w();
    std::ostringstream os;
    os << l.net << " " << l.c << "x" << l.hw << "x" << l.hw << "->" << l.k << " " << l.r << "x"
       << l.r << "/" << l.stride;
    const std::string shape = os.str();
    // One set of random operands per cuDNN precision, then our f32 path.
    struct Vendor {
      const char* name;
      double peak;
      cuda::ConvGeometry g;
      std::unique_ptr<Buffer> x, w, y, dy, dx, dw;
    };
    std::vector<Vendor> vendors;
    for (auto [dt, tf32, name, peak] :
         {std::tuple{DType::f32, false, "cudnn f32", p.peak_fp32_tflops()},
          std::tuple{DType::f32, true, "cudnn tf32", p.peak_tensor_tflops() / 2},
          std::tuple{DType::f16, false, "cudnn f16", p.peak_tensor_tflops()},
          std::tuple{DType::bf16, false, "cudnn bf16", p.peak_tensor_tflops()}}) {
      cuda::ConvGeometry gd = g;
      gd.dtype = dt;
      gd.allow_tf32 = tf32;
      const size_t e = dtype_size(dt);
      auto buf = [&](size_t n) { return std::make_unique<Buffer>(n * e, dt); };
      vendors.push_back({name, peak, gd, buf(nx), buf(nw), buf(ny), buf(ny), buf(nx), buf(nw)});
    }
    const cuda::Conv2dGeometry cg{.batch = batch,
                                  .channels = l.c,
                                  .height = l.hw,
                                  .width = l.hw,
                                  .out_channels = l.k,
                                  .kernel_h = l.r,
                                  .kernel_w = l.r,
                                  .stride_h = l.stride,
                                  .stride_w = l.stride,
                                  .pad_h = l.pad,
                                  .pad_w = l.pad};
    Buffer x(nx * 4), w(nw * 4), y(ny * 4), dy(ny * 4), dx(nx * 4), dw(nw * 4);
    const double peak = p.peak_fp32_tflops();
    const StokeBackward bwd(g);
    const std::string chunks = "chunk " + std::to_string(bwd.chunk()) + " samples";
    for (int dir = 0; dir < 3; ++dir) {
      double ref = 0;  // cuDNN f32 of this direction
      for (const Vendor& v : vendors) {
        const double rate = b.flops("conv", kDir[dir], shape, v.name, flop, v.peak, ref, [&] {
          if (dir == 0) cuda::conv2d_forward(v.g, v.x->ptr, v.w->ptr, v.y->ptr, nullptr);
          if (dir == 1) cuda::conv2d_backward_data(v.g, v.dy->ptr, v.w->ptr, v.dx->ptr, nullptr);
          if (dir == 2) cuda::conv2d_backward_filter(v.g, v.x->ptr, v.dy->ptr, v.dw->ptr, nullptr);
        });
        b.rows.back().note = cuda::conv2d_algorithm(v.g, dir);
        if (ref == 0) ref = rate;
      }
      if (dir == 0) {
        b.flops("conv", kDir[0], shape, "stoke f32", flop, peak, ref, [&] {
          cuda::conv2d_implicit_gemm_forward(cg, x.as<float>(), w.as<float>(), nullptr,
                                             y.as<float>(), nullptr);
        });
        b.rows.back().note = "implicit GEMM";
      } else if (dir == 1) {
        b.flops("conv", kDir[1], shape, "stoke f32", flop, peak, ref,
                [&] { bwd.data(dy.as<float>(), w.as<float>(), dx.as<float>()); });
        b.rows.back().note = "transpose + sgemm TN + col2im, " + chunks;
      } else {
        b.flops("conv", kDir[2], shape, "stoke f32", flop, peak, ref,
                [&] { bwd.filter(x.as<float>(), dy.as<float>(), dw.as<float>()); });
        b.rows.back().note = "transpose + im2col + sgemm NT, " + chunks;
      }
    }
  }
}

}  // namespace stoke::bench::ops_cuda
