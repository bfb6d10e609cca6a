// stoke-kernel-conv2d: the implicit-GEMM conv2d sandbox, the place to study
// cuda/kernels/conv2d_implicit_gemm.cu.
//
//   stoke-kernel-conv2d [--batch 32] [--reps 20] [--warmup 3] [--validate 1]
//
// 1. Validation: every tile on modest convolutions (3x3 same, strided + dilated + grouped,
//    depthwise, 1x1) against the CPU reference (ops::conv2d). A tile that fails is not timed.
// 2. Timing: ResNet-style layers at --batch, median of --reps CUDA-event timings after --warmup,
//    for each tile (the sweep), with the effective TFLOP/s (2 * N * OH * OW * OC * C/g * KH * KW).
//    A table, then one JSON line. cuDNN's numbers for the same layers come from bench/ops_cuda.
// Without a GPU (no driver, or no device) it prints "stoke-kernel-conv2d: no CUDA device (why):
// skipped" and exits 0.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "bench/kernels/sandbox.h"
#include "cuda/kernels/conv2d_implicit_gemm.h"
#include "ops/conv2d.h"
#include "ops/creation.h"

namespace {

using namespace stoke;
namespace sb = bench::sandbox;

const char* kUsage =
    "usage: stoke-kernel-conv2d [--batch N] [--reps R] [--warmup W] [--validate 0|1]";

struct Layer {
  std::string name;
  cuda::Conv2dGeometry g;
};

Shape input_shape(const cuda::Conv2dGeometry& g) {
  return {g.batch, g.channels, g.height, g.width};
}
Shape weight_shape(const cuda::Conv2dGeometry& g) {
  return {g.out_channels, g.channels / g.groups, g.kernel_h, g.kernel_w};
}

double flops(const cuda::Conv2dGeometry& g) {
  const auto out = cuda::conv2d_implicit_gemm_output_size(g);
  return 2.0 * double(g.batch) * double(out[0] * out[1]) * double(g.out_channels) *
         double(g.channels / g.groups * g.kernel_h * g.kernel_w);
}

// The worst normalized error of one tile on one geometry against ops::conv2d.
double validate(const cuda::Conv2dGeometry& g, int tile) {
  const Tensor x = randn(input_shape(g)), w = randn(weight_shape(g)), b = randn({g.out_channels});
  const Tensor want = ops::conv2d(x, w, b,
                                  {.stride = {g.stride_h, g.stride_w},
                                   .padding = {g.pad_h, g.pad_w},
                                   .dilation = {g.dilation_h, g.dilation_w},
                                   .groups = g.groups});
  sb::DeviceBuffer dx(static_cast<size_t>(x.numel())), dw(static_cast<size_t>(w.numel())),
      db(static_cast<size_t>(b.numel())), dy(static_cast<size_t>(want.numel()));
  dx.upload(x.data<float>());
  dw.upload(w.data<float>());
  db.upload(b.data<float>());
  cuda::conv2d_implicit_gemm_forward(g, dx.get(), dw.get(), db.get(), dy.get(), nullptr, tile);
  STOKE_CUDA_CHECK(cudaDeviceSynchronize());
  return sb::worst_error(dy.download(), want.to_vector<float>(), 1e-4, 1e-3);
}

}  // namespace

