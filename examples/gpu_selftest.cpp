// stoke-gpu-selftest: every vendor call (cuBLAS, cuDNN) and custom kernel launcher of the CUDA
// backend against the CPU reference (stoke::ops on f32 CPU tensors) at several shapes and dtypes.
// Prints one row per case (op, shape, dtype, max abs error, max rel error, pass/fail) and exits
// non-zero on any failure. Without a GPU (or in a build without the CUDA backend) it prints
// "stoke-gpu-selftest: no CUDA device (<reason>): skipped" and exits 0. The first command to run
// when a GPU appears.
//
// Adding an op is one function `void check_NAME(Suite& s)` that runs the op for its cases and
// calls s.compare(...), plus one line in kChecks.
#include <cstdio>
#include <cstring>
#include <string>

// STOKE_HAS_CUDA comes with the real stoke_cuda library (cuda/CMakeLists.txt sets it on the
// target).
#if defined(STOKE_HAS_CUDA) && __has_include("cuda/runtime/device.h")
#define STOKE_SELFTEST_CUDA 1
#endif

#ifndef STOKE_SELFTEST_CUDA

int main() {
  std::printf(
      "stoke-gpu-selftest: no CUDA device (stoke was built without the CUDA backend): "
      "skipped\n");
  return 0;
}

#else

#include <algorithm>
#include <array>
#include <cmath>
#include <exception>
#include <functional>
#include <vector>

#include "cuda/runtime/caching_allocator.h"
#include "cuda/runtime/copy.h"
#include "cuda/runtime/device.h"
#include "cuda/runtime/stream.h"
#include "cuda/vendor/cublas_gemm.h"
#include "cuda/vendor/cudnn_batch_norm.h"
#include "cuda/vendor/cudnn_conv.h"
#include "cuda/vendor/cudnn_pool.h"
#include "stoke/stoke.h"

#if __has_include("cuda/kernels/sgemm.h")
#include "cuda/kernels/sgemm.h"
#endif
#if __has_include("cuda/kernels/conv2d_implicit_gemm.h")
#include "cuda/kernels/conv2d_implicit_gemm.h"
#endif
#if __has_include("cuda/kernels/reduce.h")
#include "cuda/kernels/reduce.h"
#endif
#if __has_include("cuda/kernels/softmax.h")
#include "cuda/kernels/softmax.h"
#endif

namespace {

using namespace stoke;

// The table being filled, and the helpers every check uses.
struct Suite {
  struct Row {
    std::string op, shape, dtype;
    double max_abs = 0, max_rel = 0;
    bool pass = false;
    std::string note;
  };
  std::vector<Row> rows;

  // A cpu f32 tensor converted to `dtype` and copied to cuda:0.
  static Tensor upload(const Tensor& cpu_f32, DType dtype) {
    return cuda::to_device(cpu_f32.to(dtype), Device::cuda(0));
  }
  // A device tensor back on the cpu as f32 (after the device finished).
  static Tensor download(const Tensor& device_tensor) {
    STOKE_CUDA_CHECK(cudaDeviceSynchronize());
    return cuda::to_device(device_tensor, Device::cpu()).to(DType::f32);
  }
  // The f32 values a `dtype` input really holds: the reference computes from these.
  static Tensor rounded(const Tensor& cpu_f32, DType dtype) {
    return cpu_f32.to(dtype).to(DType::f32);
  }
  // Error bound relative to the output's scale: f32 accumulation-order noise, TF32's 10-bit
  // inputs, f16's 11-bit and bf16's 8-bit outputs.
  static double tolerance(DType dtype, bool tf32 = false) {
    if (dtype == DType::f16) return 5e-3;
    if (dtype == DType::bf16) return 4e-2;
    return tf32 ? 5e-3 : 1e-4;
  }

