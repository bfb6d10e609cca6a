// stoke-bench-ops-cuda: per op and shape, stoke's CUDA kernels next to the vendor libraries —
// cuBLAS vs our SGEMM versions (square GEMMs n = 512 ... 8192), cuDNN vs our implicit-GEMM
// convolution (the conv layers of ResNet-18/CIFAR and VGG-16 at batch 128), and GB/s of our
// reduction next to a device-to-device copy (1 K ... 256 M elements). Each case: warm-up runs,
// then the median of N runs timed with CUDA events, the L2 cache flushed before each run; TFLOP/s
// or GB/s and the percentage of the device's peak (from its properties). Prints a table and one
// JSON line. Without a GPU it says so and exits 0.
//
//   stoke-bench-ops-cuda [--quick] [--reps N]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "cuda/runtime/caching_allocator.h"
#include "cuda/runtime/device.h"
#include "cuda/runtime/stream.h"
#include "cuda/vendor/cublas_gemm.h"
#include "cuda/vendor/cudnn_conv.h"
#if __has_include("cuda/kernels/sgemm.h")
#include "cuda/kernels/sgemm.h"
#define STOKE_BENCH_SGEMM 1
#endif
#if __has_include("cuda/kernels/conv2d_implicit_gemm.h")
#include "cuda/kernels/conv2d_implicit_gemm.h"
#define STOKE_BENCH_CONV 1
#endif
#if __has_include("cuda/kernels/reduce.h")
#include "cuda/kernels/reduce.h"
#define STOKE_BENCH_REDUCE 1
#endif

namespace {

using namespace stoke;
using namespace stoke::cuda;

struct Options {
  bool quick = false;
  int reps = 20;
};

// Device scratch from the caching allocator, freed with the object.
struct Buffer {
  void* ptr = nullptr;
  explicit Buffer(size_t bytes) : ptr(caching_allocator().allocate(bytes, 0, nullptr)) {
    STOKE_CUDA_CHECK(cudaMemset(ptr, 0, bytes));
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { caching_allocator().free(ptr); }
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr);
  }
};

// Times `fn` on the legacy stream: warm-up, then the median of reps runs, each preceded by a
// write over a buffer twice the L2 size so that no run starts with the previous one's data.
class Timer {
 public:
  explicit Timer(int reps)
      : reps_(reps), flush_(std::max<size_t>(2 * device_properties(0).l2_cache_bytes, 1 << 20)) {}

  double median_ms(const std::function<void()>& fn) {
    for (int i = 0; i < 3; ++i) fn();
    std::vector<float> ms;
    Event start, end;
    for (int i = 0; i < reps_; ++i) {
      STOKE_CUDA_CHECK(cudaMemsetAsync(flush_buffer_.ptr, i & 0xff, flush_, nullptr));
      start.record(nullptr);
      fn();
      end.record(nullptr);
      end.synchronize();
      ms.push_back(start.elapsed_ms(end));
    }
    std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
    return ms[ms.size() / 2];
  }

 private:
  int reps_;
  size_t flush_;
  Buffer flush_buffer_{flush_};
};

struct Row {
  std::string group, op, shape, impl;
  double ms = 0, rate = 0, peak_pct = 0;
  const char* unit = "TFLOP/s";
};

void print(const std::vector<Row>& rows) {
  std::printf("%-6s %-24s %-34s %-26s %10s %10s %7s\n", "group", "op", "shape", "impl", "ms",
              "rate", "%peak");
  for (const Row& r : rows) {
    std::printf("%-6s %-24s %-34s %-26s %10.4f %6.2f %-3s %6.1f%%\n", r.group.c_str(), r.op.c_str(),
                r.shape.c_str(), r.impl.c_str(), r.ms, r.rate, r.unit[0] == 'T' ? "TF" : "GB",
                r.peak_pct);
  }
  std::ostringstream js;
  js << "{\"bench\":\"ops_cuda\",\"device\":\"" << device_properties(0).name << "\",\"rows\":[";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    js << (i ? "," : "") << "{\"group\":\"" << r.group << "\",\"op\":\"" << r.op
       << "\",\"shape\":\"" << r.shape << "\",\"impl\":\"" << r.impl << "\",\"ms\":" << r.ms
       << ",\"rate\":" << r.rate << ",\"unit\":\"" << r.unit << "\",\"peak_pct\":" << r.peak_pct
       << "}";
  }
  js << "]}";
  std::printf("%s\n", js.str().c_str());
}

void bench_gemm(const Options& o, Timer& timer, std::vector<Row>& rows) {
  const DeviceProperties& p = device_properties(0);
  std::vector<int64_t> sizes = {512, 1024, 2048, 4096, 8192};
  if (o.quick) sizes = {512, 1024};
  for (int64_t n : sizes) {
    const double flops = 2.0 * n * n * n;
    Buffer a(n * n * 4), b(n * n * 4), c(n * n * 4);
    auto add = [&](const std::string& impl, double peak_tflops, const std::function<void()>& fn) {
      const double ms = timer.median_ms(fn);
      const double tflops = flops / (ms * 1e-3) / 1e12;
      rows.push_back({"gemm", "matmul", std::to_string(n) + "^3", impl, ms, tflops,
                      peak_tflops > 0 ? 100 * tflops / peak_tflops : 0, "TFLOP/s"});
    };
    for (auto [dt, tf32, name, peak] :
         {std::tuple{DType::f32, false, "cublas f32", p.peak_fp32_tflops()},
          std::tuple{DType::f32, true, "cublas tf32", p.peak_tensor_tflops() / 2},
          std::tuple{DType::f16, false, "cublas f16", p.peak_tensor_tflops()},
          std::tuple{DType::bf16, false, "cublas bf16", p.peak_tensor_tflops()}}) {
      add(name, peak, [&, dt = dt, tf32 = tf32] {
        gemm(dt, n, n, n, a.ptr, n, b.ptr, n, c.ptr, n, {.allow_tf32 = tf32}, nullptr);
      });
    }
#ifdef STOKE_BENCH_SGEMM
    for (SgemmVersion v : kSgemmVersions) {
      if (v == SgemmVersion::naive && n > 2048) continue;  // seconds per run; says nothing new
      add(std::string("stoke sgemm ") + sgemm_version_name(v), p.peak_fp32_tflops(), [&] {
        sgemm(false, false, n, n, n, 1.0f, a.as<float>(), n, b.as<float>(), n, 0.0f, c.as<float>(),
              n, nullptr, {.version = v});
      });
    }
#endif
  }
}

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

