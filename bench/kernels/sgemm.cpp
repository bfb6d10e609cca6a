// stoke-kernel-sgemm: the SGEMM sandbox. The place to study cuda/kernels/sgemm.cu: every version
// (naive, smem_tiled, register_blocked, vectorized) and every tile it supports, next to cuBLAS.
//
//   stoke-kernel-sgemm [--size 2048] [--reps 20] [--warmup 3] [--validate 1]
//
// 1. Validation: each version x tile x layout (NN, NT, TN) runs C = A * B at an odd modest size
//    (257 x 193 x 311, so that every edge path runs) and is compared with the CPU reference
//    (ops::matmul). A version that fails is reported and not timed.
// 2. Timing: square size^3 NN products, median of --reps CUDA-event timings after --warmup, per
//    version and tile (the block-size sweep), and cuBLAS on the same buffers; GFLOP/s and the
//    ratio to cuBLAS. A table, then one JSON line.
// Without a GPU (no driver, or no device) it prints "stoke-kernel-sgemm: no CUDA device (why):
// skipped" and exits 0.
#include <cublas_v2.h>

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "bench/kernels/sandbox.h"
#include "cuda/kernels/sgemm.h"
#include "ops/creation.h"
#include "ops/linalg.h"

namespace {

using namespace stoke;
using cuda::SgemmVersion;
namespace sb = bench::sandbox;

const char* kUsage =
    "usage: stoke-kernel-sgemm [--size N] [--reps R] [--warmup W] [--validate 0|1]";

std::string key(SgemmVersion v, int tile) {
  return std::string(cuda::sgemm_version_name(v)) + "/" + std::to_string(tile);
}

// Validates one version/tile in the three layouts; returns the worst normalized error.
double validate(SgemmVersion v, int tile) {
  const int64_t m = 257, n = 193, k = 311;
  double worst = 0;
  for (int layout = 0; layout < 3; ++layout) {
    const bool ta = layout == 2, tb = layout == 1;
    const Tensor a = ta ? randn({k, m}) : randn({m, k});
    const Tensor b = tb ? randn({n, k}) : randn({k, n});
    const Tensor want = ops::matmul(ta ? a.t() : a, tb ? b.t() : b).contiguous();
    sb::DeviceBuffer da(static_cast<size_t>(m * k)), db(static_cast<size_t>(k * n)),
        dc(static_cast<size_t>(m * n));
    da.upload(a.data<float>());
    db.upload(b.data<float>());
    cuda::sgemm(ta, tb, m, n, k, 1.f, da.get(), ta ? m : k, db.get(), tb ? k : n, 0.f, dc.get(), n,
                nullptr, {.version = v, .tile = tile});
    STOKE_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> w = want.to_vector<float>();
    // randn operands, k = 311: f32 accumulation error stays well below 1e-3 absolute.
    worst = std::max(worst, sb::worst_error(dc.download(), w, 1e-4, 1e-3));
  }
  return worst;
}

}  // namespace

int main(int argc, char** argv) {
  int size = 2048, reps = 20, warmup = 3, do_validate = 1;
  if (!sb::parse_int_flags(argc, argv, {"size", "reps", "warmup", "validate"},
                           {&size, &reps, &warmup, &do_validate}, kUsage))
    return 2;
  std::string device;
  if (sb::skip_without_device("stoke-kernel-sgemm", device)) return 0;
  std::printf(
      "stoke-kernel-sgemm on %s: validate 257x193x311 (NN, NT, TN), time %dx%dx%d NN, "
      "median of %d after %d warm-up\n",
      device.c_str(), size, size, size, reps, warmup);

  std::vector<std::pair<SgemmVersion, int>> configs;
  for (SgemmVersion v : cuda::kSgemmVersions)
    for (int tile : cuda::sgemm_tile_sizes(v)) configs.emplace_back(v, tile);

  std::vector<double> errors(configs.size(), 0.0);
  int failed = 0;
  if (do_validate)
    for (size_t i = 0; i < configs.size(); ++i) {
      errors[i] = validate(configs[i].first, configs[i].second);
      if (!(errors[i] <= 1)) {
        ++failed;
        std::printf("VALIDATION FAILED: %s (worst error %.3g x tolerance)\n",
                    key(configs[i].first, configs[i].second).c_str(), errors[i]);
      }
    }

  const size_t elems = static_cast<size_t>(size) * size;
  sb::DeviceBuffer a(elems), b(elems), c(elems);
  {
    const Tensor ha = randn({size, size}), hb = randn({size, size});
    a.upload(ha.data<float>());
    b.upload(hb.data<float>());
  }
  const double gflop = 2.0 * size * size * double(size) * 1e-9;

  cublasHandle_t handle;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "cublasCreate failed\n");
    return 1;
  }
  // Row-major C = A * B is column-major C^T = B^T * A^T: swap the operands.
  const float one = 1.f, zero = 0.f;
  const double cublas_ms = sb::median_event_ms(
      [&] {
        cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, size, size, size, &one, b.get(), size,
                    a.get(), size, &zero, c.get(), size);
      },
      reps, warmup);
  cublasDestroy(handle);

  bench::Table table({"version", "tile", "valid", "ms", "GFLOP/s", "vs cuBLAS"});
  std::vector<std::string> rows;
  auto add = [&](const std::string& name, int tile, const std::string& valid, double ms) {
    table.add({name, tile ? std::to_string(tile) : "-", valid, bench::fmt(ms),
               bench::fmt(gflop / (ms * 1e-3), 1), bench::fmt(cublas_ms / ms, 3)});
    rows.push_back(bench::JsonObject()
                       .add("version", name)
                       .add("tile", tile)
                       .add("valid", valid)
                       .add("ms", ms)
                       .add("gflops", gflop / (ms * 1e-3))
                       .str());
  };
  add("cublas", 0, "ref", cublas_ms);
  for (size_t i = 0; i < configs.size(); ++i) {
    const auto [v, tile] = configs[i];
    const bool ok = !do_validate || errors[i] <= 1;
    if (!ok) {
      add(cuda::sgemm_version_name(v), tile, "FAIL", std::nan(""));
      continue;
    }
    const double ms = sb::median_event_ms(
        [&] {
          cuda::sgemm(false, false, size, size, size, 1.f, a.get(), size, b.get(), size, 0.f,
                      c.get(), size, nullptr, {.version = v, .tile = tile});
        },
        reps, warmup);
    add(cuda::sgemm_version_name(v), tile, do_validate ? "ok" : "-", ms);
  }
  table.print(std::cout);
  std::cout << bench::JsonObject()
                   .add("bench", "stoke-kernel-sgemm")
                   .add("device", device)
                   .add("size", size)
                   .add("reps", reps)
                   .add("validation_failures", failed)
                   .raw("rows", bench::json_array(rows))
                   .str()
            << std::endl;
  return failed ? 1 : 0;
}