  // Adds a row: pass when every |got - ref| <= tol * max(1, max |ref|) and NaNs agree.
  void compare(const std::string& op, const std::string& shape, const std::string& dtype,
               const Tensor& got, const Tensor& ref, double tol) {
    Row row{op, shape, dtype, 0, 0, false, ""};
    const std::vector<float> g = got.to(DType::f32).contiguous().to_vector<float>();
    const std::vector<float> r = ref.to(DType::f32).contiguous().to_vector<float>();
    if (g.size() != r.size()) {
      row.note = detail::str_cat("size ", g.size(), " != reference ", r.size());
      rows.push_back(row);
      return;
    }
    // Judged against the output's scale: a GEMM's small entries carry the absolute error of its
    // large ones.
    double scale = 1.0;
    for (float v : r) scale = std::max(scale, static_cast<double>(std::fabs(v)));
    bool ok = true;
    for (size_t i = 0; i < g.size(); ++i) {
      const double d = std::fabs(static_cast<double>(g[i]) - r[i]);
      if (std::isnan(g[i]) != std::isnan(r[i])) ok = false;
      if (std::isnan(d)) continue;
      if (d > tol * scale) ok = false;
      row.max_abs = std::max(row.max_abs, d);
      row.max_rel = std::max(row.max_rel, d / std::max(1e-6, std::fabs(static_cast<double>(r[i]))));
    }
    row.pass = ok;
    rows.push_back(row);
  }

  void fail(const std::string& op, const std::string& why) {
    rows.push_back(Row{op, "-", "-", 0, 0, false, why});
  }
};

}  // namespace

namespace {

const DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};

std::string dims(std::initializer_list<int64_t> v) {
  std::string s;
  for (int64_t x : v) s.append(s.empty() ? "" : "x").append(std::to_string(x));
  return s;
}

// cuBLAS GEMM: NN, NT, TN and a strided batch, f32 / tf32 / f16 / bf16.
void check_cublas_gemm(Suite& s) {
  struct Case {
    int64_t m, n, k;
  };
  for (Case c : {Case{64, 64, 64}, Case{127, 33, 65}, Case{256, 512, 128}}) {
    for (DType dt : kFloatTypes) {
      for (bool tf32 : {false, true}) {
        if (tf32 && dt != DType::f32) continue;
        const std::string dname = tf32 ? "tf32" : dtype_name(dt);
        for (int mode = 0; mode < 3; ++mode) {  // NN, NT, TN
          const bool ta = mode == 2, tb = mode == 1;
          Tensor a = randn(ta ? Shape{c.k, c.m} : Shape{c.m, c.k});
          Tensor b = randn(tb ? Shape{c.n, c.k} : Shape{c.k, c.n});
          Tensor ra = Suite::rounded(a, dt), rb = Suite::rounded(b, dt);
          Tensor ref = ops::matmul(ta ? ra.t() : ra, tb ? rb.t() : rb);
          Tensor da = Suite::upload(a, dt), db = Suite::upload(b, dt);
          Tensor dc = empty({c.m, c.n}, {.dtype = dt, .device = Device::cuda(0)});
          cuda::gemm(dt, c.m, c.n, c.k, da.data_ptr(), ta ? c.m : c.k, db.data_ptr(),
                     tb ? c.k : c.n, dc.data_ptr(), c.n,
                     {.trans_a = ta, .trans_b = tb, .allow_tf32 = tf32}, cuda::current_stream());
          static constexpr const char* kModes[] = {"gemm NN", "gemm NT", "gemm TN"};
          s.compare(std::string("cublas ") + kModes[mode], dims({c.m, c.n, c.k}), dname,
                    Suite::download(dc), ref, Suite::tolerance(dt, tf32));
        }
      }
    }
  }
  // Strided batch through the tensor form.
  for (DType dt : kFloatTypes) {
    Tensor a = randn({3, 17, 40}), b = randn({3, 40, 9});
    Tensor ref = ops::matmul(Suite::rounded(a, dt), Suite::rounded(b, dt));
    Tensor got = cuda::cublas_matmul(Suite::upload(a, dt), Suite::upload(b, dt));
    s.compare("cublas gemm batched", "3x17x9x40", dtype_name(dt), Suite::download(got), ref,
              Suite::tolerance(dt));
  }
}

