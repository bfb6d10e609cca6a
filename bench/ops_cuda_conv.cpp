// stoke-bench-ops-cuda, section "conv": cuDNN (f32, tf32, f16, bf16) vs stoke's own convolution
// on the conv layers of ResNet-18/CIFAR and VGG-16 at batch 128, in the three directions:
//   fwd          cuDNN conv2d_forward          | conv2d_implicit_gemm_forward
//   bwd data     cuDNN conv2d_backward_data    | per chunk of samples: dY transposed to
//                                                (K, samples * P), col = W^T dY (SGEMM TN),
//                                                dX = col2im(col)
//   bwd filter   cuDNN conv2d_backward_filter  | per chunk: dY transposed, col = im2col(X),
//                                                dW (+)= dY col^T (SGEMM NT)
// Our backward is cuda::conv2d_backward (cuda/kernels/conv2d_backward.h), the launcher
// ops/cuda/conv2d.cpp's stoke path runs, under the same default column budget; called here on raw
// buffers so that the rows time the kernels alone, without the glue's f32 copies and allocations.
// Each direction counts 2 N K OH OW C R S flops.
#include <memory>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "bench/ops_cuda.h"
#include "cuda/kernels/conv2d_backward.h"
#include "cuda/kernels/conv2d_implicit_gemm.h"
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
    const int64_t chunk = cuda::conv2d_backward_chunk(cg, cuda::kConv2dBackwardColumnBudget);
    Buffer workspace(cuda::conv2d_backward_workspace_floats(cg, chunk) * 4, DType::f32, Fill::zero);
    const std::string chunks = "chunk " + std::to_string(chunk) + " samples";
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
        b.flops("conv", kDir[1], shape, "stoke f32", flop, peak, ref, [&] {
          cuda::conv2d_backward(cg, dy.as<float>(), nullptr, w.as<float>(), dx.as<float>(), nullptr,
                                workspace.as<float>(), chunk, nullptr);
        });
        b.rows.back().note = "transpose + sgemm TN + col2im, " + chunks;
      } else {
        b.flops("conv", kDir[2], shape, "stoke f32", flop, peak, ref, [&] {
          cuda::conv2d_backward(cg, dy.as<float>(), x.as<float>(), nullptr, nullptr, dw.as<float>(),
                                workspace.as<float>(), chunk, nullptr);
        });
        // The split-K slices of a full chunk's dW SGEMM (conv2d_backward.cu's choice).
        const auto out = cuda::conv2d_implicit_gemm_output_size(cg);
        const int64_t slices =
            cuda::sgemm_split_k_slices(l.k, l.c * l.r * l.r, chunk * out[0] * out[1]);
        b.rows.back().note =
            "transpose + im2col + sgemm NT split-K x" + std::to_string(slices) + ", " + chunks;
      }
    }
  }
}

}  // namespace stoke::bench::ops_cuda
