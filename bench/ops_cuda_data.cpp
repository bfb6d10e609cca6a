// stoke-bench-ops-cuda, section "data": the input pipeline's device kernel. A u8 NHWC batch
// becomes normalized f16 NCHW with a random crop (padding 4) and flip per image, in one kernel
// (cuda::crop_flip_normalize_u8_nhwc, what stoke-train --augment runs on a GPU), against the
// unfused chain a framework without the fusion runs: normalize to f32 (one kernel), cast f32 to
// f16 (a second), and the crop + flip left to the CPU workers (not timed here: it is CPU time).
// Also the plain normalize to f16 (no augmentation). GB/s are of the fused op's minimal traffic
// (the u8 batch read once, the f16 output written once) for every row, so they compare as
// throughput; "vs ref" is the percentage of the fused kernel's rate.
#include <string>
#include <vector>

#include "bench/ops_cuda.h"
#include "cuda/kernels/creation.h"
#include "cuda/kernels/normalize.h"

namespace stoke::bench::ops_cuda {

void bench_data(Bench& b) {
  struct Shape {
    int64_t n, h, w, c;
    const char* name;
  };
  std::vector<Shape> shapes = {{512, 32, 32, 3, "CIFAR 512x32x32x3"},
                               {128, 224, 224, 3, "ImageNet 128x224x224x3"},
                               {1024, 28, 28, 1, "Fashion-MNIST 1024x28x28x1"}};
  if (b.o.quick) shapes = {{64, 32, 32, 3, "CIFAR 64x32x32x3"}};
  const float mean[3] = {0.485f, 0.456f, 0.406f}, stdv[3] = {0.229f, 0.224f, 0.225f};
  for (const Shape& s : shapes) {
    const int64_t pixels = s.n * s.h * s.w, elems = pixels * s.c;
    Buffer in(elems, DType::u8, Fill::zero), f32(elems * 4), f16(elems * 2, DType::f16);
    // Crops drawn as stoke-train draws them (padding 4: offsets in [-4, 4], half flipped).
    std::vector<int32_t> host(3 * s.n);
    for (int64_t i = 0; i < s.n; ++i) {
      host[3 * i] = static_cast<int32_t>(i % 9) - 4;
      host[3 * i + 1] = static_cast<int32_t>((i / 9) % 9) - 4;
      host[3 * i + 2] = static_cast<int32_t>(i % 2);
    }
    Buffer crops(host.size() * sizeof(int32_t), DType::i32, Fill::zero);
    STOKE_CUDA_CHECK(
        cudaMemcpy(crops.ptr, host.data(), host.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
    const auto* u8 = static_cast<const uint8_t*>(in.ptr);
    const double traffic = 1.0 * elems + 2.0 * elems;  // u8 in, f16 out
    const double fused =
        b.bytes("data", "crop+flip+normalize -> f16", s.name, "stoke fused", traffic, 0, [&] {
          cuda::crop_flip_normalize_u8_nhwc(u8, crops.as<int32_t>(), DType::f16, f16.ptr, s.n, s.h,
                                            s.w, s.c, s.h, s.w, mean, stdv, nullptr);
        });
    b.bytes("data", "normalize -> f16 (no augmentation)", s.name, "stoke normalize", traffic, fused,
            [&] {
              cuda::normalize_u8_nhwc(u8, DType::f16, f16.ptr, s.n, s.h, s.w, s.c, mean, stdv,
                                      nullptr);
            });
    b.bytes("data", "normalize -> f32, cast -> f16 (crop on CPU)", s.name, "unfused chain", traffic,
            fused, [&] {
              cuda::normalize_u8_nhwc(u8, DType::f32, f32.ptr, s.n, s.h, s.w, s.c, mean, stdv,
                                      nullptr);
              cuda::cast(DType::f32, f32.ptr, DType::f16, f16.ptr, elems, nullptr);
            });
  }
}

}  // namespace stoke::bench::ops_cuda