// cuDNN convolution, all three directions.
void check_cudnn_conv(Suite& s) {
  struct Case {
    int64_t n, c, h, w, k, r, st, pad, groups;
  };
  for (Case c : {Case{2, 3, 8, 8, 4, 3, 1, 1, 1}, Case{4, 16, 15, 15, 8, 3, 2, 1, 1},
                 Case{2, 8, 7, 9, 8, 1, 1, 0, 1}, Case{2, 8, 9, 9, 6, 3, 1, 1, 2}}) {
    for (DType dt : kFloatTypes) {
      cuda::ConvGeometry g{.n = c.n,
                           .c = c.c,
                           .h = c.h,
                           .w = c.w,
                           .k = c.k,
                           .r = c.r,
                           .s = c.r,
                           .stride = {c.st, c.st},
                           .padding = {c.pad, c.pad},
                           .groups = c.groups,
                           .dtype = dt};
      const Conv2dOptions o{.stride = {c.st, c.st}, .padding = {c.pad, c.pad}, .groups = c.groups};
      Tensor x = randn({c.n, c.c, c.h, c.w}), w = randn({c.k, c.c / c.groups, c.r, c.r});
      Tensor dy = randn({c.n, c.k, g.out_h(), g.out_w()});
      Tensor rx = Suite::rounded(x, dt), rw = Suite::rounded(w, dt), rdy = Suite::rounded(dy, dt);
      Tensor dx_ = Suite::upload(x, dt), dw_ = Suite::upload(w, dt), ddy = Suite::upload(dy, dt);
      const std::string shape = dims({c.n, c.c, c.h, c.w}) + " k" + std::to_string(c.k) + " " +
                                std::to_string(c.r) + "x" + std::to_string(c.r) + " s" +
                                std::to_string(c.st) + " g" + std::to_string(c.groups);
      const double tol = 2 * Suite::tolerance(dt);
      Tensor y = empty({c.n, c.k, g.out_h(), g.out_w()}, {.dtype = dt, .device = Device::cuda(0)});
      cuda::conv2d_forward(g, dx_.data_ptr(), dw_.data_ptr(), y.data_ptr(), cuda::current_stream());
      s.compare("cudnn conv2d fwd", shape, dtype_name(dt), Suite::download(y),
                ops::conv2d(rx, rw, Tensor(), o), tol);
      Tensor gx = empty(x.shape(), {.dtype = dt, .device = Device::cuda(0)});
      cuda::conv2d_backward_data(g, ddy.data_ptr(), dw_.data_ptr(), gx.data_ptr(),
                                 cuda::current_stream());
      s.compare("cudnn conv2d bwd-data", shape, dtype_name(dt), Suite::download(gx),
                ops::conv2d_backward_input(rdy, rx, rw, o), tol);
      Tensor gw = empty(w.shape(), {.dtype = dt, .device = Device::cuda(0)});
      cuda::conv2d_backward_filter(g, dx_.data_ptr(), ddy.data_ptr(), gw.data_ptr(),
                                   cuda::current_stream());
      s.compare("cudnn conv2d bwd-filter", shape, dtype_name(dt), Suite::download(gw),
                ops::conv2d_backward_weight(rdy, rx, rw, o), tol);
    }
  }
}

// cuDNN batch norm: training forward (output, saved and running statistics) and backward.
void check_cudnn_batch_norm(Suite& s) {
  for (Shape shape : {Shape{8, 4, 5, 5}, Shape{16, 3, 7, 1}, Shape{32, 10, 1, 1}}) {
    for (DType dt : kFloatTypes) {
      const int64_t C = shape[1];
      Tensor x = randn(shape), dy = randn(shape);
      Tensor w = rand({C}), b = randn({C});
      Tensor rm = zeros({C}), rv = ones({C});
      Tensor rx = Suite::rounded(x, dt), rdy = Suite::rounded(dy, dt);
      const BatchNormOptions o{.training = true, .momentum = 0.1, .eps = 1e-5};
      Tensor ref_rm = rm.clone(), ref_rv = rv.clone();
      auto ref = ops::batch_norm_forward(rx, ref_rm, ref_rv, w, b, o);
      auto ref_g = ops::batch_norm_backward(rdy, rx, w, ref.save_mean, ref.save_invstd, true);

      const cuda::BatchNormGeometry g{
          .n = shape[0], .c = C, .h = shape[2], .w = shape[3], .dtype = dt};
      Tensor dx_ = Suite::upload(x, dt), ddy = Suite::upload(dy, dt);
      Tensor dw_ = Suite::upload(w, DType::f32), db_ = Suite::upload(b, DType::f32);
      Tensor drm = Suite::upload(rm, DType::f32), drv = Suite::upload(rv, DType::f32);
      auto dev = [&](Shape sh, DType t) {
        return empty(sh, {.dtype = t, .device = Device::cuda(0)});
      };
      Tensor y = dev(shape, dt), sm = dev({C}, DType::f32), si = dev({C}, DType::f32);
      cuda::batch_norm_forward_training(g, dx_.data_ptr(), y.data_ptr(), dw_.data<float>(),
                                        db_.data<float>(), drm.data<float>(), drv.data<float>(),
                                        o.momentum, o.eps, sm.data<float>(), si.data<float>(),
                                        cuda::current_stream());
      const std::string sh = shape.str(), dn = dtype_name(dt);
      const double tol = 2 * Suite::tolerance(dt);
      s.compare("cudnn batch_norm fwd", sh, dn, Suite::download(y), ref.output, tol);
      s.compare("cudnn batch_norm save_mean", sh, dn, Suite::download(sm), ref.save_mean, tol);
      s.compare("cudnn batch_norm save_invstd", sh, dn, Suite::download(si), ref.save_invstd, tol);
      s.compare("cudnn batch_norm running_var", sh, dn, Suite::download(drv), ref_rv, tol);
      Tensor gx = dev(shape, dt), gw = dev({C}, DType::f32), gb = dev({C}, DType::f32);
      cuda::batch_norm_backward(g, dx_.data_ptr(), ddy.data_ptr(), gx.data_ptr(), dw_.data<float>(),
                                gw.data<float>(), gb.data<float>(), sm.data<float>(),
                                si.data<float>(), o.eps, cuda::current_stream());
      s.compare("cudnn batch_norm bwd dx", sh, dn, Suite::download(gx), ref_g.grad_input, tol);
      s.compare("cudnn batch_norm bwd dweight", sh, dn, Suite::download(gw), ref_g.grad_weight,
                tol);
      s.compare("cudnn batch_norm bwd dbias", sh, dn, Suite::download(gb), ref_g.grad_bias, tol);
    }
  }
}