void bench_conv(const Options& o, Timer& timer, std::vector<Row>& rows) {
  const DeviceProperties& p = device_properties(0);
  const int64_t batch = o.quick ? 8 : 128;
  for (const ConvLayer& l : kConvLayers) {
    ConvGeometry g{.n = batch,
                   .c = l.c,
                   .h = l.hw,
                   .w = l.hw,
                   .k = l.k,
                   .r = l.r,
                   .s = l.r,
                   .stride = {l.stride, l.stride},
                   .padding = {l.pad, l.pad}};
    const double flops = 2.0 * batch * l.k * g.out_h() * g.out_w() * l.c * l.r * l.r;
    Buffer x(batch * l.c * l.hw * l.hw * 4), w(l.k * l.c * l.r * l.r * 4),
        y(batch * l.k * g.out_h() * g.out_w() * 4);
    std::ostringstream shape;
    shape << l.net << " " << l.c << "x" << l.hw << "x" << l.hw << "->" << l.k << " " << l.r << "x"
          << l.r << "/" << l.stride;
    auto add = [&](const std::string& impl, double peak, const std::function<void()>& fn) {
      const double ms = timer.median_ms(fn);
      const double tflops = flops / (ms * 1e-3) / 1e12;
      rows.push_back({"conv", "conv2d fwd", shape.str(), impl, ms, tflops,
                      peak > 0 ? 100 * tflops / peak : 0, "TFLOP/s"});
    };
    for (auto [dt, tf32, name, peak] :
         {std::tuple{DType::f32, false, "cudnn f32", p.peak_fp32_tflops()},
          std::tuple{DType::f32, true, "cudnn tf32", p.peak_tensor_tflops() / 2},
          std::tuple{DType::f16, false, "cudnn f16", p.peak_tensor_tflops()}}) {
      ConvGeometry gd = g;
      gd.dtype = dt;
      gd.allow_tf32 = tf32;
      add(name, peak, [&, gd] { conv2d_forward(gd, x.ptr, w.ptr, y.ptr, nullptr); });
    }
#ifdef STOKE_BENCH_CONV
    const Conv2dGeometry cg{.batch = batch,
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
    add("stoke implicit-gemm f32", p.peak_fp32_tflops(), [&] {
      conv2d_implicit_gemm_forward(cg, x.as<float>(), w.as<float>(), nullptr, y.as<float>(),
                                   nullptr);
    });
#endif
  }
}

void bench_memory(const Options& o, Timer& timer, std::vector<Row>& rows) {
  const double peak = device_properties(0).peak_bandwidth_gbs();
  std::vector<int64_t> sizes;
  for (int64_t n = 1 << 10; n <= (int64_t{1} << 28); n <<= 2) sizes.push_back(n);
  if (o.quick) sizes = {1 << 10, 1 << 20};
  for (int64_t n : sizes) {
    Buffer a(n * 4), b(n * 4);
    auto add = [&](const char* op, const char* impl, double bytes,
                   const std::function<void()>& fn) {
      const double ms = timer.median_ms(fn);
      const double gbs = bytes / (ms * 1e-3) / 1e9;
      rows.push_back({"memory", op, std::to_string(n) + " f32", impl, ms, gbs,
                      peak > 0 ? 100 * gbs / peak : 0, "GB/s"});
    };
    add("copy d2d", "cudaMemcpyAsync", 8.0 * n, [&] {
      STOKE_CUDA_CHECK(cudaMemcpyAsync(b.ptr, a.ptr, n * 4, cudaMemcpyDeviceToDevice, nullptr));
    });
#ifdef STOKE_BENCH_REDUCE
    add("sum (all)", "stoke reduce", 4.0 * n,
        [&] { reduce(ReduceOp::sum, DType::f32, a.ptr, b.ptr, nullptr, 1, n, 1, nullptr); });
#endif
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      o.quick = true;
    } else if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
      o.reps = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: %s [--quick] [--reps N]\n", argv[0]);
      return 2;
    }
  }
  if (!is_available()) {
    std::printf("stoke-bench-ops-cuda: no CUDA device (%s): skipped\n",
                device_unavailable_reason().c_str());
    return 0;
  }
  register_cuda_allocator();
  const DeviceProperties& p = device_properties(0);
  std::printf("%s: peak %.1f TFLOP/s f32, %.1f TFLOP/s f16 tensor, %.0f GB/s\n",
              p.summary().c_str(), p.peak_fp32_tflops(), p.peak_tensor_tflops(),
              p.peak_bandwidth_gbs());
  std::vector<Row> rows;
  Timer timer(o.reps);
  bench_gemm(o, timer, rows);
  bench_conv(o, timer, rows);
  bench_memory(o, timer, rows);
  print(rows);
  return 0;
}