int main(int argc, char** argv) {
  int batch = 32, reps = 20, warmup = 3, do_validate = 1;
  if (!sb::parse_int_flags(argc, argv, {"batch", "reps", "warmup", "validate"},
                           {&batch, &reps, &warmup, &do_validate}, kUsage))
    return 2;
  std::string device;
  if (sb::skip_without_device("stoke-kernel-conv2d", device)) return 0;
  std::printf("stoke-kernel-conv2d on %s: batch %d, median of %d after %d warm-up\n",
              device.c_str(), batch, reps, warmup);

  const std::vector<cuda::Conv2dGeometry> checks = {
      {.batch = 4,
       .channels = 16,
       .height = 17,
       .width = 15,
       .out_channels = 24,
       .kernel_h = 3,
       .kernel_w = 3,
       .pad_h = 1,
       .pad_w = 1},
      {.batch = 2,
       .channels = 12,
       .height = 20,
       .width = 19,
       .out_channels = 18,
       .kernel_h = 3,
       .kernel_w = 5,
       .stride_h = 2,
       .stride_w = 1,
       .pad_h = 1,
       .pad_w = 2,
       .dilation_h = 2,
       .dilation_w = 1,
       .groups = 3},
      {.batch = 2,
       .channels = 32,
       .height = 14,
       .width = 14,
       .out_channels = 32,
       .kernel_h = 3,
       .kernel_w = 3,
       .pad_h = 1,
       .pad_w = 1,
       .groups = 32},
      {.batch = 3,
       .channels = 64,
       .height = 9,
       .width = 9,
       .out_channels = 40,
       .kernel_h = 1,
       .kernel_w = 1},
  };
  const std::vector<int> tiles = cuda::conv2d_implicit_gemm_tile_sizes();
  std::vector<bool> valid(tiles.size(), true);
  int failed = 0;
  if (do_validate)
    for (size_t t = 0; t < tiles.size(); ++t)
      for (size_t i = 0; i < checks.size(); ++i) {
        const double e = validate(checks[i], tiles[t]);
        if (!(e <= 1)) {
          valid[t] = false;
          ++failed;
          std::printf("VALIDATION FAILED: tile %d on check %zu (worst error %.3g x tolerance)\n",
                      tiles[t], i, e);
        }
      }

  const int64_t n = batch;
  const std::vector<Layer> layers = {
      {"resnet 64->64 56x56 3x3",
       {.batch = n,
        .channels = 64,
        .height = 56,
        .width = 56,
        .out_channels = 64,
        .kernel_h = 3,
        .kernel_w = 3,
        .pad_h = 1,
        .pad_w = 1}},
      {"resnet 128->128 28x28 3x3",
       {.batch = n,
        .channels = 128,
        .height = 28,
        .width = 28,
        .out_channels = 128,
        .kernel_h = 3,
        .kernel_w = 3,
        .pad_h = 1,
        .pad_w = 1}},
      {"resnet 128->256 28x28 3x3 s2",
       {.batch = n,
        .channels = 128,
        .height = 28,
        .width = 28,
        .out_channels = 256,
        .kernel_h = 3,
        .kernel_w = 3,
        .stride_h = 2,
        .stride_w = 2,
        .pad_h = 1,
        .pad_w = 1}},
      {"resnet 256->64 56x56 1x1",
       {.batch = n,
        .channels = 256,
        .height = 56,
        .width = 56,
        .out_channels = 64,
        .kernel_h = 1,
        .kernel_w = 1}},
      {"cifar 3->16 32x32 3x3",
       {.batch = n,
        .channels = 3,
        .height = 32,
        .width = 32,
        .out_channels = 16,
        .kernel_h = 3,
        .kernel_w = 3,
        .pad_h = 1,
        .pad_w = 1}},
  };

  bench::Table table({"layer", "tile", "valid", "ms", "TFLOP/s"});
  std::vector<std::string> rows;
  for (const Layer& l : layers) {
    const auto out = cuda::conv2d_implicit_gemm_output_size(l.g);
    const Tensor x = randn(input_shape(l.g)), w = randn(weight_shape(l.g));
    sb::DeviceBuffer dx(static_cast<size_t>(x.numel())), dw(static_cast<size_t>(w.numel())),
        dy(static_cast<size_t>(l.g.batch * l.g.out_channels * out[0] * out[1]));
    dx.upload(x.data<float>());
    dw.upload(w.data<float>());
    for (size_t t = 0; t < tiles.size(); ++t) {
      double ms = std::nan("");
      if (valid[t])
        ms = sb::median_event_ms(
            [&] {
              cuda::conv2d_implicit_gemm_forward(l.g, dx.get(), dw.get(), nullptr, dy.get(),
                                                 nullptr, tiles[t]);
            },
            reps, warmup);
      const double tflops = flops(l.g) / (ms * 1e-3) * 1e-12;
      const std::string v = !do_validate ? "-" : valid[t] ? "ok" : "FAIL";
      table.add({l.name, std::to_string(tiles[t]), v, bench::fmt(ms), bench::fmt(tflops, 2)});
      rows.push_back(bench::JsonObject()
                         .add("layer", l.name)
                         .add("tile", tiles[t])
                         .add("valid", v)
                         .add("ms", ms)
                         .add("tflops", tflops)
                         .str());
    }
  }
  table.print(std::cout);
  std::cout << bench::JsonObject()
                   .add("bench", "stoke-kernel-conv2d")
                   .add("device", device)
                   .add("batch", batch)
                   .add("reps", reps)
                   .add("validation_failures", failed)
                   .raw("rows", bench::json_array(rows))
                   .str()
            << std::endl;
  return failed ? 1 : 0;
}