// cuDNN pooling: max and average, forward and backward.
void check_cudnn_pool(Suite& s) {
  struct Case {
    int64_t n, c, h, w, k, st, pad;
    cuda::PoolMode mode;
  };
  for (Case c : {Case{2, 3, 8, 8, 2, 2, 0, cuda::PoolMode::max},
                 Case{2, 4, 9, 11, 3, 2, 1, cuda::PoolMode::max},
                 Case{2, 3, 8, 8, 3, 1, 1, cuda::PoolMode::avg_include_pad},
                 Case{1, 5, 7, 7, 3, 2, 1, cuda::PoolMode::avg_exclude_pad}}) {
    for (DType dt : kFloatTypes) {
      const cuda::PoolGeometry g{.n = c.n,
                                 .c = c.c,
                                 .h = c.h,
                                 .w = c.w,
                                 .kernel = {c.k, c.k},
                                 .stride = {c.st, c.st},
                                 .padding = {c.pad, c.pad},
                                 .mode = c.mode,
                                 .dtype = dt};
      const Pool2dOptions o{.kernel_size = {c.k, c.k},
                            .stride = {c.st, c.st},
                            .padding = {c.pad, c.pad},
                            .count_include_pad = c.mode != cuda::PoolMode::avg_exclude_pad};
      Tensor x = randn({c.n, c.c, c.h, c.w}), dy = randn({c.n, c.c, g.out_h(), g.out_w()});
      Tensor rx = Suite::rounded(x, dt), rdy = Suite::rounded(dy, dt);
      Tensor ref_y, ref_dx;
      if (c.mode == cuda::PoolMode::max) {
        auto r = ops::max_pool2d_with_indices(rx, o);
        ref_y = r.output;
        ref_dx = ops::max_pool2d_backward(rdy, r.indices, rx.shape());
      } else {
        ref_y = ops::avg_pool2d(rx, o);
        ref_dx = ops::avg_pool2d_backward(rdy, rx.shape(), o);
      }
      Tensor dx_ = Suite::upload(x, dt), ddy = Suite::upload(dy, dt);
      Tensor y = empty(ref_y.shape(), {.dtype = dt, .device = Device::cuda(0)});
      Tensor gx = empty(x.shape(), {.dtype = dt, .device = Device::cuda(0)});
      cuda::pool2d_forward(g, dx_.data_ptr(), y.data_ptr(), cuda::current_stream());
      cuda::pool2d_backward(g, y.data_ptr(), ddy.data_ptr(), dx_.data_ptr(), gx.data_ptr(),
                            cuda::current_stream());
      const std::string name = std::string("cudnn ") + g.str().substr(0, g.str().find(' '));
      const std::string shape = dims({c.n, c.c, c.h, c.w}) + " k" + std::to_string(c.k) + " s" +
                                std::to_string(c.st) + " p" + std::to_string(c.pad);
      s.compare(name + "_pool2d fwd", shape, dtype_name(dt), Suite::download(y), ref_y,
                Suite::tolerance(dt));
      s.compare(name + "_pool2d bwd", shape, dtype_name(dt), Suite::download(gx), ref_dx,
                2 * Suite::tolerance(dt));
    }
  }
}

// --- custom kernels (each guarded: a kernel family that is not there yet is not checked) -------

Tensor cuda_empty(const Shape& shape, DType dtype) {
  return empty(shape, {.dtype = dtype, .device = Device::cuda(0)});
}

#if __has_include("cuda/kernels/sgemm.h")
// stoke's SGEMM versions, NN / NT / TN, odd sizes and a misaligned (offset by one) A.
void check_sgemm(Suite& s) {
  for (auto [m, n, k] : {std::array<int64_t, 3>{64, 64, 64}, {127, 33, 65}, {200, 96, 300}}) {
    for (cuda::SgemmVersion v : cuda::kSgemmVersions) {
      for (int mode = 0; mode < 4; ++mode) {  // NN, NT, TN, NN with A offset by one element
        const bool ta = mode == 2, tb = mode == 1, shifted = mode == 3;
        Tensor a = randn({ta ? k * m + 1 : m * k + 1});
        Tensor a2 = a.narrow(0, shifted ? 1 : 0, m * k).view(ta ? Shape{k, m} : Shape{m, k});
        Tensor b = randn(tb ? Shape{n, k} : Shape{k, n});
        Tensor ref = ops::matmul(ta ? a2.t() : a2, tb ? b.t() : b);
        Tensor da = Suite::upload(a, DType::f32), db = Suite::upload(b, DType::f32);
        Tensor dc = cuda_empty({m, n}, DType::f32);
        cuda::sgemm(ta, tb, m, n, k, 1.0f, da.data<float>() + (shifted ? 1 : 0), ta ? m : k,
                    db.data<float>(), tb ? k : n, 0.0f, dc.data<float>(), n, cuda::current_stream(),
                    {.version = v});
        static constexpr const char* kModes[] = {" NN", " NT", " TN", " NN A+1"};
        s.compare(std::string("sgemm ") + cuda::sgemm_version_name(v) + kModes[mode],
                  dims({m, n, k}), "f32", Suite::download(dc), ref, 1e-4);
      }
    }
  }
}
#endif

#if __has_include("cuda/kernels/conv2d_implicit_gemm.h")
// stoke's implicit-GEMM convolution (f32, with bias) against ops::conv2d.
void check_conv2d_implicit_gemm(Suite& s) {
  struct Case {
    int64_t n, c, h, w, k, r, st, pad, groups;
  };
  for (Case c : {Case{2, 3, 8, 8, 4, 3, 1, 1, 1}, Case{4, 16, 15, 15, 8, 3, 2, 1, 1},
                 Case{2, 8, 7, 9, 8, 1, 1, 0, 1}, Case{2, 8, 9, 9, 6, 3, 1, 1, 2}}) {
    const cuda::Conv2dGeometry g{.batch = c.n,
                                 .channels = c.c,
                                 .height = c.h,
                                 .width = c.w,
                                 .out_channels = c.k,
                                 .kernel_h = c.r,
                                 .kernel_w = c.r,
                                 .stride_h = c.st,
                                 .stride_w = c.st,
                                 .pad_h = c.pad,
                                 .pad_w = c.pad,
                                 .groups = c.groups};
    Tensor x = randn({c.n, c.c, c.h, c.w}), w = randn({c.k, c.c / c.groups, c.r, c.r});
    Tensor bias = randn({c.k});
    Tensor ref = ops::conv2d(
        x, w, bias, {.stride = {c.st, c.st}, .padding = {c.pad, c.pad}, .groups = c.groups});
    Tensor dx = Suite::upload(x, DType::f32), dw = Suite::upload(w, DType::f32);
    Tensor db = Suite::upload(bias, DType::f32), y = cuda_empty(ref.shape(), DType::f32);
    for (int tile : cuda::conv2d_implicit_gemm_tile_sizes()) {
      cuda::conv2d_implicit_gemm_forward(g, dx.data<float>(), dw.data<float>(), db.data<float>(),
                                         y.data<float>(), cuda::current_stream(), tile);
      s.compare("conv2d_implicit_gemm tile " + std::to_string(tile),
                dims({c.n, c.c, c.h, c.w}) + " k" + std::to_string(c.k) + " s" +
                    std::to_string(c.st) + " g" + std::to_string(c.groups),
                "f32", Suite::download(y), ref, 1e-4);
    }
  }
}
#endif

#if __has_include("cuda/kernels/reduce.h") && __has_include("cuda/kernels/softmax.h")
// Reductions (rows and columns) and softmax over the last and a middle dim.
void check_reduce_softmax(Suite& s) {
  for (auto [outer, n, inner] : {std::array<int64_t, 3>{7, 33, 1}, {3, 2000, 1}, {4, 50, 9}}) {
    for (DType dt : kFloatTypes) {
      Tensor x = randn({outer, n, inner}), rx = Suite::rounded(x, dt);
      Tensor dx = Suite::upload(x, dt), out = cuda_empty({outer, inner}, dt);
      const std::string shape = dims({outer, n, inner}), dn = dtype_name(dt);
      const double tol = Suite::tolerance(dt);
      cuda::reduce(cuda::ReduceOp::sum, dt, dx.data_ptr(), out.data_ptr(), nullptr, outer, n, inner,
                   cuda::current_stream());
      s.compare("reduce sum", shape, dn, Suite::download(out), ops::sum(rx, {1}), tol);
      cuda::reduce(cuda::ReduceOp::max, dt, dx.data_ptr(), out.data_ptr(), nullptr, outer, n, inner,
                   cuda::current_stream());
      s.compare("reduce max", shape, dn, Suite::download(out), ops::max(rx, 1), tol);
      Tensor y = cuda_empty(x.shape(), dt);
      cuda::softmax_forward(dt, dx.data_ptr(), y.data_ptr(), outer, n, inner, false,
                            cuda::current_stream());
      s.compare("softmax", shape, dn, Suite::download(y), ops::softmax(rx, 1), tol);
      cuda::softmax_forward(dt, dx.data_ptr(), y.data_ptr(), outer, n, inner, true,
                            cuda::current_stream());
      s.compare("log_softmax", shape, dn, Suite::download(y), ops::log_softmax(rx, 1), tol);
    }
  }
}
#endif

// Every check, in the order the table lists them: the vendor calls, then the custom kernels.
const std::vector<std::pair<const char*, void (*)(Suite&)> > kChecks = {
    {"cublas gemm", check_cublas_gemm},
    {"cudnn conv2d", check_cudnn_conv},
    {"cudnn batch_norm", check_cudnn_batch_norm},
    {"cudnn pool2d", check_cudnn_pool},
#if __has_include("cuda/kernels/sgemm.h")
    {"sgemm", check_sgemm},
#endif
#if __has_include("cuda/kernels/conv2d_implicit_gemm.h")
    {"conv2d_implicit_gemm", check_conv2d_implicit_gemm},
#endif
#if __has_include("cuda/kernels/reduce.h") && __has_include("cuda/kernels/softmax.h")
    {"reduce/softmax", check_reduce_softmax},
#endif
};

}  // namespace

int main() {
  if (!cuda::is_available()) {
    std::printf("stoke-gpu-selftest: no CUDA device (%s): skipped\n",
                cuda::device_unavailable_reason().c_str());
    return 0;
  }
  cuda::register_cuda_allocator();
  manual_seed(1234);
  std::printf("stoke-gpu-selftest on %s\n", cuda::device_properties(0).summary().c_str());
  Suite suite;
  auto run = [&](const char* name, void (*fn)(Suite&)) {
    try {
      fn(suite);
    } catch (const std::exception& e) {
      // One failing call must not hide the rest of the table.
      suite.fail(name, e.what());
    }
  };
  for (const auto& [name, fn] : kChecks) run(name, fn);

  std::printf("%-36s %-28s %-5s %11s %11s  %s\n", "op", "shape", "dtype", "max abs err",
              "max rel err", "result");
  int failures = 0;
  for (const auto& r : suite.rows) {
    failures += r.pass ? 0 : 1;
    std::printf("%-36s %-28s %-5s %11.3e %11.3e  %s%s%s\n", r.op.c_str(), r.shape.c_str(),
                r.dtype.c_str(), r.max_abs, r.max_rel, r.pass ? "pass" : "FAIL",
                r.note.empty() ? "" : ": ", r.note.c_str());
  }
  std::printf("stoke-gpu-selftest: %zu checks, %d failed; %s\n", suite.rows.size(), failures,
              cuda::caching_allocator().summary(0).c_str());
  return failures == 0 ? 0 : 1;
}

#endif  // STOKE_SELFTEST_CUDA
